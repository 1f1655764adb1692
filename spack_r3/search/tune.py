"""``r3 tune`` without its command line: captures in, confirmed winners out.

    plan = plan_targets(workspace, captures, kernels=[], min_share=0.02)
    results, skipped = tune(workspace, plan.targets, TuneOptions(budget=60, workers=2))

Each target (a kernel and its recorded instances) gets one study, searched on the
replay pool; then every kernel's best candidates are confirmed together (see
``confirm``) and the winner of each is picked, then measured again alone: the
speedup it reports does not come from the pairs that picked it.
"""

import os
from dataclasses import dataclass, field
from typing import List, Optional

from .. import backends, cxxnames, report
from ..capture import load_capture_dir, run_key
from ..device import geometry as device_geometry
from ..errors import R3Error, RewriteUncheckable
from ..record.offload import region_key
from ..record.profiles import tuned_shares
from ..compile import module as replay_module
from ..compile import specialize
from ..replay import cachestate, weighted
from ..replay.cachestate import AUTO
from ..compile.stages import polly_available
from ..replay.server import TIMEOUT_S, ReplayPool, omp_environment
from ..data import COMPILE_ERROR, OK, WARM, WRONG_OUTPUT, Variant
from ..compile.pipeline import as_built, format_spec
from ..model.client import ModelError
from .bayes import Study, StudyGroup, Target
from .trials import trial_variant
from .mutators import make_mutator
from .patterns import Patterns
from .remix import Remix, RemixOptions
from .confirm import confirm, measure_again
from .lanes import lane_count, search_in_lanes
from .noise import INDISTINCT, MIN_GAIN
from .openmp import adds_threads
from .results import KernelResult, kernel_result, load_result, pick, result_digest, save_results
from .simplify import settings, simplify
from .spending import confirmation_spent, search_spending
from .space import KernelFacts, Space
from .store import confirming, exclusive, storage


STALL_STEP = 5  # evaluations between two looks at whether the pipeline search still climbs
MIN_SHARE = 0.02  # the smallest share of the application's time worth tuning (r3 tune --min-share)
MAX_SERIAL_LOOKUP = 200  # codes looked through for a serial contender (a search holds fewer)


@dataclass
class TuneOptions:
    budget: int = 60  # evaluations per kernel
    workers: int = 1
    sampler: str = "tpe"
    seed: Optional[int] = None
    pairs: int = 5  # pairs per evaluation during the search
    confirm_pairs: int = 11  # pairs per confirmation round
    confirm_rounds: int = 3
    candidates: int = 3  # best candidates of each kernel that are confirmed (after a race: ``contenders``)
    timeout: float = TIMEOUT_S
    # The outer loop (``remix``): a mutator (``mutators.make_mutator``; None: pipelines
    # only) and the share of each kernel's budget its source variants get.
    mutator: Optional[object] = None
    remix_share: float = 0.5  # held for the outer loop; half of it goes back while the pipelines climb
    stall_patience: int = 20  # evaluations without a new best after which a search has stalled (0: fixed split)
    child_budget: int = 10
    repairs: int = 2
    fallback_rules: bool = False  # a failing model endpoint: go on with the rules mutator
    storage: Optional[str] = None  # where the studies are kept (``store.storage``): the workspace's journal
    cluster: Optional[str] = None  # a Dask cluster to evaluate on (``scale.cluster``); None: the local pool
    kernels_at_once: Optional[int] = (
        None  # kernels searched side by side (``lanes``); None: 1 locally, more on a cluster
    )
    serial: bool = False  # candidates run one thread (no threads setting, Polly parallel, threaded rewrite)


@dataclass
class TunePlan:
    """What ``plan_targets`` chose: the kernels to tune, and why the others are not."""

    targets: List[Target] = field(default_factory=list)
    skipped: List[str] = field(default_factory=list)  # "kernel: why it is not tuned"
    caches: List[str] = field(default_factory=list)  # "kernel: the cache state it is measured in, and why"

    @property
    def covered_share(self):
        return sum(t.share for t in self.targets)


def plan_targets(workspace, captures, kernels=(), min_share=MIN_SHARE, tolerance=None, cache=WARM):
    """Group captures into kernels (instances together) and choose what to tune:
    the named kernels, or every replayable kernel with at least ``min_share`` of the run.
    ``cache``: the state every kernel's timed runs start in (data.CACHE_STATES), or
    ``cachestate.AUTO`` for the one its application leaves between its calls."""
    groups = {}
    for c in sorted(captures, key=lambda c: c.instance):
        groups.setdefault((c.kernel, c.compile_dir, c.source_file), []).append(c)
    wanted = set()
    if kernels:
        names = [k for k, _, _ in groups]
        for ref in kernels:
            _, found = cxxnames.best_matches(ref, names)
            if not found:  # an offload region by its function and line (its name holds its file's ids)
                found = [n for n in names if region_key(n) == ref != n]
            if not found:
                raise R3Error("no capture of kernel '%s' (see: r3 kernels)" % ref)
            wanted |= set(found)
    plan = TunePlan()
    for (kernel, _, _), caps in sorted(groups.items(), key=lambda kv: -(kv[1][0].app.get("share") or 0)):
        share = caps[0].app.get("share") or 0.0
        name = cxxnames.display(kernel)
        if kernels and kernel not in wanted:
            continue
        if caps[0].unreplayable:
            plan.skipped.append("%s: cannot replay: %s" % (name, caps[0].unreplayable))
        elif not kernels and share < min_share:
            plan.skipped.append("%s: %.1f%% of the run, under --min-share" % (name, 100 * share))
        else:
            state = cache
            if cache == AUTO:
                choice = cachestate.choose(caps[0], captures)
                state = choice.state
                plan.caches.append(
                    "%s: %stimed with %s caches: %s"
                    % (
                        name,
                        "unless its recorded calls replay as a sequence, " if len(caps) > 1 else "",
                        choice.state,
                        choice.reason,
                    )
                )
            # Calls picked where the kernel's time goes are timed each, weighed by their
            # shares (replay.weighted); the first calls of one run, as their sequence
            # (replay.sequence).
            weights = weighted.weights_of([c.selection for c in caps])
            sequence = weights is None and len(caps) > 1 and len({run_key(c) for c in caps}) == 1
            plan.targets.append(
                Target(
                    kernel,
                    [workspace.capture_dir(c.id) for c in caps],
                    share,
                    bool(caps[0].launch.get("openmp")),
                    tolerance=caps[0].tolerance if tolerance is None else tolerance,
                    cache=state,
                    sequence=sequence,
                    weights=weights,
                )
            )
    _weigh_as_tuned(plan, captures, named=bool(kernels))
    return plan


def _weigh_as_tuned(plan, captures, named=False):
    """Each target's share becomes its weight in a build that tunes them all: its time with
    its callees, less its calls from other targets (capture.tuned_shares). Its own code's
    share (what picked it) made a caller of other kernels a small part of LULESH's run where
    its tuned copy ran far more of it; and two kernels that do not nest never add past the run.
    A target only other targets call runs as their copy: not searched, unless ``named``."""
    runs = {c.app.get("run") for c in captures if c.kernel in {t.kernel for t in plan.targets}}
    if len(runs) != 1 or not isinstance(next(iter(runs)), str):
        return
    weights = tuned_shares(next(iter(runs)), [t.kernel for t in plan.targets])
    for t in list(plan.targets):
        if t.kernel not in weights:
            continue
        t.share = weights[t.kernel]
        if not t.share and not named:
            plan.targets.remove(t)
            plan.skipped.append(
                "%s: called only by other kernels tuned here, whose builds run it as their own "
                "copy" % cxxnames.display(t.kernel)
            )


def kernel_facts(target, cores, serial=False):
    """What the kernel's search space depends on (``serial``: candidates run one thread)."""
    capture = load_capture_dir(target.captures[0], verify_digests=False)
    with open(os.path.join(target.captures[0], "module.bc"), "rb") as f:
        try:
            ir = replay_module.extract_kernel(f.read(), capture.kernel, [g["name"] for g in capture.globals])
        except Exception:  # replay itself will say what is wrong with this capture
            ir = ""
    built_cpu, built_features = replay_module.built_target(ir, capture.kernel) if ir else ("", "")
    return KernelFacts(
        kernel=capture.kernel,
        parallel=target.parallel,
        dispatch_loops=replay_module.dispatch_loops(ir),
        tolerance=target.tolerance,
        cores=1 if serial else cores,
        serial=serial,
        polly=polly_available(_record_clang(capture)),
        teams=backends.of_capture(capture) is backends.OFFLOAD and "@__kmpc_fork_teams(" in ir,
        geometry=device_geometry.space_params(capture, target.captures[0]),
        built_target=built_cpu,
        retarget=bool(ir) and replay_module.behind_host(built_features),
        built_fma=replay_module.contracts_fma(built_features),
        specialize=tuple(specialize.choices(_constant_args(target, ir))),
    )


def _constant_args(target, ir):
    """The kernel's recorded-constant integer arguments (``specialize.constant_args``) over
    every capture of ``target``; none where its IR cannot be read."""
    if not ir:
        return []
    try:
        return specialize.constant_args(
            [load_capture_dir(c, verify_digests=False) for c in target.captures],
            ir,
            load_capture_dir(target.captures[0], verify_digests=False).kernel,
        )
    except Exception:  # (llvmlite refusing the IR: replay will say what is wrong with it)
        return []


def contenders(study, n, most=None):
    """What a study sends to confirmation: its ``n`` best codes, and more (up to ``most``,
    4n by default) while their search values lie within noise (``noise.INDISTINCT``) of
    the best. The race (``confirm(keep=n)``) then keeps the ``n`` best of one round for
    the others."""
    ranked = study.best(most or 4 * n)
    if not ranked:
        return []
    floor = ranked[0].value / (1 + INDISTINCT)
    sent = [(trial_variant(t), t.value) for i, t in enumerate(ranked) if i < n or t.value >= floor]
    if all(adds_threads(v) for v, _ in sent):
        sent += _best_without_added_threads(study)
    return sent


def _best_without_added_threads(study):
    """[the study's best code that starts no threads of its own and beat the build], or [].

    Where every contender adds threads, one of them is sent beside them: a threaded
    candidate's time depends on every core being free, so a confirmation that finds the
    machine busier than the search did can measure them all below the build, and the
    kernel would keep its build though a serial rewrite had verified and paid
    (docs/tune.md, "What shaped the search")."""
    for t in study.best(MAX_SERIAL_LOOKUP):
        v = trial_variant(t)
        if not adds_threads(v):
            return [(v, t.value)] if t.value > 1.0 else []
    return []


def _simplifies(best):
    """Whether the best of ``best`` (contenders) is simplified; how many evaluations that takes."""
    return len(settings(best[0][0])) if best and best[0][1] > 1.0 else 0


def _candidates(pool, target, study, options):
    """The study's contenders, and the best without the settings that do not matter."""
    best = contenders(study, options.candidates)
    if _simplifies(best):
        lean = simplify(pool.servers, target, best[0][0], best[0][1], pairs=options.pairs, timeout=options.timeout)
        if lean != best[0][0]:
            best.append((lean, None))
    return best


def pipeline_search(study, servers, options, progress=None):
    """The original's search over pipelines and launch settings; returns the budget left
    to the outer loop over source variants.

    With a mutator it runs up to ``1 - remix_share`` of the budget, then goes on, up to
    half of the outer loop's share, for as long as its best still moves (a new best beyond
    noise within the last ``stall_patience`` evaluations). Rewrites are measured with the
    pipeline that won (``Remix.inherit``): while the pipeline search still climbs, a
    rewrite would be measured with a pipeline about to be beaten. A search that has
    plateaued before its share is spent hands the rest to the rewrites at once
    (``plateaued``): from a quarter of the budget on (or its seed pipelines, if more), at
    most ``plateau_patience`` evaluations without a new best beyond noise (a chain of two
    matrix products settles its pipelines long before its half is spent, and the remix
    must still reach the interchange that makes it fast). The split is kept in the
    study, so a resumed run keeps it. ``stall_patience`` 0: the split of ``remix_share``
    as it is, but for sweeps."""
    held = int(round(options.budget * options.remix_share)) if options.mutator else 0
    key = {"budget": options.budget, "held": held}
    saved = study.study.user_attrs.get("split")
    if saved and saved.get("key") == key:
        study.run(servers, options.budget - saved["remix"], progress)
        return saved["remix"]
    first, most = options.budget - held, options.budget - (held + 1) // 2
    step = max(len(servers), STALL_STEP)
    plateau = None
    if held and options.stall_patience:
        floor = min(first, max(options.budget // 4, len(study.space.seeds())))
        patience = plateau_patience(options)
        study.run(servers, floor, progress)
        while len(study.trials()) < first and still_climbing(study.curve(), patience):
            study.run(servers, min(first, len(study.trials()) + step), progress)
        if len(study.trials()) < first:
            plateau = len(study.trials())
    if plateau is None:
        study.run(servers, first, progress)
        # A sweep of a block of interacting settings (``bayes.Study``: 28 Polly points, up to
        # a third of a run) is paid from the held share, up to half of it. Paid from the first share, it
        # left the pipeline's own search too few evaluations to reach what the Bayesian search
        # alone found (bench/README.md, "Measurements behind design choices").
        while len(study.trials()) < min(most, first + swept(study)):
            study.run(servers, min(most, first + swept(study)), progress)
        limit = most if options.stall_patience else len(study.trials())
        while len(study.trials()) < limit and still_climbing(study.curve(), options.stall_patience):
            study.run(servers, min(limit, len(study.trials()) + step), progress)
    remix = max(0, options.budget - len(study.trials())) if held else 0
    study.study.set_user_attr(
        "split", {"key": key, "remix": remix, "handover": len(study.trials()), "plateau": plateau is not None}
    )
    return remix


def plateaued(study):
    """Whether the study's pipeline search handed its budget to the rewrites early, on a
    plateau (``pipeline_search``)."""
    return bool((study.study.user_attrs.get("split") or {}).get("plateau"))


def plateau_patience(options):
    """Evaluations without a new best after which a pipeline search that has not spent its
    share has plateaued: ``stall_patience``, less on small budgets (a sixth of the
    budget, at least ``STALL_STEP``): at 60, 10 evaluations."""
    return min(options.stall_patience, max(STALL_STEP, options.budget // 6))


def swept(study):
    """How many of a study's evaluations were points of a sweep."""
    return sum(1 for t in study.trials() if t.user_attrs.get("sweep"))


def still_climbing(curve, patience):
    """Whether a search's best (``curve``: best after each evaluation) rose beyond noise
    (``MIN_GAIN``) within its last ``patience`` evaluations."""
    if len(curve) <= patience or curve[-1] is None:
        return True
    before = curve[-patience - 1]
    return before is None or curve[-1] > before * MIN_GAIN


def remix_search(workspace, store, target, facts, study, pool, options, budget, patterns, progress, say, warn):
    """The outer loop over source variants; returns the kernel's studies as one search."""
    remix = Remix(
        workspace,
        store,
        target,
        facts,
        options.mutator,
        RemixOptions(
            budget=budget,
            child_budget=options.child_budget,
            repairs=options.repairs,
            sampler=options.sampler,
            seed=options.seed,
            pairs=options.pairs,
            timeout=options.timeout,
            keep_cut=plateaued(study),
        ),
        patterns,
        inherit=[t.params for t in study.best(2)],
        noise=study.pair_noises(),
    )
    base_best = max([t.value for t in study.best(1)] + [1.0])
    try:
        # More of the original's own search: while a model answers, or when rewrites run out.
        remix.run(pool.servers, base_best, progress, say, lambda n: study.extend(pool.servers, n))
    except RewriteUncheckable as err:  # its pipelines stay tuned; no rewrite can be checked
        warn("warning: %s: no source rewrite is tried: %s" % (cxxnames.display(target.kernel), err))
        return study
    except ModelError as err:
        if not options.fallback_rules:
            raise
        warn("warning: %s; going on with the rules mutator" % err)
        options.mutator = make_mutator("rules")
        return remix_search(
            workspace, store, target, facts, study, pool, options, budget, patterns, progress, say, warn
        )
    target.outcome.spending = search_spending(study, remix)  # (the kernel's result reports it)
    checks = [c.status for c in remix.children if c.status not in (OK, "pending")]
    return StudyGroup([study] + [s for _, s in remix.studies()], checks)


def confirm_searches(servers, searches, n, **kw):
    """``searches``: (Target, study, first candidates) each; confirmed side by side in a
    race that keeps ``n`` of each (see ``confirm``), returns each one's list of Confirmed.
    A search none of whose candidates holds gets its next ``n`` best confirmed as well,
    once: where gains sit at the noise floor the best few by search value are the
    luckiest as much as the best (bench/README.md, "Measurements behind design choices")."""
    confirmed = confirm(servers, [(t, first) for t, _, first in searches], keep=n, **kw)
    retry = [i for i, c in enumerate(confirmed) if pick(c) is None]
    more = []
    for i in retry:
        tried = [c.variant for c in confirmed[i]]
        ranked = [(trial_variant(t), t.value) for t in searches[i][1].best(len(tried) + n)]
        more.append((i, [(v, value) for v, value in ranked if v not in tried][:n]))
    more = [(i, cands) for i, cands in more if cands]
    if more:
        if kw.get("progress"):
            kw["progress"]("no candidate held for %d search(es): confirming their next %d" % (len(more), n))
        for (i, _), extra in zip(more, confirm(servers, [(searches[i][0], c) for i, c in more], **kw)):
            confirmed[i] = confirmed[i] + extra
    return confirmed


def _confirm_key(study, options):
    return [
        len(study.trials()),
        options.candidates,
        options.confirm_rounds,
        options.confirm_pairs,
        options.mutator.name if options.mutator else "none",
    ]


def _saved_result(workspace, target, study, options):
    """The study's confirmed result, where it was confirmed with the same trials and
    settings: the study keeps which (the key and the result's digest), the result itself
    is the one in ``results/``. A result that is not that one (gone, or another study's of
    the same kernel since) is confirmed again."""
    saved = study.study.user_attrs.get("confirmed")
    if not saved or saved.get("key") != _confirm_key(study, options):
        return None
    if "result" in saved:  # a study confirmed by an r3 that kept the result in it
        return KernelResult.from_json(saved["result"])
    result = load_result(workspace, os.path.basename(target.captures[0]))
    return result if result is not None and result_digest(result) == saved.get("result_sha256") else None


def _baseline_problem(pool, target, timeout):
    """Why the baseline itself fails the replay check, or None. Every candidate is held to
    the recording, so when the kernel compiled as its build compiled it (``as_built``) does
    not reproduce it, no candidate can verify: e.g. a kernel whose result depends on what
    the recording could not keep."""
    capture = load_capture_dir(target.captures[0], verify_digests=False)
    baseline = as_built(capture)
    ev = target.submit(pool.servers[0], Variant(pipeline=baseline), repeat=1, timeout=timeout)
    if ev.status == OK:
        return None
    if ev.status == COMPILE_ERROR:  # e.g. the record clang is gone: nothing to measure against
        return "its baseline (%s, the kernel as built) does not build: %s" % (
            format_spec(baseline),
            (ev.diagnostics.strip().splitlines() or ["?"])[-1],
        )
    what = "max relative error %.2g" % ev.max_rel_error if ev.status == WRONG_OUTPUT else ev.status
    return "its baseline (%s, the kernel as built) does not reproduce the recording: %s" % (format_spec(baseline), what)


# Replay's call and the application's may differ by caches and threads; beyond this factor
# (time-weighted over the instances) the capture does not stand for the kernel's calls.
UNREPRESENTATIVE = 3.0


def instances_check(pool, target, timeout):
    """How the kernel's captured calls, replayed as built, compare with its calls in the
    application: (one row per instance: weight, calls it stands for, its time in the
    application, its replay time; the time-weighted ratio of replay to application; why
    they do not stand for the kernel's calls, or None). An instance picked by record
    (``--instances cover``) is set against its own call in the logged run, a first call
    against the kernel's mean call (a first call can be far cheaper than the calls that
    carry the time: docs/tune.md, "What shaped the search")."""
    rows, calls = [], 0
    for i, cdir in enumerate(target.captures):
        capture = load_capture_dir(cdir, verify_digests=False)
        if i == 0:  # the kernel's calls in the application, as the first capture's run counted them
            calls = int(capture.app.get("calls") or 0)
        sel = capture.selection or {}
        its_calls = int(capture.app.get("calls") or 0)
        app_s = sel.get("call_s") or ((capture.app.get("total_s") or 0.0) / its_calls if its_calls else None)
        # (paired runs: the baseline's time as a search measures it; a plain repeat's runs
        # include a fresh process's first calls)
        ev = pool.servers[0].submit(
            cdir,
            Variant(pipeline=as_built(capture)),
            pairs=3,
            tolerance=target.tolerance,
            cache=target.cache,
            timeout=timeout,
        )
        rows.append(
            {
                "weight": target.weights[i] if target.weights else 1.0 / len(target.captures),
                "calls": sel.get("calls") or its_calls,
                "app_s": app_s,
                "replay_s": ev.baseline_median_s if ev.status == OK else None,
                "picked": bool(sel),
                "threads": capture.launch.get("threads"),
            }
        )
        if not target.weights:  # the first call (or the sequence) is what is timed
            break
    return (rows,) + represents(rows, calls)


def represents(rows, calls):
    """(replay's call against the application's, time-weighted; why the instances do not
    stand for the kernel's calls, or None) from ``instances_check``'s rows; a kernel called
    once is its own instance (None)."""
    known = [r for r in rows if r["app_s"] and r["replay_s"]]
    if not known:
        return None, None
    ratio = sum(r["weight"] * r["replay_s"] / r["app_s"] for r in known) / sum(r["weight"] for r in known)
    if calls <= 1 or 1 / UNREPRESENTATIVE <= ratio <= UNREPRESENTATIVE:
        return ratio, None
    problem = "its captured call%s replay%s in %s, its calls in the application take %s (%.2fx)" % (
        "s" if len(known) > 1 else "",
        "" if len(known) > 1 else "s",
        report.seconds(sum(r["weight"] * r["replay_s"] for r in known)),
        report.seconds(sum(r["weight"] * r["app_s"] for r in known)),
        ratio,
    )
    if not any(r["picked"] for r in rows):
        problem += "; the first call is not where the time goes: record with --instances cover"
    else:
        problem += "; caches or threads differ from the application's"
    return ratio, problem


def _sequence_or_not(pool, target, timeout, say):
    """Whether the kernel's recorded calls are timed as one sequence: they merge into one
    (``replay.sequence``) and its baseline reproduces every one of them; else its first
    call is, repeated (``target.sequence`` says which, and so does a line). Returns
    ``target.sequence``."""
    name = cxxnames.display(target.kernel)
    try:
        pool.servers[0].load(target.captures[0], sequence=target.captures)
        problem = _baseline_problem(pool, target, timeout)
    except R3Error as err:
        problem = str(err)
    target.sequence = problem is None
    if problem:
        say("%s: timed as its first recorded call, repeated: %s" % (name, problem))
    else:
        say("%s: timed as the sequence of its %d recorded calls, in warm caches" % (name, len(target.captures)))
    return target.sequence


def _record_clang(capture):
    return capture.compile_command[0] if capture.compile_command else None


def tune(workspace, targets, options, progress=None, say=None, warn=None):
    """Search and confirm every target; returns (KernelResult list, skipped lines).
    ``say``: progress lines; ``warn``: lines the user must see even with --json."""
    say = say or (lambda line: None)
    warn = warn or say
    store = storage(workspace, options.storage)
    # the workers run the OpenMP runtime as the application did (its affinity, wait policy)
    omp_env = omp_environment([load_capture_dir(t.captures[0], verify_digests=False) for t in targets])
    if omp_env:
        say("replay runs OpenMP as the application did: %s" % " ".join("%s=%s" % kv for kv in sorted(omp_env.items())))
    with open_pool(workspace, options, say, omp_env) as pool:
        patterns = Patterns(workspace) if options.mutator else None
        lanes = lane_count(options.kernels_at_once, len(pool.servers), len(targets), options.cluster, warn)
        if lanes > 1:
            say(
                "searching %d kernels at once, %d of the %d workers each"
                % (lanes, len(pool.servers) // lanes, len(pool.servers))
            )

        def search(lane, target):
            return _search(workspace, store, lane, target, options, patterns, progress, say, warn)

        outcomes = search_in_lanes(pool, targets, lanes, search)
        studied = [o for o in outcomes if not isinstance(o, str)]
        skipped = [o for o in outcomes if isinstance(o, str)]
        # One process at a time confirms a study, and keeps the result in it: a run beside
        # this one (the same study, trials and settings) takes that result instead of its own.
        with confirming(workspace, [s.name for _, s in studied]):
            results = confirmed_results(workspace, pool, studied, options, say)
    save_results(workspace, results)
    return results, skipped


def _search(workspace, store, pool, target, options, patterns, progress, say, warn):
    """One kernel's search (pipelines, then source variants) on ``pool``: (target, its
    studies), or the line saying why it is not tuned."""
    # A sequence is kept only when its baseline reproduced every call: checked already.
    checked = target.sequence and _sequence_or_not(pool, target, options.timeout, say)
    facts = kernel_facts(target, pool.cores_per_worker, options.serial)
    study = Study(
        store,
        target,
        Space(facts),
        sampler=options.sampler,
        seed=options.seed,
        pairs=options.pairs,
        timeout=options.timeout,
    )
    try:
        if not study.trials() and not checked:  # a resumed study had its baseline checked
            problem = _baseline_problem(pool, target, options.timeout)
            if problem:
                raise R3Error(problem)
        target.instances, target.replay_ratio, target.unrepresentative = instances_check(pool, target, options.timeout)
        if target.unrepresentative:
            warn(
                "warning: %s is not represented by its captures: %s"
                % (cxxnames.display(target.kernel), target.unrepresentative)
            )
        elif target.weights:
            say(
                "%s: timed on %d calls picked where its time goes, weighed %s"
                % (
                    cxxnames.display(target.kernel),
                    len(target.captures),
                    " / ".join("%.0f%%" % (100 * w) for w in target.weights),
                )
            )
        remix_budget = pipeline_search(study, pool.servers, options, progress)
        target.outcome.spending = search_spending(study)
        if remix_budget:
            # The outer loop keeps its children in one file (remix.py): one process at
            # a time runs it; one that waited resumes what the other left, spent.
            with exclusive(workspace, ["remix " + study.name]):
                study.refresh()
                study = remix_search(
                    workspace, store, target, facts, study, pool, options, remix_budget, patterns, progress, say, warn
                )
    except R3Error as err:
        if isinstance(err, ModelError):
            raise
        return "%s: %s" % (cxxnames.display(target.kernel), err)
    return target, study


def open_pool(workspace, options, say, omp_env=None):
    """The replay workers candidates are evaluated on: the local pool, or a Dask cluster's
    (``scale``: the same ``servers`` and ``cores_per_worker``)."""
    if not options.cluster:
        return ReplayPool(options.workers, timeout=options.timeout, cache_dir=workspace.cache_dir, env=omp_env)
    from ..scale.cluster import open_pool as open_dask_pool  # Dask only where asked for

    pool = open_dask_pool(options.cluster, workspace, options.timeout, say, env=omp_env)
    say(pool.describe())
    return pool


def confirmed_results(workspace, pool, studied, options, say):
    """Each study's confirmed KernelResult: confirmed before (``_saved_result``), or
    confirmed now, saved in ``results/`` and named in its study."""
    for _, study in studied:
        study.refresh()
    # A study confirmed before with the same trials and settings keeps its result.
    saved = {s.name: _saved_result(workspace, t, s, options) for t, s in studied}
    todo = [(t, s) for t, s in studied if saved[s.name] is None]
    candidates = [(t, s, _candidates(pool, t, s, options)) for t, s in todo]
    # On a cluster every winner is confirmed on one worker: its rounds' ratios pool only
    # times from one node (``scale.pool.DaskPool.confirm_servers``).
    confirmers = pool.confirm_servers
    confirmed = dict(
        zip(
            (s.name for _, s in todo),
            confirm_searches(
                confirmers,
                candidates,
                options.candidates,
                rounds=options.confirm_rounds,
                pairs=options.confirm_pairs,
                timeout=options.timeout,
                progress=say,
            )
            if todo
            else [],
        )
    )
    for (t, s), (_, _, cands) in zip(todo, candidates):
        t.outcome.spending = confirmation_spent(
            t.outcome.spending,
            cands,
            confirmed[s.name],
            captures=len(t.captures),
            simplified=_simplifies(cands),
        )
    picked = [(t, s, pick(confirmed[s.name])) for t, s in todo]
    picked = [(t, s, best) for t, s, best in picked if best]
    again = dict(
        zip(
            (s.name for _, s, _ in picked),
            measure_again(
                confirmers,
                [(t, best.variant) for t, _, best in picked],
                rounds=options.confirm_rounds,
                pairs=options.confirm_pairs,
                timeout=options.timeout,
                progress=say,
            )
            if picked
            else [],
        )
    )
    results = []
    for target, study in studied:
        if study.name in again:
            target.outcome.spending = confirmation_spent(target.outcome.spending, [], [], again[study.name])
        if study.name in confirmed:
            result = kernel_result(target, study, confirmed[study.name], again.get(study.name))
            save_results(workspace, [result])  # before the study names it: a run beside this one reads it
            study.study.set_user_attr(
                "confirmed", {"key": _confirm_key(study, options), "result_sha256": result_digest(result)}
            )
        else:
            result = saved[study.name]
        results.append(result)
    return results

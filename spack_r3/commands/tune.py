"""Make the hot kernels faster: search compiler pipelines (Polly included) and launch
settings for each, and source rewrites of their units (rules, or a language model),
judged by replay, and report confirmed winners.

With --source and --run it records first (or reuses the captures of an identical
earlier record); without them it tunes the captures already in the workspace.
Each kernel gets one Optuna study in the workspace's journal (r3.journal, or
--storage), so a killed run resumes where it stopped, and runs on one workspace at
once share their studies.
"""

import json
import os

from .. import cxxnames
from ..capture import latest_run, list_captures, run_name
from ..data import CACHE_STATES
from ..device import hook as device_hook
from ..replay.cachestate import AUTO
from ..errors import R3Error
from ..fileutil import write_atomic
from ..model import client as model_client
from ..record.session import AUTO_MOST_CALLS, previous_record
from ..record.instances import COVER, MOST_INSTANCES
from ..record.session import record as record_tree
from ..report import ProgressBar, percent, say, warn
from ..search.results import results_table, write_report
from ..search.spending import spending_table
from ..search.mutators import make_mutator
from ..search.samplers import SAMPLERS
from ..search.store import exclusive, storage
from ..search.tune import MIN_SHARE, TuneOptions, plan_targets, tune as tune_targets
from ..userpaths import check_output_dir
from ..workspace import Workspace
from .common import (
    MOST_EVALUATIONS,
    MOST_KERNELS_AT_ONCE,
    MOST_PAIRS,
    MOST_ROUNDS,
    add_instances,
    add_json,
    add_kernels,
    add_spack_arguments,
    add_timeout,
    add_tolerance,
    check_instances,
    check_most,
    check_timeout,
    check_tolerance,
    record_spec_of,
)

description = "search compiler pipelines and launch settings for the hot kernels"
DEFAULTS = TuneOptions()  # the options' defaults are the search's own


def setup_parser(subparser):
    subparser.add_argument(
        "spec",
        nargs="?",
        default=None,
        help="Spack spec: record it through Spack (or reuse its record), tune, emit the tuned "
        "variant (--repo) and check it in the application (+r3 against ~r3)",
    )
    subparser.add_argument("--source", default=None, help="source tree to record first (never modified)")
    subparser.add_argument("--run", default=None, help="command that runs the application (with --source)")
    subparser.add_argument("--build", default=None, help="build command for the record (see r3 record --help)")
    add_kernels(
        subparser,
        help="tune this kernel (repeatable; default: every captured kernel with at least --min-share of the run)",
    )
    add_instances(
        subparser,
        help="which calls of each kernel to record. cover (the default): a first run logs "
        "every kernel's calls, and the calls that stand for where its time goes are captured "
        "(up to %d, one per stratum of equal time), each weighted by its share when a candidate "
        "is timed. N: the first N calls, replayed as one sequence in every timed run (data each "
        "call finds in its own place, as in the application). auto: as many first calls as it "
        "takes for the pages they touch to fill half this machine's last-level cache (at most %d)"
        % (MOST_INSTANCES, AUTO_MOST_CALLS),
        default=COVER,
    )
    subparser.add_argument(
        "--min-share",
        type=float,
        default=MIN_SHARE,
        metavar="F",
        help="smallest share of the application's time worth tuning (default %g)" % MIN_SHARE,
    )
    subparser.add_argument(
        "--budget",
        type=int,
        default=DEFAULTS.budget,
        metavar="N",
        help="evaluations per kernel (default %d)" % DEFAULTS.budget,
    )
    subparser.add_argument(
        "--workers",
        type=int,
        default=DEFAULTS.workers,
        metavar="N",
        help="replay workers evaluating in parallel, each pinned to its share of the CPUs",
    )
    subparser.add_argument(
        "--cluster",
        default=None,
        metavar="SPEC",
        help="evaluate on a Dask cluster instead of local workers: local:N (N worker processes "
        "here), tcp://HOST:PORT (a running scheduler), or a batch cluster's JSON file "
        "('config': the workspace's cluster.json); workers that cannot see the workspace "
        "are sent its captures once",
    )
    subparser.add_argument(
        "--kernels-at-once",
        type=int,
        default=None,
        metavar="N",
        help="kernels searched side by side, each on its own share of the workers (default: 1 "
        "with local workers; with --cluster, one per 2 of the cluster's workers)",
    )
    subparser.add_argument(
        "--sampler",
        choices=SAMPLERS,
        default=DEFAULTS.sampler,
        help="tpe (default: Bayesian, multivariate TPE with every fourth trial drawn at random) or random",
    )
    subparser.add_argument("--seed", type=int, default=DEFAULTS.seed, help="sampler seed (for repeatable searches)")
    add_tolerance(
        subparser,
        help="relative tolerance of floating-point results; fast-math and FMA changes are "
        "searched only when it is above 0 (default: the captures', else exact)",
    )
    subparser.add_argument(
        "--pairs", type=int, default=DEFAULTS.pairs, help="paired runs per evaluation (default %d)" % DEFAULTS.pairs
    )
    subparser.add_argument(
        "--confirm-pairs",
        type=int,
        default=DEFAULTS.confirm_pairs,
        help="paired runs per confirmation round of each winner candidate (default %d)" % DEFAULTS.confirm_pairs,
    )
    subparser.add_argument(
        "--confirm-rounds",
        type=int,
        default=DEFAULTS.confirm_rounds,
        help="confirmation rounds (default %d)" % DEFAULTS.confirm_rounds,
    )
    add_timeout(subparser, DEFAULTS.timeout, help="seconds before a candidate counts as hung")
    subparser.add_argument(
        "--storage",
        default=None,
        metavar="PATH|URL",
        help="where the studies are kept: a journal file (several runs, on several hosts over "
        "NFS, may share it) or a database URL (its driver needed); default: the "
        "workspace's r3.journal",
    )
    subparser.add_argument(
        "--cache",
        choices=CACHE_STATES + (AUTO,),
        default=AUTO,
        help="caches at the start of each timed run (see r3 replay --help); auto (default): "
        "per kernel, the state its application leaves them in between its calls, from "
        "what the recorded kernels touch (a kernel whose data the others push out of "
        "its cores' caches is measured with shared)",
    )
    subparser.add_argument(
        "--mutator",
        choices=("rules", "llm", "none"),
        default="rules",
        help="who proposes source rewrites: rules (default, no model), llm (a model through "
        "--llm-url) or none (compiler pipelines and launch settings only)",
    )
    subparser.add_argument(
        "--fallback-rules",
        action="store_true",
        help="with --mutator llm: go on with the rules when the model endpoint fails",
    )
    subparser.add_argument(
        "--remix-share",
        type=float,
        default=DEFAULTS.remix_share,
        metavar="F",
        help="share of each kernel's budget held for source variants (default %g); "
        "the pipeline search takes back up to half of it while its best still improves" % DEFAULTS.remix_share,
    )
    subparser.add_argument(
        "--stall-patience",
        type=int,
        default=DEFAULTS.stall_patience,
        metavar="N",
        help="evaluations without a new best (beyond 1%%%%) after which the pipeline search "
        "has stalled and hands the rest of the held budget to source variants "
        "(default %d; 0: --remix-share exactly)" % DEFAULTS.stall_patience,
    )
    subparser.add_argument(
        "--serial",
        action="store_true",
        help="candidates run one thread: no OpenMP threads setting, no Polly parallel code, "
        "no rewrite that adds threads (an MPI rank's kernels, one core each; or to see what "
        "the code itself gains)",
    )
    subparser.add_argument(
        "--child-budget",
        type=int,
        default=DEFAULTS.child_budget,
        metavar="N",
        help="Bayesian evaluations of each source variant that verifies (default %d)" % DEFAULTS.child_budget,
    )
    subparser.add_argument(
        "--repairs",
        type=int,
        default=DEFAULTS.repairs,
        metavar="N",
        help="times a rewrite that fails to compile or verify goes back to its mutator "
        "with the diagnostic (default %d)" % DEFAULTS.repairs,
    )
    device_hook.add_arguments(subparser)
    model_client.add_arguments(subparser)
    add_spack_arguments(subparser)
    subparser.add_argument(
        "--repo",
        default=None,
        metavar="DIR",
        help="with a spec: the Spack repository the tuned variant goes to (default: <workspace>/repos/r3tuned)",
    )
    subparser.add_argument(
        "--check-pairs",
        type=int,
        default=5,
        metavar="N",
        help="with a spec: paired application runs of +r3 against ~r3 (default 5; 0: no check)",
    )
    subparser.add_argument(
        "--check-kernel-pairs",
        type=int,
        default=3,
        metavar="N",
        help="with a spec: paired runs of the timed builds (+r3probes) for each tuned kernel's "
        "time inside the application (default 3; 0: not measured)",
    )
    subparser.add_argument(
        "--keep-variant",
        action="store_true",
        help="with a spec: keep the tuned variant as emitted even where the check finds it, or "
        "a kernel of it, slower in the application (to inspect it). By default such kernels are "
        "taken out and the rest measured again, and a variant that is not faster is withdrawn",
    )
    add_json(subparser, help="print the results as JSON")


def tune(args):
    for name in ("budget", "workers", "pairs", "confirm_pairs", "confirm_rounds", "child_budget"):
        if getattr(args, name) < 1:
            raise R3Error("--%s must be at least 1" % name.replace("_", "-"))
    if args.stall_patience < 0:
        raise R3Error("--stall-patience must be at least 0")
    if args.kernels_at_once is not None and args.kernels_at_once < 1:
        raise R3Error("--kernels-at-once must be at least 1")
    if not 0.0 <= args.remix_share < 1.0:
        raise R3Error("--remix-share must be in [0, 1)")
    for name in ("check_pairs", "check_kernel_pairs"):
        if getattr(args, name) < 0:
            raise R3Error("--%s must be at least 0 (0: none)" % name.replace("_", "-"))
    check_most(
        args,
        {
            "budget": MOST_EVALUATIONS,
            "child_budget": MOST_EVALUATIONS,
            "stall_patience": MOST_EVALUATIONS,
            "pairs": MOST_PAIRS,
            "confirm_pairs": MOST_PAIRS,
            "check_pairs": MOST_PAIRS,
            "check_kernel_pairs": MOST_PAIRS,
            "confirm_rounds": MOST_ROUNDS,
            "repairs": MOST_ROUNDS,
            "kernels_at_once": MOST_KERNELS_AT_ONCE,
        },
    )
    check_instances(args)
    if args.seed is not None and not 0 <= args.seed < 1 << 32:  # (numpy's seeds)
        raise R3Error("--seed must be in [0, 2**32)")
    cpus = len(os.sched_getaffinity(0))
    if args.workers > cpus:  # workers pinned to CPUs they share: their timings mean nothing
        raise R3Error("--workers %d: this process may use %d CPU(s); at most %d worker(s)" % (args.workers, cpus, cpus))
    if args.cluster and args.workers != 1:
        raise R3Error("--workers is for the local pool: with --cluster the cluster's workers evaluate")
    if (
        args.cluster
        and args.cluster.startswith("local:")
        and args.cluster[6:].isdigit()
        and int(args.cluster[6:]) > cpus
    ):
        raise R3Error("--cluster %s: this process may use %d CPU(s); at most local:%d" % (args.cluster, cpus, cpus))
    check_timeout(args)
    check_tolerance(args)
    if not 0.0 <= args.min_share <= 1.0:
        raise R3Error("--min-share must be in [0, 1]")
    gpus = device_hook.targets(args)
    mutator = _mutator(args)
    if not args.spec and bool(args.source) != bool(args.run):
        raise R3Error("--source and --run go together (or give neither, to tune the workspace's captures)")
    ws = Workspace(args.workspace)
    check_output_dir(ws.root, "--workspace")  # (its results and reports are written)
    if args.repo:  # (written after the search, which may take hours)
        check_output_dir(args.repo, "--repo")
    if args.cluster:
        from ..scale.cluster import check  # Dask only where asked for

        check(args.cluster, ws)
    if args.storage:
        storage(ws, args.storage)  # a storage that cannot open says so before the record, not after
    progress = (lambda line: None) if args.json else (lambda line: say("==> " + line))
    captures = _captures(ws, args, progress)
    plan = plan_targets(ws, captures, args.kernel, args.min_share, args.tolerance, cache=args.cache)
    for line in plan.skipped:
        progress("not tuned: " + line)
    for line in device_hook.attach(plan.targets, captures, gpus):
        progress(line)
    for line in plan.caches:
        progress(line)
    if not plan.targets:
        raise R3Error("no replayable kernel to tune in %s (see: r3 kernels)" % ws.root)
    progress(
        "tuning %d kernel(s) covering %s of the application's run time, %d evaluations each, %s"
        % (
            len(plan.targets),
            percent(plan.covered_share),
            args.budget,
            "on the Dask cluster " + args.cluster if args.cluster else "%d worker(s)" % args.workers,
        )
    )
    bar = ProgressBar()

    def on_progress(p):
        best = "-" if p.best is None else "%.2fx" % p.best
        bar.update(cxxnames.display(p.kernel), p.done, p.budget, "best %s, %d failed" % (best, p.failed))

    options = TuneOptions(
        budget=args.budget,
        workers=args.workers,
        sampler=args.sampler,
        seed=args.seed,
        pairs=args.pairs,
        confirm_pairs=args.confirm_pairs,
        confirm_rounds=args.confirm_rounds,
        timeout=args.timeout,
        mutator=mutator,
        remix_share=args.remix_share if mutator else 0.0,
        child_budget=args.child_budget,
        repairs=args.repairs,
        fallback_rules=args.fallback_rules,
        stall_patience=args.stall_patience,
        storage=args.storage,
        cluster=args.cluster,
        kernels_at_once=args.kernels_at_once,
        serial=args.serial,
    )
    results, skipped = tune_targets(ws, plan.targets, options, progress=on_progress, say=progress, warn=warn)
    for line in skipped:
        progress("not tuned: " + line)
    header = "covered share of the run: %s" % percent(sum(r.share for r in results))
    paths = write_report(ws, results, header)
    gpu_table = device_hook.winners_table(plan.targets, results) if gpus else None
    if gpu_table:  # the report keeps the winners' static figures on each GPU named
        with open(paths["text"]) as f:
            write_atomic(paths["text"], f.read() + "\n" + gpu_table + "\n")
    device = any(device_hook.is_device(c) for c in captures)
    spack_part = None
    if args.spec and results:
        from ..roundtrip.tuned import CheckRequest, emit_and_check

        spack_part = emit_and_check(
            ws,
            CheckRequest(
                spec=args.spec,
                run=args.run,
                repo=args.repo,
                gpus=[g.name for g in gpus] if device else [],  # (one keys the variant)
                check_pairs=args.check_pairs,
                kernel_pairs=args.check_kernel_pairs,
                keep_variant=args.keep_variant,
                spack_repos=list(args.spack_repo),
                spack_config=args.spack_config,
            ),
            results,
            progress,
        )
    if args.json:
        out = {
            "kernels": [r.to_json() for r in results],
            "covered_share": plan.covered_share,
            "skipped": plan.skipped + skipped,
            "report": paths,
        }
        if gpus:
            out["gpus"] = {
                k: [v.to_json() for v in vs] if isinstance(vs, list) else str(vs)
                for k, vs in device_hook.winners(plan.targets, results)
            }
        if spack_part:
            out.update(spack_part)
        print(json.dumps(out, indent=1))
        return _nothing_tuned(skipped) if not results else 0
    print(results_table(results))
    if spending_table(results):  # where each kernel's evaluations went
        print("\n" + spending_table(results))
    if gpu_table:
        print(gpu_table)
    print("report: %s (plot %s)" % (paths["text"], paths["plot"]))
    if spack_part:
        from ..roundtrip.tuned import spack_part_text

        text = spack_part_text(spack_part)
        if text:
            print(text)
    return _nothing_tuned(skipped) if not results else 0


def _nothing_tuned(skipped):
    """Exit 1, and on stderr's last line why no kernel could be tuned (its tables went to stdout)."""
    warn("r3 tune: no kernel was tuned: %s" % ("; ".join(skipped) or "see the report"))
    return 1


def _mutator(args):
    if args.mutator != "llm":
        return make_mutator(args.mutator)
    config = model_client.resolve(args.llm_url, args.llm_model, args.llm_key, args.llm_timeout)
    if config is None:
        if args.fallback_rules:
            return make_mutator("rules")
        raise R3Error("--mutator llm needs a model endpoint: --llm-url and --llm-model (or R3_LLM_URL, R3_LLM_MODEL)")
    return make_mutator("llm", config)


def _captures(ws, args, progress):
    if not args.spec and not args.source:
        return _workspace_captures(ws, args, progress)
    # Runs that start together with the same record to make: one records, the others wait
    # and reuse its captures (each recording its own, they tuned studies of their own).
    key = [
        "record",
        args.spec,
        os.path.abspath(args.source) if args.source else None,
        args.run,
        args.build,
        sorted(args.kernel),
        args.instances,
    ]
    with exclusive(ws, [json.dumps(key)]):
        return _record_or_reuse(ws, args, progress)


def _workspace_captures(ws, args, progress):
    """The captures of the workspace's latest run (with every --kernel named), saying what
    is left out: other runs, and captures that do not read."""
    corrupt = []
    captures, others = latest_run(list_captures(ws, corrupt), args.kernel)
    for c in corrupt:
        warn("warning: capture %s is not tuned: it is corrupt: %s" % (c.id, c.reason))
    if captures and others:
        progress(
            "tuning the captures of the latest run, %s (%d other run(s) in the workspace: see r3 kernels)"
            % (run_name(captures[0]) or "recorded %s" % captures[0].created, others)
        )
    return captures


def _record_or_reuse(ws, args, progress):
    if args.spec:
        from ..roundtrip.record import previous_spack_record

        previous = previous_spack_record(ws, args.spec, args.run, args.kernel, instances=args.instances, say=progress)
        if previous:
            progress("reusing the captures recorded in %s" % previous.run_dir)
            return previous.captures
        return record_spec_of(ws, args, progress).captures
    settings = dict(build=args.build, kernels=args.kernel, tolerance=None, instances=args.instances)
    previous = previous_record(ws, args.source, args.run, say=progress, **settings)
    if previous:
        progress("reusing the captures recorded in %s" % previous.run_dir)
        return previous.captures
    result = record_tree(ws, args.source, args.run, progress=progress, **settings)
    return result.captures

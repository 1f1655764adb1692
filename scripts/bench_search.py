#!/usr/bin/env python3
"""What the search finds: random search, the Bayesian search and the full r3, at equal budget.

For each demo application: record it, then for each of its hot kernels run three
searches at the same budget on one replay pool, (a) random and (b) the Bayesian
search (multivariate TPE) over the same space, and (c) the full r3: the Bayesian
search, then the outer loop over source rewrites (the ``rules`` mutator, no model) on
what it leaves (half the budget held, a quarter taken back while the Bayesian search
still climbs: ``tune.pipeline_search``); and confirm all their best candidates side by
side in one run, as r3 tune does (``tune.contenders``: raced, re-verified on every
instance, re-measured in interleaved rounds of paired runs; see spack_r3/search/confirm.py).
Then the search throughput: evaluations per minute with 1 and with 2 replay workers on
the same kernel.

Writes bench/search.json:
  kernels:    [{kernel, demo, baseline_s, random: {...}, bayes: {...}, r3: {...}}], each search holding
              best_speedup (confirmed, with speedup_min/max), evaluations, evals_to_best (the
              evaluation at which it found its best), search_best (what the search measured),
              winner, relaxes_fp; bayes also evals_to_random_best (the evaluation at which it
              first reached random's best search value); the same two counts "within noise"
              (evals_to_best_within_noise, evals_to_random_best_within_noise): where the search
              first came within two standard errors of an evaluation (2 x noise.TARGET_SE)
              of that value, for the best of 150 noisy medians is partly luck; confirm_rounds: the
              pair ratios of its confirmed best, by round; race: every candidate it sent to
              confirmation (variant, settings, search_speedup, speedup, round_speedups,
              screened_out, rejected), which is how a winner came to win; verdicts bayes.vs_random, r3.vs_random,
              r3.vs_bayes: better or worse (the ratio of the two confirmed medians, with a 95%
              interval from those pairs, apart from 1 and by more than 1%), else as good or tie
              (a's median above or below b's, by noise), and that ratio (ratio_to_random,
              ratio_to_bayes) as "point [low-high]"
  throughput: {workers_1, workers_2} evaluations per minute (medians of rounds), and their ratio
              (median of the rounds' ratios, with ratio_min/ratio_max)

  specialization: (``--specialize``) argument specialization on and off at the same budget: each
              kernel recorded with 3 instances, whose space offers specializations (recorded-constant
              integer arguments feeding a bound, stride or branch: compile/specialize.py), searched by
              the Bayesian search twice, with and without the ``specialize`` setting, both confirmed
              side by side; per kernel on/off {best_speedup, speedup_min/max, winner, specialized},
              offered, verdict (on vs off, as above) and ratio ("point [low-high]"); and
              added: the off search's best with every offered argument folded in, raced with
              them, against the same variant without (speedup, without_speedup, verdict, ratio
              from the race's pairs: what specialization adds to one variant, apart from what
              each search happened to find); the demos
              and bench/spec's PolyBench-shaped kernels with run-time sizes. Kept apart from the
              rest of the file (a run of either leaves the other's section as it was).

Usage: scripts/bench_search.py [--budget 150] [--demos heat,cg,nbody,dense] [--out bench/search.json]
       scripts/bench_search.py --rejudge   (the verdicts of bench/search.json again, from its pairs)
       scripts/bench_search.py --specialize [--budget 16] [--demos dense,spec] [--kernels matvec]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from spack_r3 import cxxnames  # noqa: E402
from spack_r3.errors import R3Error  # noqa: E402
from spack_r3.record.session import record  # noqa: E402
from spack_r3.replay.server import ReplayPool  # noqa: E402
from spack_r3.report import table  # noqa: E402
from spack_r3.search.bayes import Study, StudyGroup, storage  # noqa: E402
from spack_r3.search.confirm import confirm  # noqa: E402
from spack_r3.search.mutators import make_mutator  # noqa: E402
from spack_r3.search.noise import TARGET_SE, clearly_faster, ratio_interval  # noqa: E402
from spack_r3.search.patterns import Patterns  # noqa: E402
from spack_r3.search.remix import Remix, RemixOptions  # noqa: E402
from spack_r3.search.results import describe_variant, kernel_result, pick  # noqa: E402
from spack_r3.search.simplify import settings  # noqa: E402
from spack_r3.search.space import Space  # noqa: E402
from spack_r3.search.tune import (  # noqa: E402
    TuneOptions,
    confirm_searches,
    contenders,
    kernel_facts,
    pipeline_search,
    plan_targets,
)
from spack_r3.workspace import Workspace  # noqa: E402

# Runs sized so that one kernel call takes about 1-20 ms: long enough to time, short
# enough for 300 evaluations per kernel.
DEMOS = {"heat": "./heat 512 60", "cg": "./cg", "nbody": "./nbody 800 4", "dense": "./dense 160 1"}
# PolyBench-shaped kernels of our own whose sizes are run-time arguments (--specialize only)
SPEC_KERNELS = {"spec": (os.path.join(ROOT, "bench", "spec"), "./spec 1000 1000 3")}
SPEC_MIN_SHARE = 0.05  # (spec's matrix-vector product is a tenth of its run)
TOLERANCE = 1e-9  # the demos' FP tolerance: fast-math and FMA changes are searched within it
MIN_SHARE = 0.15


def say(line):
    print(line, file=sys.stderr, flush=True)


# Two screened values closer than this (relative) are one value measured twice: each is a
# median whose standard error the study holds near noise.TARGET_SE.
WITHIN_NOISE = 2 * TARGET_SE


def evals_to(curve, value, within=0.0):
    """1-based evaluation at which the best-so-far curve first reached ``value`` (``within``:
    came within that relative margin of it)."""
    if value is None:
        return None
    return next((i + 1 for i, v in enumerate(curve) if v is not None and v * (1 + within) >= value), None)


def search_summary(study, result, confirmed):
    curve = study.curve()
    won = pick(confirmed) if result.winner != "baseline" else None
    best = max((v for v in curve if v is not None), default=None)
    return {
        "best_speedup": result.speedup,
        "speedup_min": result.speedup_min,
        "speedup_max": result.speedup_max,
        "evaluations": len(curve),
        "evals_to_best": evals_to(curve, best),
        "evals_to_best_within_noise": evals_to(curve, best, WITHIN_NOISE),
        "search_best": best,
        "winner": result.winner,
        "relaxes_fp": result.relaxes_fp,
        "failed": result.failed,
        "rejected": result.rejected,
        "confirm_rounds": won.round_ratios if won else [],  # the baseline's: none (1.0)
        "race": [race_entry(c) for c in confirmed],
    }


def race_entry(c):
    """One candidate of the race, as confirmation saw it: why a winner won is read here."""
    return {
        "variant": describe_variant(c.variant),
        "settings": len(settings(c.variant)),
        "search_speedup": c.search_speedup,
        "speedup": c.speedup,
        "round_speedups": c.round_speedups,
        "screened_out": c.screened_out,
        "rejected": c.rejected,
    }


COMPARED = (("bayes", "random"), ("r3", "random"), ("r3", "bayes"))  # (search, against)


def verdict(a, b):
    """How search ``a``'s confirmed best compares with ``b``'s, from their confirmation pairs:
    "better" (``noise.clearly_faster``: faster by more than noise, the rule a tune's pick
    uses), "worse" (b clearly faster), else "as good" (a's median at or above b's) or "tie"
    (below it, by noise)."""
    if clearly_faster(a["confirm_rounds"], b["confirm_rounds"]):
        return "better"
    if clearly_faster(b["confirm_rounds"], a["confirm_rounds"]):
        return "worse"
    point, _, _ = ratio_interval(a["confirm_rounds"], b["confirm_rounds"])
    return "as good" if point >= 1 else "tie"


def ratio_text(a, b):
    """a's confirmed speedup over b's, with its 95% interval."""
    point, low, high = ratio_interval(a["confirm_rounds"], b["confirm_rounds"])
    return "%.3f [%.3f-%.3f]" % (point, low, high)


def add_verdicts(entry):
    for a, b in COMPARED:
        entry[a]["vs_" + b] = verdict(entry[a], entry[b])
        entry[a]["ratio_to_" + b] = ratio_text(entry[a], entry[b])
    return entry


def full_r3(ws, pool, store, target, space, budget, seed, share=0.5):
    """The Bayesian search, then source variants (rules) on what it leaves of the budget
    (``tune.pipeline_search``: ``share`` held, half of it taken back while the Bayesian
    search still climbs); what the rules leave unspent goes back to the Bayesian search,
    as in r3 tune."""
    base_target = replace(target, source_variant="r3-original")  # its own study, not (b)'s
    base = Study(store, base_target, space, sampler="tpe", seed=seed, pairs=5)
    remix_budget = pipeline_search(
        base, pool.servers, TuneOptions(budget=budget, mutator=make_mutator("rules"), remix_share=share)
    )
    say(
        "  r3 %s: the pipeline search took %d evaluations, the rules get %d"
        % (target.kernel, len(base.trials()), remix_budget)
    )
    remix = Remix(
        ws,
        store,
        base_target,
        space.facts,
        make_mutator("rules"),
        RemixOptions(budget=remix_budget, seed=seed, pairs=5),
        Patterns(ws),
        inherit=[t.params for t in base.best(2)],
        noise=base.pair_noises(),
    )
    remix.run(
        pool.servers,
        max([t.value for t in base.best(1)] + [1.0]),
        say=lambda line: say("  r3" + line),
        extend=lambda n: base.extend(pool.servers, n),
    )
    return StudyGroup(
        [base] + [s for _, s in remix.studies()],
        [c.status for c in remix.children if c.status not in ("ok", "pending")],
    )


def bench_kernel(ws, pool, store, target, budget, seed, demo):
    space = Space(kernel_facts(target, pool.cores_per_worker))
    studies = {}
    for name, sampler in (("random", "random"), ("bayes", "tpe")):
        t0 = time.monotonic()
        study = Study(store, target, space, sampler=sampler, seed=seed, pairs=5)
        study.run(
            pool.servers,
            budget,
            progress=lambda p, name=name: (
                p.done % 25 == 0
                and say(
                    "  %s %s: %d/%d best %s"
                    % (target.kernel, name, p.done, p.budget, "-" if p.best is None else "%.2fx" % p.best)
                )
            ),
        )
        studies[name] = (study, time.monotonic() - t0)
    t0 = time.monotonic()
    studies["r3"] = (full_r3(ws, pool, store, target, space, budget, seed), time.monotonic() - t0)
    # The searches' best candidates raced and confirmed side by side, in one run.
    # (A search none of whose candidates holds gets three more confirmed, as in r3 tune.)
    cands = [(target, s, contenders(s, 3)) for s, _ in studies.values()]
    confirmed = confirm_searches(pool.servers, cands, 3, rounds=3, pairs=11, progress=say)
    entry = {
        "kernel": target.kernel,
        "kernel_demangled": cxxnames.demangle(target.kernel),
        "demo": demo,
        "share": target.share,
        "space": len(space.params),
    }
    for (name, (study, seconds)), conf in zip(studies.items(), confirmed):
        result = kernel_result(target, study, conf)
        entry[name] = search_summary(study, result, conf)
        entry[name]["search_s"] = seconds
        entry.setdefault("baseline_s", result.baseline_s)
    bayes_curve, random_best = studies["bayes"][0].curve(), entry["random"]["search_best"]
    entry["bayes"]["evals_to_random_best"] = evals_to(bayes_curve, random_best)
    entry["bayes"]["evals_to_random_best_within_noise"] = evals_to(bayes_curve, random_best, WITHIN_NOISE)
    return add_verdicts(entry)


def throughput(ws, store, target, budget, seed, reps=3):
    """Evaluations per minute of the search alone, with 1 and 2 workers, on a serial kernel
    (the same space for both) without Polly (whose stage cache would serve the second run
    what the first compiled). ``reps`` rounds, 1 and 2 workers side by side in each: the
    ratio is the median of the rounds' ratios, with their spread."""
    rates = {1: [], 2: []}
    for rep in range(reps):
        for workers in (1, 2):
            with ReplayPool(workers) as pool:
                facts = kernel_facts(target, pool.cores_per_worker)
                facts.polly = False
                space = Space(facts)
                target.source_variant = "throughput-%d-%d" % (workers, rep)  # a fresh study each time
                study = Study(store, target, space, sampler="random", seed=seed + rep, pairs=5)
                study.run(pool.servers, 4)  # workers started, capture loaded: not what is measured
                t0 = time.monotonic()
                study.run(pool.servers, 4 + budget)
                rates[workers].append(60.0 * budget / (time.monotonic() - t0))
    target.source_variant = "original"
    ratios = sorted(b / a for a, b in zip(rates[1], rates[2]))
    return {
        "workers_1": statistics.median(rates[1]),
        "workers_2": statistics.median(rates[2]),
        "ratio": statistics.median(ratios),
        "ratio_min": ratios[0],
        "ratio_max": ratios[-1],
        "rounds": {"workers_1": rates[1], "workers_2": rates[2]},
    }


def write(args, kernels, thr=None, throughput_kernel=None, specialization=None):
    """``args.out`` with these results; the part not measured (the specialization section,
    or the rest) as the file had it."""
    try:
        with open(args.out) as f:
            before = json.load(f)
    except (OSError, ValueError):
        before = {}
    if specialization is not None:
        result = dict(before, specialization=specialization)
    else:
        result = {
            "budget": args.budget,
            "tolerance": TOLERANCE,
            "machine_cpus": len(os.sched_getaffinity(0)),
            "kernels": kernels,
            "throughput": thr,
            "throughput_kernel": throughput_kernel,
        }
        if "specialization" in before:
            result["specialization"] = before["specialization"]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


def bench_specialize(pool, store, target, budget, seed, demo):
    """The Bayesian search with and without argument specialization at the same budget,
    both confirmed side by side (the two best of each, raced); None when the kernel offers no specialization."""
    facts = kernel_facts(target, pool.cores_per_worker)
    if not facts.specialize:
        return None
    entry = {
        "kernel": target.kernel,
        "demo": demo,
        "share": target.share,
        "offered": [label for label, _ in facts.specialize],
    }
    searches = []
    for name, space in (("on", Space(facts)), ("off", Space(replace(facts, specialize=())))):
        t = replace(target, source_variant="specialize-" + name)  # a study of its own
        study = Study(store, t, space, sampler="tpe", seed=seed, pairs=5)
        study.run(pool.servers, budget)
        searches.append((name, t, study))
    # The off search's best with every offered argument folded in, raced beside them: what
    # specialization adds to one variant, apart from what each search happened to find.
    best_off = contenders(searches[1][2], 1)
    added = [
        (replace(v, pipeline=replace(v.pipeline, specialize=facts.specialize[-1][1])), value) for v, value in best_off
    ]
    searches.append(("off+specialize", replace(target, source_variant="specialize-added"), searches[1][2]))
    # (confirm, not confirm_searches: its retry would give off+specialize the off study's
    # next candidates, unspecialized)
    confirmed = confirm(
        pool.servers,
        [(t, contenders(s, 2)) for _, t, s in searches[:2]] + [(searches[2][1], added)],
        keep=2,
        rounds=3,
        pairs=11,
        progress=say,
    )
    for (name, t, study), conf in zip(searches[:2], confirmed):
        result = kernel_result(t, study, conf)
        summary = search_summary(study, result, conf)
        entry[name] = {
            k: summary[k]
            for k in (
                "best_speedup",
                "speedup_min",
                "speedup_max",
                "evaluations",
                "search_best",
                "winner",
                "relaxes_fp",
                "confirm_rounds",
            )
        }
        entry[name]["specialized"] = result.specialized
    entry["verdict"] = verdict(entry["on"], entry["off"])
    entry["ratio"] = ratio_text(entry["on"], entry["off"])
    # The same variant with and without the arguments folded in, from the race's own pairs
    # (whether or not either would have won it).
    with_c = confirmed[2][0] if confirmed[2] else None
    base_c = next((c for c in confirmed[1] if best_off and c.variant == best_off[0][0]), None)
    if with_c and base_c and with_c.round_ratios and base_c.round_ratios:
        a, b = {"confirm_rounds": with_c.round_ratios}, {"confirm_rounds": base_c.round_ratios}
        entry["added"] = {
            "variant": describe_variant(with_c.variant),
            "speedup": with_c.speedup,
            "without_speedup": base_c.speedup,
            "rounds": len(with_c.round_ratios),
            "without_rounds": len(base_c.round_ratios),
            "verdict": verdict(a, b),
            "ratio": ratio_text(a, b),
        }
    return entry


def run_specialize(args):
    """``--specialize``: the specialization section of ``args.out``."""
    ws = Workspace(tempfile.mkdtemp(prefix="bench-specialize-"))
    store = storage(ws)
    targets, none_offered = [], []
    for demo in args.demos.split(","):
        source, run = SPEC_KERNELS.get(demo) or (os.path.join(ROOT, "repos", "r3", "sources", demo), DEMOS[demo])
        say("%s: recording %s (3 instances)" % (demo, run))
        rec = record(ws, source, run, instances=3, tolerance=TOLERANCE)
        targets += [
            (demo, t)
            for t in plan_targets(ws, rec.captures, min_share=SPEC_MIN_SHARE).targets
            if not args.kernels or t.kernel in args.kernels.split(",")
        ]
    try:  # a run of some kernels (--kernels) keeps the others' entries
        with open(args.out) as f:
            kept = json.load(f).get("specialization") or {}
    except (OSError, ValueError):
        kept = {}
    measured = {(d, t.kernel) for d, t in targets}
    kernels = [k for k in kept.get("kernels", []) if (k["demo"], k["kernel"]) not in measured]
    failed = [line for line in kept.get("failed", []) if tuple(line.split(": ")[:2]) not in measured]
    section = {
        "budget": args.budget,
        "seed": args.seed,
        "tolerance": TOLERANCE,
        "instances": 3,
        "machine_cpus": len(os.sched_getaffinity(0)),
        "workers": args.workers,
        "notes": "A short run: the Bayesian search at a small budget with and without the specialize "
        "setting, seed %d, the two best of each confirmed side by side (3 rounds of 11 pairs). The machine has 2 "
        "cores, shared with 4 other engineers' builds and tests while this ran: spreads are "
        "wide, and a verdict is 'better' or 'worse' only where the paired ratio's 95%% interval "
        "excludes 1 by more than 1%%." % args.seed,
        "kernels": kernels,
        "offered_nothing": none_offered,
        "failed": failed,
    }
    with ReplayPool(args.workers) as pool:
        for demo, target in targets:
            say(
                "%s: %s (%.0f%% of the run), %d evaluations per search"
                % (demo, target.kernel, 100 * target.share, args.budget)
            )
            try:
                entry = bench_specialize(pool, store, target, args.budget, args.seed, demo)
            except R3Error as err:  # (one kernel's replay refused: the others go on)
                failed.append("%s: %s: %s" % (demo, target.kernel, err))
                say("  failed: %s" % err)
                write(args, None, specialization=section)
                continue
            if entry is None:
                none_offered.append("%s: %s" % (demo, target.kernel))
                say("  nothing to specialize")
            else:
                kernels.append(entry)
            write(args, None, specialization=section)  # what is finished is kept if it is cut short
    print_specialization(section)
    print("wrote %s" % args.out)


def print_specialization(section):
    print(
        table(
            ["demo", "kernel", "offered", "on", "specialized", "off", "on/off", "verdict", "off+spec/off", "verdict"],
            [
                [
                    k["demo"],
                    cxxnames.display(k["kernel"]),
                    len(k["offered"]) - 1,
                    "%.2fx [%.2f-%.2f]" % (k["on"]["best_speedup"], k["on"]["speedup_min"], k["on"]["speedup_max"]),
                    ",".join(k["on"]["specialized"]) or "-",
                    "%.2fx [%.2f-%.2f]" % (k["off"]["best_speedup"], k["off"]["speedup_min"], k["off"]["speedup_max"]),
                    k["ratio"],
                    k["verdict"],
                    (k.get("added") or {}).get("ratio", "-"),
                    (k.get("added") or {}).get("verdict", "-"),
                ]
                for k in section["kernels"]
            ],
        )
    )
    if section["offered_nothing"]:
        print("offered nothing: " + ", ".join(section["offered_nothing"]))


def print_tables(kernels, thr):
    rows = [
        [
            k["demo"],
            cxxnames.display(k["kernel"]),
            "%.2fms" % (1e3 * k["baseline_s"]),
            "%.2fx [%.2f-%.2f]" % (k["random"]["best_speedup"], k["random"]["speedup_min"], k["random"]["speedup_max"]),
            k["random"]["evals_to_best"],
            "%.2fx [%.2f-%.2f]" % (k["bayes"]["best_speedup"], k["bayes"]["speedup_min"], k["bayes"]["speedup_max"]),
            k["bayes"]["evals_to_best"],
            "%s (%s)" % (k["bayes"]["evals_to_random_best"], k["bayes"]["evals_to_random_best_within_noise"]),
            "%.2fx [%.2f-%.2f]" % (k["r3"]["best_speedup"], k["r3"]["speedup_min"], k["r3"]["speedup_max"]),
            k["r3"]["evals_to_best"],
            k["r3"]["winner"],
        ]
        for k in kernels
    ]
    print(
        table(
            [
                "demo",
                "kernel",
                "baseline",
                "random",
                "at",
                "bayes",
                "at",
                "reached random's (within noise)",
                "r3",
                "at",
                "r3 winner",
            ],
            rows,
        )
    )
    print(
        table(
            ["kernel", "bayes vs random", "r3 vs random", "r3 vs bayes"],
            [
                [cxxnames.display(k["kernel"])]
                + ["%s: %s" % (k[a]["vs_" + b], k[a]["ratio_to_" + b]) for a, b in COMPARED]
                for k in kernels
            ],
        )
    )
    if thr:  # (none yet in a run cut short)
        print(
            "throughput: %.1f evaluations/min with 1 worker, %.1f with 2 (%.2fx [%.2f-%.2f])"
            % (thr["workers_1"], thr["workers_2"], thr["ratio"], thr["ratio_min"], thr["ratio_max"])
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=150)
    ap.add_argument("--demos", default=",".join(DEMOS))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--throughput-budget", type=int, default=40)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "search.json"))
    ap.add_argument(
        "--rejudge",
        action="store_true",
        help="measure nothing: recompute the verdicts of --out from the pairs it holds",
    )
    ap.add_argument(
        "--kernels",
        default="",
        help="with --specialize: only these kernels (comma-separated); the others' entries are kept",
    )
    ap.add_argument(
        "--specialize",
        action="store_true",
        help="only argument specialization on and off (--demos default: dense,spec)",
    )
    args = ap.parse_args()
    if args.specialize:
        if args.demos == ",".join(DEMOS):
            args.demos = "dense,spec"
        return run_specialize(args)
    if args.rejudge:
        with open(args.out) as f:
            result = json.load(f)
        for entry in result["kernels"]:
            add_verdicts(entry)
        args.budget = result["budget"]
        write(args, result["kernels"], result["throughput"], result["throughput_kernel"])
        print_tables(result["kernels"], result["throughput"])
        return
    ws = Workspace(tempfile.mkdtemp(prefix="bench-search-"))
    store = storage(ws)
    kernels, targets = [], []
    for demo in args.demos.split(","):
        say("%s: recording %s" % (demo, DEMOS[demo]))
        rec = record(ws, os.path.join(ROOT, "repos", "r3", "sources", demo), DEMOS[demo], tolerance=TOLERANCE)
        plan = plan_targets(ws, rec.captures, min_share=MIN_SHARE)
        targets += [(demo, t) for t in plan.targets]
    with ReplayPool(args.workers) as pool:
        for demo, target in targets:
            say(
                "%s: %s (%.0f%% of the run), %d evaluations per search"
                % (demo, target.kernel, 100 * target.share, args.budget)
            )
            kernels.append(bench_kernel(ws, pool, store, target, args.budget, args.seed, demo))
            write(args, kernels)  # an hour's run: what is finished is kept if it is cut short
    say("throughput")
    serial = next((t for _, t in targets if not t.parallel), targets[0][1])
    thr = throughput(ws, store, serial, args.throughput_budget, args.seed)
    write(args, kernels, thr, serial.kernel)
    print_tables(kernels, thr)
    print("wrote %s" % args.out)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Issue 46's shapes: what the new rewrites and Polly's scheduler options give, over the build.

Records the kernels of scripts/kernels46 (our own: Jacobi 2-D with its copy-back, 3-D
heat, an FDTD-like leapfrog, Gauss-Seidel, a two-product chain, transposed mat-vec, a
rank-k update, a nest reduction) at medium sizes, built ``-O3 -march=native -fopenmp``
with FP tolerance 1e-9, then for each kernel replays, against the build, in paired runs:

  rewrites: each rule's first proposal (time-tile, wavefront, fuse, distribute, and the
            outer-loop ``omp-parallel``, reductions included) at its default knobs and, for
            the tiled ones, a few tile sizes; verified (parallel ones 3 times) and timed;
  polly:    Polly alone (``O3,polly=1``) and with each scheduler option of issue 46;
  search:   (``--budget N``, N > 0) r3 tune's search (``tune.pipeline_search``, then the
            remix on what it leaves, default options) with the rules mutator, every rule
            ('with') and without the issue's new ones ('without'; ``--searches`` picks),
            confirmed as r3 tune confirms (``tune.confirmed_results``: its candidates raced,
            a second chance, the winner measured again alone); each search's
            evaluations by where they went (pipelines, given back, each rewrite class,
            confirmation) and its children.

Speedups are medians of paired ratios (build / candidate) with the min and max of the
pairs. Writes bench/search-shapes46.json.

Usage: scripts/bench_shapes46.py [--kernels jacobi2d,...] [--budget 0] [--out bench/search-shapes46.json]
       scripts/bench_shapes46.py --search-only --budget 16 --kernels jacobi2d,chain2 --out bench/search-shapes46-search.json
       scripts/bench_shapes46.py --search-only --searches with --budget 60 --kernels chain2,jacobi2d \
           --sizes "-DN=800 -DNM=200 -DM3=64 -DSTEPS=10" --out bench/search-shapes46-budget-after.json
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from spack_r3.capture import load_capture_dir  # noqa: E402
from spack_r3.data import OK, Launch, Variant  # noqa: E402
from spack_r3.record.session import record  # noqa: E402
from spack_r3.compile.pipeline import parse  # noqa: E402
from spack_r3.replay.server import ReplayPool  # noqa: E402
from spack_r3.search.bayes import Study, StudyGroup, storage  # noqa: E402
from spack_r3.search.mutators import Feedback  # noqa: E402
from spack_r3.search.mutators.ruleset import RulesMutator  # noqa: E402
from spack_r3.search.patterns import Patterns  # noqa: E402
from spack_r3.search.mutators.ruleset import rewrite_class  # noqa: E402
from spack_r3.search.remix import Remix, RemixOptions, kernel_source  # noqa: E402
from spack_r3.search.spending import CONFIRMATION  # noqa: E402
from spack_r3.search.space import Space  # noqa: E402
from spack_r3.search.tune import (  # noqa: E402
    TuneOptions,
    confirmed_results,
    remix_search,
    kernel_facts,
    pipeline_search,
    plan_targets,
)
from spack_r3.sourcepatch import make_patch  # noqa: E402
from spack_r3.workspace import Workspace  # noqa: E402

KERNELS = ("jacobi2d", "heat3d", "fdtd2d", "seidel2d", "chain2", "matvec_t", "syrk_lower", "frobenius")
SIZES = "-DN=1500 -DM3=128 -DNM=320 -DSTEPS=10"  # 2-D grids of 18 MB each: beyond the 32 MB L3 in pairs
NEW_RULES = ("time-tile", "wavefront", "fuse", "distribute")
TILES = ((8, 32), (16, 64), (4, 128))  # (time steps, rows) per tile
POLLY = (
    "O3,polly=1",
    "O3,polly=1,polly_parallel=1",
    "O3,polly=1,polly_fusion=1",
    "O3,polly=1,polly_coincidence=1",
    "O3,polly=1,polly_tile2=1",
    "O3,polly=1,polly_regtile=1",
    "O3,polly=1,polly_parallel=1,polly_fusion=1,polly_coincidence=1",
)
TOLERANCE = 1e-9
PAIRS = 11


def say(line):
    print(line, file=sys.stderr, flush=True)


class WithoutNew(RulesMutator):
    """The rules mutator as it was before issue 46's rewrites (and before ``omp-parallel``
    reached the sweeps inside a time loop)."""

    def propose(self, source, feedback=None):
        return [p for p in super().propose(source, feedback) if p.rule not in NEW_RULES and not sweep(p)]


def sweep(proposal):
    """An ``omp parallel for`` on a loop inside a time loop (``rules.omp_parallel`` names it by its line)."""
    return proposal.rule == "omp-parallel" and (
        " at line " in proposal.description or " sweeps of " in proposal.description
    )


def measured(target, server, name, variant, threaded=False):
    ev = target.submit(server, variant, pairs=PAIRS, timeout=300, verify_runs=3 if threaded else 1)
    row = {"candidate": name, "status": ev.status, "verified": ev.verified}
    if ev.status == OK:
        row.update(
            speedup=round(ev.speedup, 3),
            speedup_min=round(ev.speedup_min, 3),
            speedup_max=round(ev.speedup_max, 3),
            pairs=ev.pairs,
            threads=ev.threads,
            baseline_s=ev.baseline_median_s,
        )
    else:
        row["diagnostic"] = (ev.diagnostics or "")[:300]
    say(
        "  %-60s %s"
        % (name, "%.2fx [%.2f-%.2f]" % (ev.speedup, ev.speedup_min, ev.speedup_max) if ev.status == OK else ev.status)
    )
    return row


def rewrites(target, server):
    cap = target.captures[0]
    src = replace(kernel_source(load_capture_dir(cap), cap), tolerance=target.tolerance)
    props = RulesMutator().propose(src, Feedback())
    rows, seen = [], set()
    for p in props:
        if p.rule in seen or p.rule not in NEW_RULES + ("omp-parallel",):
            continue
        seen.add(p.rule)
        threaded = p.rule in ("wavefront", "omp-parallel")
        choices = [{k: v[0] for k, v in p.knobs.items()}]
        if len(p.knobs) == 2:
            tt, ti = sorted(p.knobs)[::-1]  # R3_TT_n, R3_TI_n
            choices = [{tt: a, ti: b} for a, b in TILES]
        for defines in choices:
            variant = Variant(
                source_patch=make_patch(src.text, p.text, src.filename),
                source_defines=defines,
                source_rule=p.rule,
                launch=Launch(threads=2 if threaded else None),
            )
            name = p.description + (" " + ",".join("%s=%d" % kv for kv in sorted(defines.items())) if defines else "")
            row = measured(target, server, name, variant, threaded)
            row["rule"] = p.rule
            rows.append(row)
    return rows


def search(ws, pool, store, target, budget, seed, mutator, label):
    """r3 tune's search of one kernel (``tune.pipeline_search``, then ``tune.remix_search`` on what
    it leaves) at ``budget``, default options otherwise; returns (target, its studies as one
    search, its children, where its evaluations went)."""
    facts = kernel_facts(target, pool.cores_per_worker)
    t = replace(target, source_variant="shapes46-%s" % label)
    options = TuneOptions(budget=budget, mutator=mutator, seed=seed)
    base = Study(store, t, Space(facts), sampler="tpe", seed=seed, pairs=options.pairs)
    remix_budget = pipeline_search(base, pool.servers, options)
    handed = len(base.trials())  # the pipeline search's own, before the rewrites' turn
    group = StudyGroup([base])
    if remix_budget:
        group = remix_search(ws, store, t, facts, base, pool, options, remix_budget, Patterns(ws), None, say, say)
    remix = Remix(ws, store, t, facts, mutator, RemixOptions(budget=remix_budget, seed=seed))
    children = [
        {
            "rules": "+".join(c.rules),
            "description": c.description,
            "status": c.status,
            "speedup": c.speedup,
            "evaluations": c.evaluations,
            "cut": c.cut,
        }
        for c in remix.children
    ]
    split = {"pipelines": handed, "pipelines, given back by the rewrites": remix.extended}
    for c in remix.children:
        family = "rewrite: " + "+".join(sorted({rewrite_class(r) for r in c.rules}))
        split[family] = split.get(family, 0) + c.evaluations
    return t, group, children, split


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--budget", type=int, default=0, help="the with/without search per kernel (0: none)")
    ap.add_argument("--search-only", action="store_true", help="the with/without search alone, no single rewrites")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--sizes", default=SIZES, help="the kernels' sizes, as -D flags (default %(default)s)")
    ap.add_argument(
        "--searches",
        default="with,without",
        help="which searches: 'with' every rule, 'without' issue 46's new ones (default both)",
    )
    ap.add_argument("--note", default="", help="a sentence added to the json's notes (what else ran meanwhile)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "search-shapes46.json"))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-shapes46-")
    src = os.path.join(tmp, "src")
    os.makedirs(src)
    for name in ("shapes.c", "main.c"):
        shutil.copy(os.path.join(ROOT, "scripts", "kernels46", name), src)
    with open(os.path.join(src, "Makefile"), "w") as f:
        f.write(
            "prog: main.o shapes.o\n\t$(CC) -O3 -march=native -fopenmp -o $@ main.o shapes.o -lm\n"
            "%%.o: %%.c\n\t$(CC) -O3 -march=native -fopenmp %s -c -o $@ $<\n" % args.sizes
        )
    ws = Workspace(os.path.join(tmp, "ws"))
    kernels = args.kernels.split(",")
    say("recording %s (%s)" % (", ".join(kernels), args.sizes))
    rec = record(ws, src, "./prog", kernels=kernels, tolerance=TOLERANCE)
    targets = plan_targets(ws, rec.captures, kernels=kernels, tolerance=TOLERANCE).targets
    out = {
        "sizes": args.sizes,
        "build": "-O3 -march=native -fopenmp",
        "tolerance": TOLERANCE,
        "pairs": PAIRS,
        "machine_cpus": len(os.sched_getaffinity(0)),
        "budget": args.budget,
        "seed": args.seed,
        "notes": "A run on a machine of %d cores (--note says what else ran on it): one "
        "replay of %d pairs per candidate in the search; parallel candidates (wavefront, "
        "omp-parallel, polly_parallel) ran with as many threads as the worker's cores. Speedups are "
        "over the build (-O3 -march=native), medians of paired ratios [min-max]. %s"
        % (len(os.sched_getaffinity(0)), PAIRS, args.note),
        "kernels": [],
    }
    store = storage(ws)
    with ReplayPool(args.workers) as pool:
        server = pool.servers[0]
        for target in sorted(targets, key=lambda t: kernels.index(t.kernel)):
            say("%s" % target.kernel)
            entry = {
                "kernel": target.kernel,
                "rewrites": [] if args.search_only else rewrites(target, server),
                "polly": [],
            }
            entry["reference"] = measured(target, server, "O3", Variant())
            for spec in () if args.search_only else POLLY:
                pipe = parse(spec)
                entry["polly"].append(
                    measured(
                        target,
                        server,
                        spec,
                        Variant(pipeline=pipe, launch=Launch(threads=2 if pipe.polly_parallel else None)),
                        pipe.polly_parallel,
                    )
                )
            if args.budget:
                t0 = time.monotonic()
                mutators = {"with": RulesMutator(), "without": WithoutNew()}
                labels = args.searches.split(",")
                runs = [search(ws, pool, store, target, args.budget, args.seed, mutators[x], x) for x in labels]
                # Confirmed as r3 tune confirms (its candidates, race, second chance, the
                # winner measured again alone), with its default options.
                options = TuneOptions(budget=args.budget, seed=args.seed)
                results = confirmed_results(ws, pool, [(t, g) for t, g, _, _ in runs], options, say)
                for (_, _, children, split), result, label in zip(runs, results, labels):
                    split["confirmation"] = (
                        (getattr(result, "spending", None) or {}).get("split", {}).get(CONFIRMATION, 0)
                    )
                    entry[label] = {
                        "best_speedup": round(result.speedup, 3),
                        "speedup_min": result.speedup_min,
                        "speedup_max": result.speedup_max,
                        "winner": result.winner,
                        "evaluations": split,
                        "children": children,
                    }
                    say("  %s: %.2fx, %s; evaluations %s" % (label, result.speedup, result.winner, split))
                entry["search_s"] = round(time.monotonic() - t0, 1)
            out["kernels"].append(entry)
            with open(args.out + ".tmp", "w") as f:  # what is finished is kept if it is cut short
                json.dump(out, f, indent=1)
            os.replace(args.out + ".tmp", args.out)
    print("wrote %s" % args.out)


if __name__ == "__main__":
    main()

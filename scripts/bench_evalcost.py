#!/usr/bin/env python3
"""The cost of one evaluation, by stage, before and after issue 46's cuts.

Records the four kernels of scripts/evalcost (our own: one 1-D three-point smoother making
more or fewer sweeps, built ``-O3 -march=native``: runs of about 1 ms, 10 ms, 100 ms, 1 s),
then evaluates each the way a search does (``pairs`` paired runs against the build, raced)
on two replay workers over one workspace cache: "before" with ``R3_EVAL_CUTS=0`` (every
candidate compiled anew, a calibration run before the pairs, no racing: what an evaluation
cost before the cuts; the Polly stage cache was on in a workspace already) and "after".

Per kernel, a first evaluation of each variant in each worker (its pipeline's first compile
and one timed run; the first also builds the capture's baseline, with one pair: reported, not
compared), then ``--rounds`` rounds in which
every variant is evaluated in both workers, in an order drawn per round:

  O3            the same pipeline measured again (a search's repeated point, a confirmation)
  O3,threads=1  a launch-only change
  O2,vectorize=0, O0   other pipelines; O0 is clearly slower than the build (racing)

Each evaluation's wall time (around ``ReplayServer.submit``) and ``Evaluation.stages``
are kept; the comparison is the paired ratio before/after of one variant's wall time in
one round, median [min-max] over rounds. ``paired_run_s`` is the time of the paired runs
themselves (the ``timed`` stage): the target is an evaluation within twice that.

With ``--polly``: the kernel of scripts/evalcost/matmul.c instead (our own small matrix
product, which Polly transforms; about 0.1 s built ``-O3 -march=native``) and the Polly
variants ``O3,polly=1`` and ``O3,polly=1,polly_coincidence=1`` (a scheduler option:
-polly-opt-outer-coincidence). Each mode's worker gets its own empty cache, so each
variant's first evaluation (a full one, ``pairs`` pairs) pays its Polly stage cold; the
rounds after it find it cached: "before" the opt stage's output (the stage cache, by input
digest and options, predates the cuts and ``R3_EVAL_CUTS=0`` keeps it), "after" the object.
The stage split names the Polly stage (``opt``: the kernel cut out in opt-19's text, then
``opt -O3 -polly``) apart from the rest of the compile. Add it to the relax kernels' json
with ``--polly --add``.

Usage: scripts/bench_evalcost.py [--rounds 3] [--long-rounds 2] [--pairs 5] [--kernels relax_1ms,...] [--out bench/evalcost.json]
       scripts/bench_evalcost.py --polly --add [--rounds 3] [--note ...]
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from statistics import median

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from spack_r3.data import OK, Launch, Variant  # noqa: E402
from spack_r3.record.session import record  # noqa: E402
from spack_r3.compile.pipeline import parse  # noqa: E402
from spack_r3.replay.server import ReplayServer  # noqa: E402
from spack_r3.compile.stages import EVAL_CUTS_ENV  # noqa: E402
from spack_r3.workspace import Workspace  # noqa: E402

KERNELS = ("relax_1ms", "relax_10ms", "relax_100ms", "relax_1s")
BUILD = "-O3 -march=native"
REPS_1MS = 80  # sweeps of the 1 ms kernel (x10, x100, x1000 for the others)
VARIANTS = (
    ("O3", Variant(pipeline=parse("O3"))),
    ("O3,threads=1", Variant(pipeline=parse("O3"), launch=Launch(threads=1))),
    ("O2,vectorize=0", Variant(pipeline=parse("O2,vectorize=0"))),
    ("O0", Variant(pipeline=parse("O0"))),
)
POLLY_KERNEL = "matmul"
POLLY_VARIANTS = (
    ("O3,polly=1", Variant(pipeline=parse("O3,polly=1"))),
    ("O3,polly=1,polly_coincidence=1", Variant(pipeline=parse("O3,polly=1,polly_coincidence=1"))),
)
MODES = ("before", "after")
# how the stages add up in the tables: compile, memory, the kernel's runs, checks, overhead
GROUPS = {
    "compile": ("source", "opt", "pipeline", "codegen", "object", "link", "build", "baseline"),
    "restore": ("restore", "map"),
    "verify": ("verify", "probe"),
    "calibrate": ("calibrate",),
    "paired runs": ("timed",),
    "check": ("check", "flush"),
    "overhead": ("prepare", "process", "ipc", "other"),
}
# the Polly kernel's: the Polly stage and the baseline's build apart from the rest of the compile
POLLY_GROUPS = {
    "polly stage": ("opt",),
    "compile": tuple(s for s in GROUPS["compile"] if s not in ("opt", "build", "baseline")),
    "baseline build": ("build", "baseline"),
    **{g: names for g, names in GROUPS.items() if g != "compile"},
}


def say(line):
    sys.stderr.write("[%s] %s\n" % (time.strftime("%H:%M:%S"), line))
    sys.stderr.flush()


def grouped(stages, groups=GROUPS):
    out = {g: sum(stages.get(s, 0.0) for s in names) for g, names in groups.items()}
    out["other stages"] = sum(v for s, v in stages.items() if not any(s in names for names in groups.values()))
    return out


def entry_variants(entry):
    """(name, variant) of the variants ``entry`` (a kernel's row in the json) measured."""
    return POLLY_VARIANTS if entry.get("polly") else VARIANTS


def entry_groups(entry):
    return POLLY_GROUPS if entry.get("polly") else GROUPS


def spread(values):
    return {"median": median(values), "min": min(values), "max": max(values)} if values else None


def evaluate(server, cap, variant, pairs):
    t0 = time.perf_counter()
    ev = server.submit(cap, variant, pairs=pairs, race=True, repeat=1)
    wall = time.perf_counter() - t0
    if ev.status != OK:
        raise SystemExit("evaluation failed: %s %s" % (ev.status, ev.diagnostics))
    return {
        "wall_s": wall,
        # what the pairs' runs take with nothing else: pairs x runs a sample x (build + candidate)
        "nominal_paired_s": ev.pairs * ev.runs_per_sample * ((ev.baseline_median_s or 0) + (ev.time_median_s or 0)),
        "resampled": ev.resampled,
        "stages": ev.stages,
        "pairs": ev.pairs,
        "raced_out": ev.raced_out,
        "runs_per_sample": ev.runs_per_sample,
        "speedup": ev.speedup,
        "baseline_s": ev.baseline_median_s,
        "candidate_s": ev.time_median_s,
    }


def servers(cache, timeout, after_cache=None):
    """(before, after): two workers on one cache (or ``after_cache`` for the second), the first
    with the cuts off."""
    os.environ[EVAL_CUTS_ENV] = "0"
    before = ReplayServer(timeout, cache_dir=cache)
    before.start()  # the worker takes the environment as it is now
    del os.environ[EVAL_CUTS_ENV]
    after = ReplayServer(timeout, cache_dir=after_cache or cache)
    after.start()
    return {"before": before, "after": after}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--long-rounds", type=int, default=2, help="rounds for relax_1s (each takes minutes)")
    ap.add_argument("--pairs", type=int, default=5, help="pairs per evaluation (r3 tune's default)")
    ap.add_argument(
        "--timeout", type=float, default=600.0, help="seconds per candidate (O0 of relax_1s on a loaded machine)"
    )
    ap.add_argument(
        "--polly", action="store_true", help="the Polly kernel (matmul) and variants, each mode's cache cold at first"
    )
    ap.add_argument("--add", action="store_true", help="add the kernels measured to those already in --out")
    ap.add_argument("--note", default="", help="a sentence added to the json's notes (what else ran meanwhile)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "evalcost.json"))
    ap.add_argument(
        "--summarize", action="store_true", help="only recompute the summaries of --out from its evaluations"
    )
    args = ap.parse_args()
    if args.summarize:
        with open(args.out) as f:
            out = json.load(f)
        for entry in out["kernels"]:
            entry.update(summary(entry))
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        return
    kernels = [POLLY_KERNEL] if args.polly else args.kernels.split(",")
    tmp = tempfile.mkdtemp(prefix="bench-evalcost-")
    src = os.path.join(tmp, "src")
    os.makedirs(src)
    units = ("mmmain.c", "matmul.c") if args.polly else ("main.c", "relax.c")  # the Makefile as before
    for name in units:
        shutil.copy(os.path.join(ROOT, "scripts", "evalcost", name), src)
    objects = " ".join(u[:-2] + ".o" for u in units)
    with open(os.path.join(src, "Makefile"), "w") as f:
        f.write(
            "prog: %s\n\t$(CC) %s -o $@ %s\n"
            "%%.o: %%.c\n\t$(CC) %s -DREPS_1MS=%d -c -o $@ $<\n" % (objects, BUILD, objects, BUILD, REPS_1MS)
        )
    ws = Workspace(os.path.join(tmp, "ws"))
    load = [os.getloadavg()[0]]
    say("recording %s" % ", ".join(kernels))
    rec = record(ws, src, "./prog", kernels=kernels)
    caps = {c.kernel: os.path.join(ws.root, "captures", c.id) for c in rec.captures}
    rng = random.Random(46)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    out = {
        "build": BUILD,
        "pairs": args.pairs,
        "rounds": args.rounds,
        "variants": [name for name, _ in VARIANTS],
        "commit": commit.strip(),
        "machine_cpus": len(os.sched_getaffinity(0)),
        "kernels": [],
    }
    # the Polly kernel: each mode's first evaluations find an empty cache (its Polly stage cold)
    pool = servers(ws.cache_dir, args.timeout, os.path.join(tmp, "cache-after") if args.polly else None)
    if args.add and os.path.exists(args.out):  # the kernels measured before, less those measured again
        with open(args.out) as f:
            earlier = json.load(f)
        out["kernels"] = [k for k in earlier["kernels"] if k["kernel"] not in kernels]
        if args.polly:  # the relax kernels' run keeps its description; the Polly run's goes in its row
            out.update({key: value for key, value in earlier.items() if key != "kernels"})
        else:
            load[0] = earlier.get("load_average", {}).get("start", load[0])
    # where this run's commit, load and notes go: the top level, or the Polly kernel's row
    run = {"commit": commit.strip(), "pairs": args.pairs, "rounds": args.rounds} if args.polly else out

    def write():  # after every round: a run stopped early keeps what it measured
        load_now = os.getloadavg()[0]
        run["load_average"] = {"start": load[0], "end": load_now}
        run["notes"] = (
            "A short run on a machine of %d cores shared with other engineers' builds and tests (load "
            "average %.1f at the start, %.1f at the end): wall times are loaded, spreads wide. Paired ratios "
            "are before/after of one variant's evaluation wall time in one round (both workers alternate in an "
            "order drawn per round). %s" % (out["machine_cpus"], load[0], load_now, args.note)
        ).strip()
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")

    try:
        for kernel in kernels:
            cap = caps[kernel]
            say(kernel)
            entry = {"kernel": kernel, "first": {}, "evaluations": {m: {} for m in MODES}}
            if args.polly:  # each variant's first evaluation, whole: its first compile, the Polly stage cold
                entry.update(polly=True, run=run)
                for mode in MODES:
                    entry["first"][mode] = {
                        name: evaluate(pool[mode], cap, v, args.pairs) for name, v in POLLY_VARIANTS
                    }
            for mode in MODES if not args.polly else ():  # each variant's first compile (one timed run), the
                entry["first"][mode] = {  # baseline's build (one pair)
                    name: evaluate(pool[mode], cap, v, int(i == 0)) for i, (name, v) in enumerate(VARIANTS)
                }
            variants = entry_variants(entry)
            rounds = args.long_rounds if kernel == "relax_1s" else args.rounds
            out["kernels"].append(entry)
            for r in range(rounds):
                for name, variant in variants:
                    for mode in rng.sample(MODES, 2):
                        got = evaluate(pool[mode], cap, variant, args.pairs)
                        entry["evaluations"][mode].setdefault(name, []).append(got)
                entry["rounds"] = r + 1
                entry.update(summary(entry))
                write()
                say(
                    "  round %d: %s"
                    % (
                        r + 1,
                        ", ".join(
                            "%s %.2f/%.2f s"
                            % (
                                n,
                                entry["evaluations"]["before"][n][-1]["wall_s"],
                                entry["evaluations"]["after"][n][-1]["wall_s"],
                            )
                            for n, _ in variants
                        ),
                    )
                )
    finally:
        for server in pool.values():
            server.close()
    say("wrote %s" % args.out)
    shutil.rmtree(tmp, ignore_errors=True)


def summary(entry):
    """Per variant: the before/after ratio of wall times, round by round, and each mode's
    median wall time, its paired runs' time and stage split; the kernel's run time."""
    variants, groups = {}, entry_groups(entry)
    for name, _ in entry_variants(entry):
        before, after = entry["evaluations"]["before"][name], entry["evaluations"]["after"][name]
        row = {"ratio": spread([b["wall_s"] / a["wall_s"] for b, a in zip(before, after)])}
        for mode, evs in (("before", before), ("after", after)):
            row[mode] = {
                "wall_s": median(e["wall_s"] for e in evs),
                "paired_run_s": median(e["stages"].get("timed", 0.0) for e in evs),
                "nominal_paired_s": median(e["nominal_paired_s"] for e in evs),
                # the evaluation against its pairs' runs: as timed (preempted pairs measured
                # again included), and as they would take on an idle machine
                "over_paired": median(e["wall_s"] / e["stages"]["timed"] for e in evs if e["stages"].get("timed")),
                "over_nominal": median(e["wall_s"] / e["nominal_paired_s"] for e in evs if e["nominal_paired_s"]),
                "resampled": sum(e["resampled"] for e in evs),
                "pairs": median(e["pairs"] for e in evs),
                "raced_out": sum(e["raced_out"] for e in evs),
                "stages": {g: median(grouped(e["stages"], groups)[g] for e in evs) for g in grouped({}, groups)},
            }
            if entry.get("polly"):  # its first evaluation, the Polly stage cold
                first = entry["first"][mode][name]
                row[mode]["first"] = {
                    "wall_s": first["wall_s"],
                    "paired_run_s": first["stages"].get("timed", 0.0),
                    "over_paired": first["wall_s"] / first["stages"]["timed"] if first["stages"].get("timed") else None,
                    "stages": grouped(first["stages"], groups),
                }
        variants[name] = row
    o3 = entry["evaluations"]["after"][entry_variants(entry)[0][0]]
    stage_medians = {
        mode: {
            g: median(grouped(e["stages"], groups)[g] for evs in entry["evaluations"][mode].values() for e in evs)
            for g in grouped({}, groups)
        }
        for mode in MODES
    }
    for mode in MODES:
        stage_medians[mode]["total"] = median(e["wall_s"] for evs in entry["evaluations"][mode].values() for e in evs)
    return {"run_s": median(e["baseline_s"] for e in o3), "variants": variants, "stage_medians": stage_medians}


if __name__ == "__main__":
    main()

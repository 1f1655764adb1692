#!/usr/bin/env python3
"""Issue 63's shapes: recurrences, triangular solves, dynamic programming, min-plus
closures, symmetric and 1-D stencil updates, through ``r3 tune`` as a user runs it.

Records the kernels of scripts/kernels63 (our own, none copied from a public suite), built
``-O3 -march=native`` (no OpenMP), then runs ``r3 tune --serial`` on them at the given
budget (default: r3 tune's own, 60), rules only, no model, exact results: every candidate
runs one thread. Each kernel's row is its confirmed speedup over the build (the median of
the winner's paired ratios, with the lowest and highest of its round medians) and its
winner, and where the evaluations went. Rows are written as each run finishes, so a run
cut short keeps what it measured; the geometric mean is over the kernels measured.

Usage: scripts/bench_shapes.py [--kernels closure,trisolve] [--budget 60] [--out bench/shapes.json]
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = (
    "iir_rows",
    "iir_cols",
    "prefix2d",
    "closure",
    "widest",
    "chain_order",
    "edit_distance",
    "trisolve",
    "lu",
    "levinson",
    "symm_lower",
    "smooth1d",
)
# Each kernel's call 5-40 ms at -O3 on a 2-core machine of 2024; arrays beyond L2.
SIZES = "-DH=800 -DW=1000 -DNT=300 -DND=300 -DNE=2000 -DNL=3000 -DNS=200000 -DSTEPS=100"
BUILD = "-O3 -march=native"


def say(line):
    print(line, file=sys.stderr, flush=True)


def load():
    return [round(x, 2) for x in os.getloadavg()]


def tree(tmp, sizes):
    src = os.path.join(tmp, "src")
    os.makedirs(src)
    for name in ("shapes.c", "main.c"):
        shutil.copy(os.path.join(ROOT, "scripts", "kernels63", name), src)
    with open(os.path.join(src, "Makefile"), "w") as f:
        f.write(
            "prog: main.o shapes.o\n\t$(CC) %s -o $@ main.o shapes.o -lm\n"
            "%%.o: %%.c\n\t$(CC) %s %s -c -o $@ $<\n" % (BUILD, BUILD, sizes)
        )
    return src


def r3(*args):
    cmd = [sys.executable, "-m", "spack_r3.cli"] + list(args)
    done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if done.returncode:
        raise SystemExit("r3 %s failed (exit %d)" % (" ".join(args[:3]), done.returncode))
    return done.stdout


def row(result, seconds, before, after):
    return {
        "kernel": result["kernel"],
        "speedup": round(result["speedup"], 3),
        "speedup_min": round(result["speedup_min"], 3),
        "speedup_max": round(result["speedup_max"], 3),
        "won": result["won"],
        "winner": result["winner"],
        "serial_speedup": result.get("serial_speedup"),
        "baseline_s": result["baseline_s"],
        "evaluations": result["evaluations"],
        "failed": result["failed"],
        "spending": (result.get("spending") or {}).get("split"),
        "pairs": result["pairs"],
        "tune_s": round(seconds, 1),
        "load_before": before,
        "load_after": after,
    }


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--budget", type=int, default=60)
    ap.add_argument("--sizes", default=SIZES, help="the kernels' sizes, as -D flags (default %(default)s)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--note", default="", help="a sentence added to the notes (what else ran meanwhile)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "shapes.json"))
    args = ap.parse_args()
    kernels = args.kernels.split(",")
    unknown = sorted(set(kernels) - set(KERNELS))
    if unknown:
        raise SystemExit("unknown kernel(s): %s (scripts/kernels63 has %s)" % (", ".join(unknown), ", ".join(KERNELS)))
    tmp = tempfile.mkdtemp(prefix="bench-shapes-")
    src, ws = tree(tmp, args.sizes), os.path.join(tmp, "ws")
    say("recording scripts/kernels63 (%s %s)" % (BUILD, args.sizes))
    r3("--workspace", ws, "record", "--source", src, "--run", "./prog", *[a for k in kernels for a in ("--kernel", k)])
    out = {
        "what": "r3 tune --serial --budget %d (rules, no model, exact) on scripts/kernels63" % args.budget,
        "build": BUILD,
        "sizes": args.sizes,
        "budget": args.budget,
        "seed": args.seed,
        "machine_cpus": len(os.sched_getaffinity(0)),
        "notes": "Speedups over the build, one thread: the median of the confirmed winner's paired "
        "ratios [lowest-highest round median]; 1.0 where nothing beat the build. Load averages "
        "(1, 5, 15 min) before and after each kernel's run. %s" % args.note,
        "kernels": [],
    }
    for kernel in kernels:
        say("%s" % kernel)
        before, t0 = load(), time.monotonic()
        text = r3(
            "--workspace", ws, "tune", "--kernel", kernel, "--serial", "--budget", str(args.budget),
            "--seed", str(args.seed), "--json",
        )  # fmt: skip
        results = json.loads(text)["kernels"]
        if not results:
            say("  not tuned")
            continue
        r = row(results[0], time.monotonic() - t0, before, load())
        say("  %.2fx [%.2f-%.2f] %s" % (r["speedup"], r["speedup_min"], r["speedup_max"], r["winner"]))
        out["kernels"].append(r)
        out["geomean"] = round(geomean([k["speedup"] for k in out["kernels"]]), 3)
        with open(args.out + ".tmp", "w") as f:  # what is finished is kept if the run is cut short
            json.dump(out, f, indent=1)
        os.replace(args.out + ".tmp", args.out)
    say("geometric mean %.2fx over %d kernel(s)" % (out.get("geomean") or 0, len(out["kernels"])))
    print("wrote %s" % args.out)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What replay saves: the cost of evaluating one compiler-setting change.

For each demo application and its hottest kernel, side by side in one run:
  (a) rebuild the whole application with the changed setting and run it;
  (b) replay the captured kernel under the changed setting (compile + verify +
      timed runs) on a warm replay server;
and the cost of recording: the application's run time under record (probes,
arena heap, captures) over its plain -O3 -march=native run time.

A second section records programs of our own shaped like the public proxy apps (a hot
function called inside an OpenMP parallel loop, kernels next to main, C++ OpenMP methods),
replays every capture, and reports the share of application time that replays verified,
capture bytes against the live heap, and the recording overhead.

Public code (fetch it; never commit it) is measured the same way with --program, e.g.
  --program XSBench /tmp/xsbench/openmp-threading 'make CC=%(cc)s' './XSBench -s small'
where %(cc)s and %(cxx)s stand for the compiler (the record launcher, or plain clang).

Writes bench/replay.json. Usage: scripts/bench_replay.py [--trials 3] [--out bench/replay.json] [--no-shapes]
       [--no-demos] [--program NAME DIR BUILD RUN]...
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from spack_r3 import cxxnames  # noqa: E402
from spack_r3.capture import list_captures  # noqa: E402
from spack_r3.data import Variant  # noqa: E402
from spack_r3.memimage import KIND_CONST, KIND_GLOBAL, KIND_RUNTIME, KIND_STACK, read_regions  # noqa: E402
from spack_r3.record.session import record  # noqa: E402
from spack_r3.compile.pipeline import parse  # noqa: E402
from spack_r3.replay.server import ReplayServer  # noqa: E402
from spack_r3.report import table  # noqa: E402
from spack_r3.toolchain import find_clang  # noqa: E402
from spack_r3.workspace import Workspace  # noqa: E402

# demo, run command, hottest kernel. The runs are sized like a short production run
# (2-3 s at -O3 -march=native on a 2-core machine); the ratio grows with the run's
# length, so bench/replay.json records each plain run's time beside it.
DEMOS = [
    ("heat", "./heat 1024 16000", "jacobi_step"),
    ("cg", "./cg", "spmv"),
    ("nbody", "./nbody 2000 400", "compute_forces"),
]
# The compiler-setting change being evaluated: no loop unrolling.
# Record builds target the host (-march=native), so the plain build does too.
PLAIN_CFLAGS = "-O3 -march=native"
CHANGE_CFLAGS = PLAIN_CFLAGS + " -fno-unroll-loops"
CHANGE_SPEC = "O3,unroll=0"


def timed(cmd, cwd, env=None):
    t0 = time.perf_counter()
    subprocess.run(cmd, shell=True, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def bench_demo(name, run, kernel, clang, ws, trials, say):
    src = os.path.join(ROOT, "repos", "r3", "sources", name)
    say("%s: recording" % name)
    rec = record(ws, src, run, kernels=[kernel], tolerance=1e-9)
    cap = next(c for c in list_captures(ws) if c.kernel == kernel and c.id in {x.id for x in rec.captures})
    cap_dir = ws.capture_dir(cap.id)
    plain = tempfile.mkdtemp(prefix="bench-plain-")
    changed = tempfile.mkdtemp(prefix="bench-rebuild-")
    for d in (plain, changed):
        shutil.rmtree(d)
        shutil.copytree(src, d)
    timed("make CC=%s CFLAGS='%s'" % (clang, PLAIN_CFLAGS), plain)
    recorded_tree = os.path.join(rec.run_dir, "src")

    rebuild, replay, plain_runs, record_runs = [], [], [], []
    with ReplayServer() as server:
        server.load(cap_dir)  # a warm, persistent server: the capture is parsed once
        for t in range(trials):
            say("%s: trial %d/%d" % (name, t + 1, trials))
            rebuild.append(
                timed("make clean && make CC=%s CFLAGS='%s'" % (clang, CHANGE_CFLAGS), changed) + timed(run, changed)
            )
            t0 = time.perf_counter()
            ev = server.submit(cap_dir, Variant(pipeline=parse(CHANGE_SPEC)), repeat=5)
            replay.append(time.perf_counter() - t0)
            if not ev.ok:
                raise SystemExit("%s: replay failed: %s %s" % (name, ev.status, ev.diagnostics))
            # record overhead: plain -O3 and recorded binaries, alternated
            plain_runs.append(timed(run, plain))
            with tempfile.TemporaryDirectory() as rd:
                env = dict(os.environ, R3_RECORD_DIR=rd, R3_CAPTURE="*", R3_INSTANCES="1")
                record_runs.append(timed(run, recorded_tree, env))
    for d in (plain, changed):
        shutil.rmtree(d, ignore_errors=True)
    rb, rp = statistics.median(rebuild), statistics.median(replay)
    return {
        "kernel": kernel,
        "demo": name,
        "run": run,
        "rebuild_s": rb,
        "replay_s": rp,
        "ratio": rb / rp,
        "rebuild": spread(rebuild),
        "replay": spread(replay),
        "replay_compile_s": ev.compile_s,
        "replay_kernel_median_s": ev.time_median_s,
        "in_app_instance_s": cap.instance_s,
        "capture_bytes": sum(os.path.getsize(os.path.join(cap_dir, n)) for n in ("pre.bin", "post.bin")),
        "touched_bytes": cap.memory.get("touched_bytes"),
        "live_heap_bytes": cap.memory.get("live_bytes"),
        "plain_run": spread(plain_runs),
        "record_run": spread(record_runs),
        "record_overhead": statistics.median(r / p for r, p in zip(record_runs, plain_runs)),
    }


# ---- real-code shapes: our own programs shaped like the public proxy apps that failed ----
# (the test suite's programs, run at sizes where a run takes about a second)
sys.path.insert(0, os.path.join(ROOT, "tests"))
import conftest  # noqa: E402,F401  (puts each tests/ folder on the path, as under pytest)
import test_record_parallel as parallel_shapes  # noqa: E402
import test_record_shapes as shapes  # noqa: E402

SHAPES = [
    # name, files, build (sees $R3_CC/$R3_CXX or plain CC/CXX), run
    (
        "xs-proxy (C, OpenMP, Monte Carlo)",
        {"xs.c": parallel_shapes.XS_C, "Makefile": "xs: xs.c\n\t$(CC) -O3 -fopenmp -o xs xs.c\n"},
        "make CC=%(cc)s",
        "./xs 400000 10000000",
    ),
    (
        "polybench-like (C, kernels next to main)",
        {
            "support.h": shapes.SUPPORT_H,
            "support.c": shapes.SUPPORT_C,
            "bench.c": shapes.BENCH_C,
            "Makefile": shapes.BENCH_MAKEFILE,
        },
        "make CC=%(cc)s",
        "./bench",
    ),
    (
        "smoother (C++, OpenMP methods)",
        {
            "smooth.h": shapes.SMOOTH_H,
            "smooth.cpp": shapes.SMOOTH_CPP,
            "main.cpp": shapes.SMOOTH_MAIN,
            "Makefile": shapes.SMOOTH_MAKEFILE,
        },
        "make CXX=%(cxx)s",
        "./smooth",
    ),
]


def bench_shape(name, files, build, run, clang, ws, trials, say):
    """One of our own programs shaped like a public code, measured as ``bench_tree`` does."""
    src = tempfile.mkdtemp(prefix="bench-shape-")
    for fname, text in files.items():
        with open(os.path.join(src, fname), "w") as f:
            f.write(text)
    try:
        return bench_tree(name, src, build, run, clang, ws, trials, say)
    finally:
        shutil.rmtree(src, ignore_errors=True)


def bench_tree(name, src, build, run, clang, ws, trials, say):
    """Record the program in ``src`` (never modified); replay every capture; capture bytes
    against live heap; overhead. ``build`` names the compiler as %(cc)s / %(cxx)s."""
    clangxx = clang.replace("clang", "clang++", 1)
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    say("%s: recording" % name)
    before = {c.id for c in list_captures(ws)}
    rec = record(ws, src, run, build=build % {"cc": '"$R3_CC"', "cxx": '"$R3_CXX"'})
    caps = [c for c in list_captures(ws) if c.id not in before and c.id in {x.id for x in rec.captures}]
    plain = tempfile.mkdtemp(prefix="bench-shape-plain-")
    shutil.rmtree(plain)
    shutil.copytree(src, plain)
    timed(build % {"cc": "'%s -march=native'" % clang, "cxx": "'%s -march=native'" % clangxx}, plain, env)
    recorded_tree = os.path.join(rec.run_dir, "src")
    plain_runs, probe_runs, record_runs = [], [], []
    for t in range(trials):  # alternated: plain, probes only, probes and captures
        say("%s: overhead trial %d/%d" % (name, t + 1, trials))
        plain_runs.append(timed(run, plain, env))
        with tempfile.TemporaryDirectory() as rd:
            probe_runs.append(timed(run, recorded_tree, dict(env, R3_RECORD_DIR=rd, R3_CAPTURE="none")))
        with tempfile.TemporaryDirectory() as rd:
            record_runs.append(timed(run, recorded_tree, dict(env, R3_RECORD_DIR=rd, R3_CAPTURE="*")))
    kernels = []
    with ReplayServer() as server:
        for c in caps:
            cap_dir = ws.capture_dir(c.id)
            files_bytes = sum(os.path.getsize(os.path.join(cap_dir, n)) for n in ("pre.bin", "post.bin"))
            pre = read_regions(os.path.join(cap_dir, "pre.bin"))
            # OpenMP's own blocks and a worker's TLS, where the kernel can reach them: restored, never compared
            runtime_bytes = sum(r.size for r in pre if r.kind == KIND_RUNTIME)
            # the kernel's own data: its inputs (the heap pages it touched; the stack, globals and
            # read-only data its arguments reach) and its outputs (what it changed, compared)
            input_bytes = (c.memory.get("touched_bytes") or 0) + sum(
                r.size for r in pre if r.kind in (KIND_STACK, KIND_GLOBAL, KIND_CONST)
            )
            output_bytes = sum(
                r.size for r in read_regions(os.path.join(cap_dir, "post.bin")) if not (r.path or r.zero)
            )
            data_bytes = input_bytes + output_bytes
            try:
                ev = server.submit(cap_dir, Variant(), repeat=1)
                status = "verified" if ev.ok and ev.verified else ev.status
                detail = ev.diagnostics
            except Exception as err:  # refused: the reason is the result
                status, detail = "refused", str(err)
            kernels.append(
                {
                    "kernel": c.kernel,
                    "share": c.app.get("share") or 0.0,
                    "status": status,
                    "detail": detail[:200],
                    "thread": c.memory.get("thread"),
                    "mode": c.memory.get("mode"),
                    "capture_bytes": files_bytes,
                    "runtime_bytes": runtime_bytes,
                    "touched_bytes": c.memory.get("touched_bytes"),
                    "input_bytes": input_bytes,
                    "output_bytes": output_bytes,
                    "capture_over_data": files_bytes / data_bytes if data_bytes else None,
                    "live_heap_bytes": c.memory.get("live_bytes"),
                }
            )
    shutil.rmtree(plain, ignore_errors=True)
    hot = [h for h in rec.hotness if (h["share"] or 0) > 0.01]
    timeable = statistics.median(plain_runs) >= 0.2  # shorter runs time process start-up
    return {
        "program": name,
        "run": run,
        "kernels": kernels,
        "share_verified": sum(k["share"] for k in kernels if k["status"] == "verified"),
        "share_refused": sum(k["share"] for k in kernels if k["status"] == "refused"),
        "share_failed": sum(k["share"] for k in kernels if k["status"] not in ("verified", "refused")),
        # hot kernels without a capture: refused at record time, with the reason (they read
        # input, say), or missed
        "hot_refused_at_record": {
            h["kernel"]: h["not_captured"] for h in hot if not h["capture"] and h.get("not_captured")
        },
        "hot_uncaptured": [h["kernel"] for h in hot if not h["capture"] and not h.get("not_captured")],
        "plain_run": spread(plain_runs),
        "probe_run": spread(probe_runs),
        "record_run": spread(record_runs),
        "probe_overhead": statistics.median(r / p for r, p in zip(probe_runs, plain_runs)) if timeable else None,
        "record_overhead": statistics.median(r / p for r, p in zip(record_runs, plain_runs)) if timeable else None,
        "capture_cost_s": statistics.median(r - p for r, p in zip(record_runs, probe_runs)),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "replay.json"))
    ap.add_argument("--demo", action="append", help="only these demos")
    ap.add_argument("--no-shapes", action="store_true", help="skip the real-code shapes section")
    ap.add_argument("--no-demos", action="store_true", help="skip the demos section")
    ap.add_argument(
        "--program",
        nargs=4,
        action="append",
        default=[],
        metavar=("NAME", "DIR", "BUILD", "RUN"),
        help="also measure this source tree like the shapes (repeatable)",
    )
    args = ap.parse_args()
    clang = find_clang()
    say = lambda msg: print("==> " + msg, file=sys.stderr, flush=True)  # noqa: E731
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-ws-") as wsdir:
        ws = Workspace(wsdir)
        for name, run, kernel in DEMOS:
            if args.no_demos or (args.demo and name not in args.demo):
                continue
            rows.append(bench_demo(name, run, kernel, clang, ws, args.trials, say))
        real = [] if args.no_shapes else [bench_shape(*spec, clang, ws, args.trials, say) for spec in SHAPES]
        real += [
            bench_tree(name, os.path.abspath(src), build, run, clang, ws, args.trials, say)
            for name, src, build, run in args.program
        ]
    ratios = [r["ratio"] for r in rows]
    result = {
        "change": {"rebuild_cflags": CHANGE_CFLAGS, "replay_pipeline": CHANGE_SPEC},
        "trials": args.trials,
        "machine": {"cpu": os.uname().machine, "nproc": os.cpu_count()},
        "kernels": rows,
        "ratio_min": min(ratios, default=None),
        "ratio_geomean": statistics.geometric_mean(ratios) if ratios else None,
        "record_overhead": max((r["record_overhead"] for r in rows), default=None),
        "real_code_shapes": real,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    if rows:
        print(
            table(
                ["kernel", "rebuild+run", "replay", "ratio", "record overhead", "capture", "live heap"],
                [
                    [
                        r["kernel"],
                        "%.3fs" % r["rebuild_s"],
                        "%.3fs" % r["replay_s"],
                        "%.1fx" % r["ratio"],
                        "%.2fx" % r["record_overhead"],
                        _mib(r["capture_bytes"]),
                        _mib(r["live_heap_bytes"]),
                    ]
                    for r in rows
                ],
            )
        )
    for p in real:
        overhead = (
            "probes %.2fx, probes and captures %.2fx (captures cost %.2f s) [plain %.2f s]"
            % (p["probe_overhead"], p["record_overhead"], p["capture_cost_s"], p["plain_run"]["median"])
            if p["record_overhead"]
            else "not timed (plain run %.3f s)" % p["plain_run"]["median"]
        )
        print(
            "\n%s (%s): recording overhead: %s; app time in captured kernels: %.0f%% verified, %.0f%% refused, "
            "%.0f%% failed; hot kernels not captured: %s%s"
            % (
                p["program"],
                p["run"],
                overhead,
                100 * p["share_verified"],
                100 * p["share_refused"],
                100 * p["share_failed"],
                ", ".join(p["hot_uncaptured"]) or "none",
                "".join(
                    "; %s refused at record time: %s" % (cxxnames.display(k), why)
                    for k, why in p["hot_refused_at_record"].items()
                ),
            )
        )
        print(
            table(
                [
                    "kernel",
                    "thread",
                    "share",
                    "replay",
                    "capture",
                    "of it runtime state",
                    "touched",
                    "inputs",
                    "outputs",
                    "capture/(in+out)",
                    "live heap",
                ],
                [
                    [
                        cxxnames.display(k["kernel"], 40),
                        k["thread"] or "-",
                        "%.1f%%" % (100 * k["share"]),
                        k["status"],
                        _mib(k["capture_bytes"]),
                        _mib(k["runtime_bytes"]),
                        _mib(k["touched_bytes"]),
                        _mib(k["input_bytes"]),
                        _mib(k["output_bytes"]),
                        "%.2f" % k["capture_over_data"] if k["capture_over_data"] else "-",
                        _mib(k["live_heap_bytes"]),
                    ]
                    for k in p["kernels"]
                ],
            )
        )
    if rows:
        print(
            "overall: replay %.1fx cheaper (geomean; min %.1fx); recording overhead at most %.2fx"
            % (result["ratio_geomean"], result["ratio_min"], result["record_overhead"])
        )


def _mib(n):
    return "-" if n is None else "%.2f MiB" % (n / 2**20)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Does what replay predicts hold in the application? For every demo package:
``r3 tune <demo> --run CMD`` (record through Spack, tune, emit the tuned variant), then the
``+r3`` build against the ``~r3`` build, both installed by Spack, timed in the same run as
pairs in alternating order (``roundtrip/check.py``).

    python scripts/bench_apply.py [--budget 16] [--pairs 7] [--demos dense,heat] [--out bench/apply.json]

Writes ``packages``: per demo ``app_untuned_s``, ``app_tuned_s``, ``app_speedup`` with its
spread (min/max of the pair ratios), ``predicted_app_speedup`` (replay's confirmed kernel
speedups weighted by each kernel's share of the untuned run, measured in the timed untuned
build; ``shares_from`` says so, and ``predicted_from_recorded_shares`` is the same prediction
from the recorded run's shares) and ``fidelity`` =
(app_speedup - 1) / (predicted_app_speedup - 1). Target: fidelity at least 0.8 for every demo.
And per tuned kernel, ``kernels_in_app``: its time inside the application in the timed
builds (untuned and tuned, paired), their ratio with its spread, against replay's speedup.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
R3 = os.path.join(os.path.dirname(sys.executable), "r3")

# The run each demo is recorded, tuned and checked with: about half a second untuned as
# Spack builds it, so that scheduler noise is small against the run.
RUNS = {
    "dense": "dense 500 2",
    "heat": "heat 2048 800",
    "cg": "cg 400 1500",
    "nbody": "nbody 2048 40",
}
TOLERANCE = 1e-9  # as bench_search: fast-math and FMA changes are searched within it, and labelled


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--kernel-pairs", type=int, default=5)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--child-budget", type=int, default=4, help="evaluations of each source variant")
    ap.add_argument("--min-share", type=float, default=0.1, help="smallest share of the run worth tuning")
    ap.add_argument(
        "--tolerance",
        type=float,
        default=TOLERANCE,
        help="relative FP tolerance the search may use (default %g, what the demos' self-checks "
        "accept; 0: exact)" % TOLERANCE,
    )
    ap.add_argument(
        "--cache",
        default="auto",
        choices=("auto", "warm", "shared", "cold"),
        help="the caches each timed replay run starts with (r3 tune --cache; default auto: per "
        "kernel, as its application leaves them between its calls)",
    )
    ap.add_argument("--demos", default=",".join(RUNS))
    ap.add_argument("--workspace", default=None, help="default: a fresh temporary directory")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "apply.json"))
    ap.add_argument(
        "--update",
        action="store_true",
        help="replace only the packages run now in --out, keep the others (each says when it ran)",
    )
    args = ap.parse_args()
    ws = args.workspace or tempfile.mkdtemp(prefix="r3-bench-apply-")
    scope = os.path.join(ws, "scope")
    os.makedirs(scope, exist_ok=True)
    with open(os.path.join(scope, "repos.yaml"), "w") as f:
        f.write("repos:\n- %s\n" % os.path.join(ROOT, "repos", "r3"))
    packages = []
    kept = []
    if args.update and os.path.exists(args.out):
        with open(args.out) as f:
            run_now = {"r3-" + d for d in args.demos.split(",")}
            kept = [p for p in json.load(f)["packages"] if p["package"] not in run_now]
    for demo in args.demos.split(","):
        spec = "r3-" + demo
        argv = [
            R3,
            "--workspace",
            ws,
            "tune",
            spec,
            "--run",
            RUNS[demo],
            "--budget",
            str(args.budget),
            "--workers",
            str(args.workers),
            "--min-share",
            str(args.min_share),
            "--confirm-rounds",
            "2",
            "--child-budget",
            str(args.child_budget),
            "--tolerance",
            str(args.tolerance),
            "--check-pairs",
            str(args.pairs),
            "--check-kernel-pairs",
            str(args.kernel_pairs),
            "--cache",
            args.cache,
            "--spack-config",
            scope,
            "--json",
        ]
        print("==> %s: %s" % (spec, " ".join(argv[3:])), flush=True)
        start = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True)
        took = time.monotonic() - start
        if proc.returncode != 0 or not proc.stdout.strip().startswith("{"):
            print(proc.stderr[-2000:], file=sys.stderr)
            packages.append(
                {"package": spec, "error": (proc.stderr.strip().splitlines() or ["?"])[-1], "seconds": took}
            )
            _write(args, kept + packages)
            continue
        out = json.loads(proc.stdout)
        check = out.get("check") or {}
        entry = {
            "package": spec,
            "run": RUNS[demo],
            "seconds": round(took, 1),
            "when": time.strftime("%Y-%m-%d %H:%M"),
            "settings": _settings(args),
            "kernels": [
                {
                    "kernel": k["kernel"],
                    "share": k["share"],
                    "speedup": k["speedup"],
                    "winner": k["winner"],
                    "relaxes_fp": k["relaxes_fp"],
                    "cache": k.get("cache"),
                }
                for k in out["kernels"]
            ],
        }
        if check:
            entry.update(
                {
                    k: check[k]
                    for k in (
                        "app_untuned_s",
                        "app_tuned_s",
                        "app_speedup",
                        "app_speedup_min",
                        "app_speedup_max",
                        "predicted_app_speedup",
                        "fidelity",
                        "pairs",
                        "shares_from",
                        "predicted_from_recorded_shares",
                    )
                }
            )
            entry["kernels_in_app"] = check.get("kernels", [])
        else:
            entry["error"] = "no tuned variant (nothing beat the baseline)"
        packages.append(entry)
        print(
            "    %s" % json.dumps({k: entry.get(k) for k in ("app_speedup", "predicted_app_speedup", "fidelity")}),
            flush=True,
        )
        _write(args, kept + packages)  # after each package: a long run that stops keeps what it measured
    print("%-10s %10s %10s %18s %10s %9s" % ("package", "untuned", "+r3", "app speedup", "predicted", "fidelity"))
    for p in packages:
        if "app_speedup" in p:
            print(
                "%-10s %9.3fs %9.3fs %6.2fx [%.2f-%.2f] %9.2fx %9.2f"
                % (
                    p["package"],
                    p["app_untuned_s"],
                    p["app_tuned_s"],
                    p["app_speedup"],
                    p["app_speedup_min"],
                    p["app_speedup_max"],
                    p["predicted_app_speedup"],
                    p["fidelity"],
                )
            )
        else:
            print("%-10s %s" % (p["package"], p.get("error")))
    print(
        "\n%-10s %-14s %10s %10s %18s %9s %9s"
        % ("package", "kernel", "untuned", "tuned", "in the app", "replay", "fidelity")
    )
    for p in packages:
        for k in p.get("kernels_in_app", []):
            print(
                "%-10s %-14s %9.4fs %9.4fs %6.2fx [%.2f-%.2f] %8.2fx %9.2f"
                % (
                    p["package"],
                    k["kernel"][:14],
                    k["untuned_s"],
                    k["tuned_s"],
                    k["app_speedup"],
                    k["app_speedup_min"],
                    k["app_speedup_max"],
                    k["replay_speedup"],
                    k["fidelity"],
                )
            )
    print("wrote %s" % args.out)


def _settings(args):
    return {
        "budget": args.budget,
        "pairs": args.pairs,
        "kernel_pairs": args.kernel_pairs,
        "workers": args.workers,
        "child_budget": args.child_budget,
        "min_share": args.min_share,
        "tolerance": args.tolerance,
        "cache": args.cache,
    }


def _write(args, packages):
    result = {
        "machine": {"cpu": _cpu(), "cores": os.cpu_count(), "python": platform.python_version()},
        "target": "fidelity >= 0.8 for every demo",
        "packages": packages,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


def _cpu():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()

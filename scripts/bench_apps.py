#!/usr/bin/env python3
"""Does the application get what replay promises? Public applications through Spack's own
recipes, end to end: ``spack r3 tune "<spec> dev_path=<tree>" --run CMD`` (record with
representative instances, tune, emit, then the check that acts: ``+r3`` against ``~r3``
in the application, slower kernels taken out, a variant that is not faster withdrawn).

    python scripts/bench_apps.py --trees /tmp/apps [--apps lulesh-omp,xsbench] [--budget 30] [--update]

The trees are fetched by the user (never committed): ``<trees>/<tree>`` for each app below
(LLNL/LULESH at 2.0.3, ANL-CESAR/XSBench v20, Mantevo/HPCCG, ECP-copa/CoMD v1.1,
ANL-CESAR/SimpleMOC v4). Writes ``bench/apps.json``: per application its kernels (share,
instances captured and how well they stand for the kernel's calls: replay's call against the
application's, time-weighted; the confirmed speedup with its range; the best serial and
threaded codes), the verdict (each check: the application's speedup of ``+r3`` over ``~r3``
with its range, the prediction and the fidelity, each kernel inside the application;
kernels taken out; whether a variant is left), the machine's load before and after.
Goals (issue 56): no emitted variant slower than ``~r3``; application fidelity in
[0.8, 1.25]; LULESH with OpenMP at least 2x over its ``-O3`` build, at least 1.5x on 3 others.
"""

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


@dataclass
class App:
    """One application of the bench: its spec (``{tree}``: its source tree), run, tree
    folder and the environment of its run."""

    name: str
    spec: str
    run: str
    tree: str
    env: tuple = ()  # (("OMP_NUM_THREADS", "2"),)
    args: tuple = ()  # more r3 tune arguments
    inputs: tuple = ()  # (name, text): input files the bench writes; the run names them as {inputs}/name


# SimpleMOC's -s problem (1.2 M 3D tracks, 1.1 GB) runs minutes at -O3 on 2 cores, and the
# record build runs unoptimized: the same model at 19,200 3D tracks and 32 energy groups
# (2.5 s at -O3), in read_input_file's order (a value, then the rest of its line).
SIMPLEMOC_INPUT = """5 - x_assemblies
5 - y_assemblies
5 - cai
3 - fai
2 - axial_exp
0.5 - radial_ray_sep
0.5 - axial_z_sep
5 - n_azimuthal
5 - n_polar_angles
32 - n_egroups
0 - decompose
1 - decomp_assemblies_ax
60 - segments_per_track
21.42 - assembly_width
16.0 - height
0.01 - precision
3000 - n_2D_source_regions_per_assembly
0 - papi_event_set
"""

APPS = [
    App("lulesh-serial", "lulesh@2.0.3~mpi~openmp dev_path={tree}", "lulesh2.0 -s 30 -i 100", "lulesh"),
    App(
        "lulesh-omp",
        "lulesh@2.0.3~mpi+openmp dev_path={tree}",
        "lulesh2.0 -s 30 -i 100",
        "lulesh",
        (("OMP_NUM_THREADS", "2"),),
    ),
    App(
        "xsbench",
        "xsbench@20~mpi+openmp dev_path={tree}",
        "XSBench -s small -m event -l 1000000; [ $? -le 1 ]",
        "xsbench",
        (("OMP_NUM_THREADS", "2"),),
    ),
    App("hpccg", "hpccg@1.0~mpi~openmp dev_path={tree}", "test_HPCCG 60 60 60", "hpccg"),
    App("comd", "comd@1.1~mpi~openmp dev_path={tree}", "CoMD-serial -x 20 -y 20 -z 20 -N 40", "comd"),
    App(
        "simplemoc",
        "simplemoc@4~mpi dev_path={tree}",
        "SimpleMOC -t 1 -i {inputs}/bench.in",
        "simplemoc",
        inputs=(("bench.in", SIMPLEMOC_INPUT),),
    ),
]


def spack():
    root = os.environ.get("SPACK_ROOT") or os.path.expanduser("~/spack")
    return os.path.join(root, "bin", "spack")


def run_app(app, trees, ws, budget, workers, extra, log):
    spec = app.spec.format(tree=os.path.join(trees, app.tree))
    inputs = ws + "-inputs"  # beside the workspace: the run reads them, r3 never writes them
    os.makedirs(inputs, exist_ok=True)
    for name, text in app.inputs:
        with open(os.path.join(inputs, name), "w") as f:
            f.write(text)
    run = app.run.format(inputs=inputs)
    argv = [spack(), "r3", "--workspace", ws, "tune", spec, "--run", run, "--budget", str(budget)]
    argv += ["--workers", str(workers), "--json"] + list(app.args) + list(extra)
    env = dict(os.environ, **dict(app.env))
    env.setdefault("SPACK_PYTHON", sys.executable)
    print("%s: %s" % (app.name, " ".join(shlex.quote(a) for a in argv)), flush=True)
    load0, t0 = os.getloadavg(), time.time()
    with open(log, "w") as err:
        proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    row = {
        "app": app.name,
        "spec": spec.replace(trees, "<trees>"),
        "run": app.run,
        "inputs": dict(app.inputs),
        "env": dict(app.env),
        "budget": budget,
        "rc": proc.returncode,
        "elapsed_s": round(time.time() - t0, 1),
        "load_before": [round(x, 2) for x in load0],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "ran": time.strftime("%Y-%m-%d %H:%M:%S"),
        "log": log,
    }
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        row["error"] = (open(log).read().strip().splitlines() or ["no output"])[-1]
        return row
    row["kernels"] = [_kernel(k) for k in out.get("kernels", [])]
    row["skipped"] = out.get("skipped", [])
    verdict = out.get("verdict") or {}
    row["emitted"] = bool(out.get("emitted"))
    row["why_none"] = verdict.get("why") or ("" if out.get("emitted") else "nothing beat the build")
    row["taken_out"] = verdict.get("taken_out", [])
    row["replaced"] = verdict.get("replaced", [])
    row["flagged"] = verdict.get("flagged", [])
    row["checks"] = [_check(c) for c in verdict.get("checks", [])]
    return row


def _kernel(k):
    inst = k.get("instances") or []
    app_s = sum(i["weight"] * (i.get("app_s") or 0) for i in inst)
    replay_s = sum(i["weight"] * (i.get("replay_s") or 0) for i in inst)
    return {
        "kernel": k.get("kernel_demangled") or k["kernel"],
        "symbol": k["kernel"],
        "share": k["share"],
        "instances": len(inst),
        "weights": [round(i["weight"], 3) for i in inst],
        "captured_call_s": replay_s or None,  # replayed as built, time-weighted
        "app_call_s": app_s or None,  # the same calls in the application (or its mean call)
        "replay_ratio": k.get("replay_ratio"),
        "unrepresentative": k.get("unrepresentative"),
        "speedup": k["speedup"],
        "speedup_range": [k["speedup_min"], k["speedup_max"]],
        "serial_speedup": k.get("serial_speedup"),
        "threaded_speedup": k.get("threaded_speedup"),
        "winner": k.get("winner"),
        "won": k.get("won"),
        "instance_speedups": [i.get("speedup") for i in inst],
    }


def _check(c):
    return {
        "app_speedup": c["app_speedup"],
        "app_speedup_range": [c["app_speedup_min"], c["app_speedup_max"]],
        "pairs": c["pairs"],
        "untuned_s": c["app_untuned_s"],
        "tuned_s": c["app_tuned_s"],
        "predicted": c["predicted_app_speedup"],
        "fidelity": c["fidelity"],
        "kernels": [
            {
                "kernel": k["kernel"],
                "app_speedup": k["app_speedup"],
                "app_speedup_range": [k["app_speedup_min"], k["app_speedup_max"]],
                "replay_speedup": k["replay_speedup"],
                "fidelity": k["fidelity"],
                "share": k.get("outer_share", k["share"]),
            }
            for k in c.get("kernels", [])
        ],
    }


def table(rows):
    lines = [
        "| app | kernels tuned | instances | application (+r3/~r3) | predicted | fidelity | taken out; replaced | variant |"
    ]
    lines.append("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            lines.append("| %s | failed: %s | | | | | | |" % (r["app"], r["error"]))
            continue
        last = r["checks"][-1] if r.get("checks") else None
        won = [k for k in r.get("kernels", []) if k.get("won")]
        lines.append(
            "| %s | %d of %d | %s | %s | %s | %s | %s | %s |"
            % (
                r["app"],
                len(won),
                len(r.get("kernels", [])),
                ", ".join(str(k["instances"]) for k in r.get("kernels", [])),
                "%.2fx [%.2f-%.2f]" % (last["app_speedup"], *last["app_speedup_range"]) if last else "-",
                "%.2fx" % last["predicted"] if last else "-",
                "%.2f" % last["fidelity"] if last else "-",
                "; ".join(
                    [", ".join(t["kernel"] for t in r.get("taken_out", [])) or "-"]
                    + (["replaced: " + ", ".join(t["kernel"] for t in r["replaced"])] if r.get("replaced") else [])
                ),
                "emitted" if r.get("emitted") else "none: " + (r.get("why_none") or "-"),
            )
        )
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", required=True, help="the folder holding each app's fetched tree")
    ap.add_argument("--apps", default=",".join(a.name for a in APPS))
    ap.add_argument("--budget", type=int, default=30)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--workspace-root", default="/tmp/r3-bench-apps", help="a workspace per app under it")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "apps.json"))
    ap.add_argument("--update", action="store_true", help="replace only the apps run now in --out")
    ap.add_argument("--quiet-machine", action="store_true", help="say the machine ran nothing else (you checked)")
    ap.add_argument("extra", nargs="*", help="more r3 tune arguments, after --")
    args = ap.parse_args()
    wanted = args.apps.split(",")
    unknown = set(wanted) - {a.name for a in APPS}
    if unknown:
        sys.exit("bench_apps: unknown app(s): %s" % ", ".join(sorted(unknown)))
    os.makedirs(args.workspace_root, exist_ok=True)
    kept = []
    if args.update and os.path.exists(args.out):
        kept = [r for r in json.load(open(args.out)).get("apps", []) if r["app"] not in wanted]
    rows = []
    for app in [a for a in APPS if a.name in wanted]:
        ws = os.path.join(args.workspace_root, app.name)
        log = os.path.join(args.workspace_root, app.name + ".log")
        row = run_app(app, args.trees, ws, args.budget, args.workers, args.extra, log)
        rows.append(row)
        print(table([row]).splitlines()[-1], flush=True)
        doc = write(args, kept + rows)  # after each app: a bench stopped keeps what it ran
    print(table(doc["apps"]))


def write(args, apps):
    doc = {
        "what": __doc__.splitlines()[0],
        "command": "python scripts/bench_apps.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "commit": subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "quiet": args.quiet_machine,
        },
        "apps": apps,
    }
    with open(args.out + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(args.out + ".tmp", args.out)
    return doc


if __name__ == "__main__":
    main()

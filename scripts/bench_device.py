#!/usr/bin/env python3
"""OpenMP offload kernels on libomptarget's host plugin: what record, replay and tune cost
and give. ALL TIMES ARE CPU TIMES of the host plugin (the regions run on this machine's
CPU as device kernels), never GPU timings.

For each application (the offload demo, and XSBench's openmp-offload version with
--xsbench DIR):
  - rebuild-and-run: the cost of evaluating one compiler-setting change by building the
    application again with it and running it (wall seconds), against
  - replay: one evaluation of the same change on the hottest region's capture (compile,
    verify, timed runs, on a warm replay server);
  - capture bytes (pre.bin + post.bin) against the bytes the launch maps;
  - r3 tune's confirmed result (its paired confirmation rounds, as r3 tune reports it) and,
    from the same study, the best search-time speedups of candidates that change only the
    launch geometry, only the pipeline, or both (search-time pairs, not confirmed);
  - the tuned region's static resources on each GPU of --gpu (r3 retarget of the tuned
    workspace: registers, spills, stack, shared memory, theoretical occupancy; compiled
    here, no GPU ran).

Apps not measured in a run (XSBench without --xsbench) keep their rows from the existing
--out file.

Writes bench/device.json. Usage:
  scripts/bench_device.py [--out bench/device.json] [--budget 16] [--gpu sm_80,sm_90,gfx90a,gfx942]
      [--xsbench /tmp/xsb-off/openmp-offload] [--xsbench-lookups 200000]
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from spack_r3 import cli  # noqa: E402
from spack_r3.capture import list_captures  # noqa: E402
from spack_r3.data import Variant  # noqa: E402
from spack_r3.compile.pipeline import parse  # noqa: E402
from spack_r3.replay.server import ReplayServer  # noqa: E402
from spack_r3.search.store import storage  # noqa: E402
from spack_r3.workspace import Workspace  # noqa: E402

LIBDIR = subprocess.run(["llvm-config-19", "--libdir"], capture_output=True, text=True).stdout.strip()
ENV = "LD_LIBRARY_PATH=%s " % LIBDIR
OFFLOAD = "-fopenmp -fopenmp-targets=x86_64-pc-linux-gnu"
CHANGE_SPEC = "O3,unroll=0"  # the compiler-setting change evaluated both ways
LABEL = (
    "host-plugin CPU timings: libomptarget's x86_64 host plugin runs the target regions on this CPU; "
    "these are not GPU speedups"
)


def wall(cmd, cwd, env=None):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, shell=True, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit("%s failed in %s: %s" % (cmd, cwd, (proc.stdout + proc.stderr)[-2000:]))
    return time.perf_counter() - t0


def r3(*argv):
    return cli.main([str(a) for a in argv])


def measure(name, tree, build, run, budget, tmp, gpus):
    """One application: returns its bench/device.json entry."""
    ws = os.path.join(tmp, name + "-ws")
    src = os.path.join(tmp, name + "-src")
    shutil.copytree(tree, src)
    # rebuild-and-run with the change (-fno-unroll-loops), as a user without replay would
    plain_cc = "clang-19"
    rebuild = wall(
        "make clean >/dev/null 2>&1; "
        + build % {"cc": plain_cc, "flags": "-O3 -fno-unroll-loops"}
        + " && "
        + ENV
        + run,
        src,
    )
    t0 = time.perf_counter()
    if (
        r3(
            "--workspace",
            ws,
            "record",
            "--source",
            tree,
            "--build",
            build % {"cc": "$R3_CC", "flags": "-O3"},
            "--run",
            ENV + run,
        )
        != 0
    ):
        raise SystemExit("r3 record of %s failed" % name)
    record_s = time.perf_counter() - t0
    caps = sorted(list_captures(Workspace(ws)), key=lambda c: -(c.app.get("share") or 0))
    hot = caps[0]
    cdir = Workspace(ws).capture_dir(hot.id)
    capture_bytes = sum(os.path.getsize(os.path.join(cdir, f)) for f in ("pre.bin", "post.bin"))
    with ReplayServer() as server:
        server.submit(cdir, Variant(), repeat=1)  # warm: the capture parsed, the baseline built
        t0 = time.perf_counter()
        ev = server.submit(cdir, Variant(pipeline=parse(CHANGE_SPEC)), repeat=3)
        replay_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    with open(out, "w") as f:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "spack_r3.cli",
                "--workspace",
                ws,
                "tune",
                "--kernel",
                hot.kernel,
                "--budget",
                str(budget),
                "--pairs",
                "3",
                "--confirm-pairs",
                "5",
                "--confirm-rounds",
                "2",
                "--mutator",
                "none",
                "--seed",
                "1",
                "--timeout",
                "300",
                "--json",
            ],
            stdout=f,
            stderr=subprocess.DEVNULL,
        )
    tune_s = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit("r3 tune of %s failed" % name)
    with open(out) as f:
        [tuned] = json.load(f)["kernels"]
    return {
        "app": name,
        "kernel": hot.kernel,
        "run": run,
        "share": hot.app.get("share"),
        "calls": hot.app.get("calls"),
        "kernel_in_app_s": hot.instance_s,
        "rebuild_and_run_s": rebuild,
        "record_s": record_s,
        "replay_evaluation_s": replay_s,
        "replay_status": ev.status,
        "replay_verified": ev.verified,
        "replay_median_s": ev.time_median_s,
        "rebuild_over_replay": rebuild / replay_s if replay_s else None,
        "capture_bytes": capture_bytes,
        "mapped_bytes": hot.memory.get("touched_bytes"),
        "map_list_bytes": hot.memory.get("mapped_bytes"),
        "tune_s": tune_s,
        "tune": _tuned(tuned, ws),
        "gpu_resources": _resources(ws, hot.kernel, gpus),
    }


def _resources(ws, kernel, gpus):
    """The tuned region's static figures per GPU target (r3 retarget --json), one row each."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "spack_r3.cli",
            "--workspace",
            ws,
            "retarget",
            "--gpu",
            gpus,
            "--kernel",
            kernel,
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["r3 retarget failed"])[-1]}
    [k] = json.loads(proc.stdout)["kernels"]
    rows = []
    for v in k["verdicts"]:
        r, o = v.get("resources") or {}, v.get("occupancy") or {}
        rows.append(
            {
                "target": v["target"],
                "ok": v["ok"],
                "reason": v["reason"],
                **{
                    key: r.get(key)
                    for key in (
                        "registers",
                        "sgprs",
                        "spill_stores",
                        "spill_loads",
                        "stack",
                        "shared",
                        "max_threads",
                        "wave_size",
                    )
                },
                "occupancy": o.get("fraction"),
                "limiter": o.get("limiter"),
            }
        )
    return {
        "tuned_variant": k["tuned"],
        "label": "static figures of code compiled here for each GPU; no GPU ran",
        "targets": rows,
    }


def _tuned(k, ws):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=k["study"], storage=storage(Workspace(ws)))
    best = {"geometry": None, "pipeline": None, "both": None}
    default = Variant().pipeline.to_json()
    for t in study.get_trials():
        ev = t.user_attrs.get("evaluation")
        if not ev or t.value is None or t.user_attrs.get("status") != "ok":
            continue
        launch, pipe = ev["variant"]["launch"], ev["variant"]["pipeline"]
        geometry = bool(launch.get("num_teams") or launch.get("thread_limit"))
        piped = any(
            pipe.get(key) != default.get(key)
            for key in (
                "opt",
                "loop_vectorize",
                "slp_vectorize",
                "unroll",
                "interleave",
                "inline_threshold",
                "passes",
                "codegen",
                "noalias",
                "polly",
                "fast_math",
            )
        )
        kind = "both" if geometry and piped else "geometry" if geometry else "pipeline" if piped else None
        if kind and (best[kind] is None or t.value > best[kind]["speedup"]):
            best[kind] = {"speedup": t.value, "launch": launch, "pipeline": pipe}
    return {
        "confirmed_speedup": k["speedup"],
        "confirmed_min": k["speedup_min"],
        "confirmed_max": k["speedup_max"],
        "winner": k["winner"],
        "winner_launch": k["variant"]["launch"],
        "evaluations": k["evaluations"],
        "search_best_unconfirmed": best,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "device.json"))
    parser.add_argument("--budget", type=int, default=16)
    parser.add_argument("--xsbench", help="XSBench's openmp-offload directory (fetched, never committed)")
    parser.add_argument("--xsbench-lookups", type=int, default=200000)
    parser.add_argument("--gpu", default="sm_80,sm_90,gfx90a,gfx942", help="GPU targets of the resource table")
    args = parser.parse_args(argv)
    apps = []
    load = os.getloadavg()  # other work on the machine: host-plugin timings move with it
    with tempfile.TemporaryDirectory(prefix="r3-bench-device-") as tmp:
        apps.append(
            measure(
                "heat-offload",
                os.path.join(ROOT, "repos", "r3", "sources", "heat-offload"),
                'make CC="%(cc)s" CFLAGS="%(flags)s"',
                "./heat 512 400",
                args.budget,
                tmp,
                args.gpu,
            )
        )
        if args.xsbench:
            # XSBench knows its checksum for the default lookups only: a run is right when it
            # prints the checksum of a plain build's run of the same lookups
            build = 'make CC="%(cc)s" CFLAGS="-std=gnu99 %(flags)s ' + OFFLOAD + '"'
            run = "./XSBench -s small -m event -l %d" % args.xsbench_lookups
            plain = os.path.join(tmp, "xsbench-plain")
            shutil.copytree(args.xsbench, plain)
            wall(build % {"cc": "clang-19", "flags": "-O3"}, plain)
            text = subprocess.run(ENV + run, shell=True, cwd=plain, capture_output=True, text=True).stdout
            checksum = next(line.split(":")[1].split()[0] for line in text.splitlines() if "checksum" in line)
            apps.append(
                measure(
                    "XSBench-openmp-offload",
                    args.xsbench,
                    build,
                    run + " > out.txt; cat out.txt; grep -q 'checksum: %s ' out.txt" % checksum,
                    args.budget,
                    tmp,
                    args.gpu,
                )
            )
    measured = {a["app"] for a in apps}
    if os.path.exists(args.out):  # rows of apps this run did not measure stay as they were
        with open(args.out) as f:
            apps += [a for a in json.load(f).get("apps", []) if a["app"] not in measured]
    result = {
        "label": LABEL,
        "machine": {
            "cpus": os.cpu_count(),
            "cpu": platform.processor() or platform.machine(),
            "load_average_1m": {"start": load[0], "end": os.getloadavg()[0]},
        },
        "change_evaluated": CHANGE_SPEC,
        "apps": apps,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    for a in apps:
        t = a["tune"]
        print(
            "%s: rebuild+run %.2fs vs replay %.2fs (%.1fx); capture %d B for %d B mapped; tune %s %.3fx [%.3f-%.3f]"
            % (
                a["app"],
                a["rebuild_and_run_s"],
                a["replay_evaluation_s"],
                a["rebuild_over_replay"] or 0,
                a["capture_bytes"],
                a["mapped_bytes"],
                t["winner"],
                t["confirmed_speedup"],
                t["confirmed_min"],
                t["confirmed_max"],
            )
        )
    print("(%s)" % LABEL)


if __name__ == "__main__":
    main()

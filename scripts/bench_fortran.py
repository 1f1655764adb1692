#!/usr/bin/env python3
"""Fortran applications through r3: what record finds, what replays, what tuning confirms.

    python scripts/bench_fortran.py --trees /tmp/apps [--apps fheat,cloverleaf] [--budget 24] [--update]

For each application (a source tree; the public ones fetched by the user, never
committed: ``<trees>/<tree>``) this builds it plainly and times its run (the recording's
overhead is against that), records it with ``r3 record`` (flang behind the launcher),
replays every captured kernel (``r3 replay --json``), and tunes the replayable ones
(``r3 tune --mutator rules``). Writes ``bench/fortran.json``: per application the
kernels found with their share of the run, what replay refused and why, which replayed
verified, the recording's overhead, each kernel's confirmed speedup with its range and
winner, and the machine's load before and after. The application speedup of a ``+r3``
build comes from ``spack r3 tune`` (``--spack``: the apps with a Spack spec).
"""

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
R3 = [sys.executable, "-m", "spack_r3.cli"]
FLANG, CLANG = "flang-new-19", "clang-19"


@dataclass
class App:
    """One application: its tree (under --trees, or a path of this repository), the build
    command with ``{fc}``/``{cc}`` for the compilers (the launcher goes in front of them),
    a shell snippet run on a fresh copy before the build, the run command (from the
    build directory, the tree's root unless ``workdir``) and its environment."""

    name: str
    tree: str
    build: str
    run: str
    prepare: str = ""
    workdir: str = ""
    env: tuple = (("OMP_NUM_THREADS", "1"),)
    spack: str = ""  # a spec for spack r3 tune ({tree}: the tree), where Spack's recipe builds it


# A smaller problem than the deck's 960x960 cells (no test_problem: its reference is for that size).
CLOVER_INPUT = "sed -i 's/x_cells=960/x_cells=480/; s/y_cells=960/y_cells=480/; s/end_step=87/end_step=60/' clover.in"
# makenek knows no flang: REAL*8 promotion and preprocessing as gfortran's, MPI off, the
# compilers from the bench (R3_F77, R3_CC_), every 7th element count of data.rea
NEKBONE_SERIAL = (
    'cd test/example1 && sed -i \'s|^SOURCE_ROOT=.*|SOURCE_ROOT="$(cd ../../src \\&\\& pwd)"|; '
    's|^F77=.*|F77="${R3_F77:-flang-new-19}"|; s|^CC=.*|CC="${R3_CC_:-clang-19}"|; '
    's|^#IFMPI="false"|IFMPI="false"|\' makenek && sed -i \'s/^1   50  1 = iel0/1   50  7 = iel0/\' data.rea && '
    'sed -i \'s/^case \\$F77comp in$/case "$F77" in\\n  *flang*) P="-fdefault-real-8 -fdefault-double-8 -cpp";;/\' '
    "../../src/makenek.inc"
)

APPS = [
    App(
        "fheat",
        os.path.join(ROOT, "repos", "r3", "sources", "fheat"),
        "make FC={fc} CC={cc}",
        "./fheat 384 300",
        spack="r3-fheat",
    ),
    # UK-MAC/CloverLeaf_Serial: Fortran driver, Fortran kernels (or C ones: cloverleaf-c)
    App(
        "cloverleaf",
        "cloverleaf",
        'make COMPILER=GNU FLAGS_GNU="-O3 -march=native" CFLAGS_GNU="-O3 -march=native" '
        "MPI_COMPILER={fc} C_MPI_COMPILER={cc}",
        "./clover_leaf",
        prepare=CLOVER_INPUT,
    ),
    App(
        "cloverleaf-c",
        "cloverleaf",
        'make COMPILER=GNU FLAGS_GNU="-O3 -march=native" CFLAGS_GNU="-O3 -march=native" '
        "MPI_COMPILER={fc} C_MPI_COMPILER={cc}",
        "./clover_leaf",
        prepare=CLOVER_INPUT + " && sed -i 's/^ test_problem 2/ use_c_kernels/' clover.in",
    ),
    # lanl/SNAP: Fortran 90 transport sweeps, serial (MPI=no OPENMP=no), a small deck
    App(
        "snap",
        "snap",
        "cd src && make MPI=no OPENMP=no FORTRAN={fc}",
        "./gsnap inp.small out.small",
        prepare="sed -e 's/npey=2/npey=1/; s/npez=2/npez=1/; s/nthreads=2/nthreads=1/; s/nx=6/nx=12/; "
        "s/ny=6/ny=12/; s/nz=6/nz=12/; s/nang=10/nang=24/; s/ng=4/ng=12/' qasnap/sample/inp > src/inp.small",
        workdir="src",
    ),
    # Nek5000/Nekbone: spectral-element CG, serial build through its makenek
    App(
        "nekbone",
        "nekbone",
        "cd test/example1 && R3_F77={fc} R3_CC_={cc} ./makenek ex1",
        "./nekbone",
        prepare=NEKBONE_SERIAL,
        workdir="test/example1",
    ),
]


def sh(cmd, cwd=None, env=None, timeout=3600):
    return subprocess.run(
        cmd, cwd=cwd, env=env, shell=isinstance(cmd, str), capture_output=True, text=True, timeout=timeout
    )


def r3(ws, *argv, timeout=7200):
    proc = subprocess.run(R3 + ["--workspace", ws] + list(argv), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError("r3 %s: %s" % (" ".join(argv[:2]), (proc.stderr.strip().splitlines() or ["?"])[-1]))
    return json.loads(proc.stdout)


def tree_of(app, trees):
    return app.tree if os.path.isabs(app.tree) else os.path.join(trees, app.tree)


def plain_time(app, tree, env, runs=3):
    """Median wall time of the plain build's run (flang, no launcher)."""
    with tempfile.TemporaryDirectory(prefix="r3-bench-") as tmp:
        src = os.path.join(tmp, "src")
        shutil.copytree(tree, src, symlinks=True)
        if app.prepare:
            sh(app.prepare, cwd=src, env=env)
        built = sh(app.build.format(fc=FLANG, cc=CLANG), cwd=src, env=env)
        if built.returncode != 0:
            raise RuntimeError("plain build: %s" % (built.stderr.strip().splitlines() or ["?"])[-1])
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            ran = sh(app.run, cwd=os.path.join(src, app.workdir), env=env)
            times.append(time.perf_counter() - t0)
            if ran.returncode != 0:
                raise RuntimeError("plain run: %s" % (ran.stderr.strip().splitlines() or ["?"])[-1])
        return statistics.median(times)


def bench_app(app, trees, budget, say):
    env = dict(os.environ, **dict(app.env))
    tree = tree_of(app, trees)
    out = {"app": app.name, "tree": tree, "build": app.build, "run": app.run, "env": dict(app.env)}
    out["plain_s"] = plain_time(app, tree, env)
    say("%s: plain run %.3fs" % (app.name, out["plain_s"]))
    ws = tempfile.mkdtemp(prefix="r3-bench-fortran-")
    src = tree
    if app.prepare:  # the edit goes on a copy: r3 record copies the tree it is given
        src = os.path.join(ws, "prepared")
        shutil.copytree(tree, src, symlinks=True)
        sh(app.prepare, cwd=src, env=env)
    build = app.build.format(fc='"$R3_FC"', cc='"$R3_CC"')
    run = "cd %s && %s" % (shlex.quote(app.workdir), app.run) if app.workdir else app.run
    t0 = time.perf_counter()
    rec = r3(ws, "record", "--source", src, "--build", build, "--run", run, "--json")
    out["record_wall_s"] = time.perf_counter() - t0
    out["recorded_app_s"] = rec["app_s"]
    out["record_overhead"] = rec["app_s"] / out["plain_s"] if out["plain_s"] else None
    kernels = r3(ws, "kernels", "--json")
    rows = []
    for k in kernels:
        row = {
            "kernel": k["kernel_demangled"],
            "source": k["source"],
            "share": k["share"],
            "calls": k["calls"],
            "unreplayable": k["unreplayable"],
        }
        if not k["unreplayable"] and not k["corrupt"]:
            try:
                rep = r3(ws, "replay", k["id"], "--repeat", "3", "--json", timeout=1800)
                row["verified"] = bool(rep.get("verified"))
                row["status"] = rep.get("status")
            except RuntimeError as err:
                row["verified"], row["status"] = False, str(err)
        rows.append(row)
        say(
            "  %-40s share %5.1f%%  %s"
            % (row["kernel"][:40], 100 * (row["share"] or 0), row.get("status") or row["unreplayable"])
        )
    out["kernels"] = rows
    hot = [r for r in rows if (r["share"] or 0) >= 0.01]
    out["coverage"] = sum(r["share"] or 0 for r in rows)
    out["hot_kernels"] = len(hot)
    out["hot_verified"] = sum(1 for r in hot if r.get("verified"))
    tuned = r3(ws, "tune", "--mutator", "rules", "--budget", str(budget), "--json", timeout=14400)
    out["tuned_share"] = tuned.get("covered_share")
    out["tuned"] = [
        {
            "kernel": t["kernel_demangled"],
            "share": t["share"],
            "speedup": t["speedup"],
            "range": [t["speedup_min"], t["speedup_max"]],
            "winner": t["winner"],
            "evaluations": t["evaluations"],
        }
        for t in tuned["kernels"]
    ]
    for t in out["tuned"]:
        say(
            "  tuned %-34s %.2fx [%.2f-%.2f] %s"
            % (t["kernel"][:34], t["speedup"], t["range"][0], t["range"][1], t["winner"])
        )
    shutil.rmtree(ws, ignore_errors=True)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", default="/tmp/apps", help="where the fetched public trees are")
    parser.add_argument("--apps", default=",".join(a.name for a in APPS))
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--update", action="store_true", help="merge into bench/fortran.json (else print)")
    args = parser.parse_args(argv)
    wanted = args.apps.split(",")
    path = os.path.join(ROOT, "bench", "fortran.json")
    result = {}
    if args.update and os.path.exists(path):
        with open(path) as f:
            result = json.load(f)
    commit = sh(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT).stdout.strip()
    for app in APPS:
        if app.name not in wanted:
            continue
        load_before = os.getloadavg()
        try:
            entry = bench_app(app, args.trees, args.budget, lambda m: print(m, flush=True))
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as err:
            entry = {"app": app.name, "error": str(err)}
            print("%s: %s" % (app.name, err), flush=True)
        entry.update(
            commit=commit,
            budget=args.budget,
            machine={"cpus": os.cpu_count(), "platform": platform.platform()},
            load_before=load_before,
            load_after=os.getloadavg(),
            date=time.strftime("%Y-%m-%d %H:%M"),
        )
        result.setdefault("apps", {})[app.name] = entry
        if args.update:
            with open(path, "w") as f:
                json.dump(result, f, indent=1)
                f.write("\n")
    if not args.update:
        print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

"""r3-record as a build sees it: a compiler launcher that must never break a build."""

import json
import os
import subprocess
import sys

import pytest

LAUNCHER = [sys.executable, "-m", "spack_r3.record.launcher"]

KERNEL_C = r"""
void scale(int n, double a, double *x) { for (int i = 0; i < n; i++) x[i] *= a; }
"""
MAIN_C = r"""
#include <stdio.h>
#include <stdlib.h>
void scale(int n, double a, double *x);
int main(void) {
    double *x = malloc(100 * sizeof *x);
    for (int i = 0; i < 100; i++) x[i] = i;
    scale(100, 2.0, x);
    printf("%g\n", x[99]);
    return x[99] == 198.0 ? 0 : 1;
}
"""


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "kernel.c").write_text(KERNEL_C)
    (tmp_path / "main.c").write_text(MAIN_C)
    return tmp_path


def launch(args, cwd, record_dir=None, **kw):
    env = dict(os.environ)
    env.pop("R3_RECORD_DIR", None)
    if record_dir:
        env["R3_RECORD_DIR"] = str(record_dir)
    return subprocess.run(LAUNCHER + [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, **kw)


def units(record_dir):
    out = {}
    for tu in (record_dir / "tus").iterdir():
        meta = json.loads((tu / "tu.json").read_text())
        out[os.path.basename(meta["source_file"])] = meta
    return out


def test_compile_and_link_in_one_step_records_and_runs(tree, clang):
    rec = tree / "rec"
    proc = launch([clang, "-O2", "-o", "app", "kernel.c", "main.c"], tree, rec)
    assert proc.returncode == 0, proc.stderr
    meta = units(rec)
    assert [k["name"] for k in meta["kernel.c"]["kernels"]] == ["scale"]
    assert meta["main.c"]["kernels"] == []  # main is never a kernel
    run = subprocess.run(
        ["./app"], cwd=tree, env=dict(os.environ, R3_RECORD_DIR=str(rec)), capture_output=True, text=True
    )
    assert run.returncode == 0 and run.stdout.strip() == "198"
    profile = json.loads(next(rec.glob("profile.*.json")).read_text())
    assert [(k["name"], k["calls"]) for k in profile["kernels"]] == [("scale", 1)]
    assert any(d.name.startswith("scale-1-") for d in (rec / "captures").iterdir())


def test_dependency_files_name_the_real_object(tree, clang):
    proc = launch([clang, "-O2", "-MD", "-MF", "kernel.d", "-c", "kernel.c", "-o", "kernel.o"], tree, tree / "rec")
    assert proc.returncode == 0, proc.stderr
    deps = (tree / "kernel.d").read_text()
    assert deps.startswith("kernel.o:") and "kernel.c" in deps
    assert (tree / "kernel.o").exists()


def test_unoptimized_builds_still_give_optimizable_bitcode(tree, clang):
    rec = tree / "rec"
    assert launch([clang, "-O0", "-c", "kernel.c", "-o", "kernel.o"], tree, rec).returncode == 0
    (tu,) = (rec / "tus").iterdir()
    import llvmlite.binding as llvm

    module = llvm.parse_bitcode((tu / "module.bc").read_bytes())
    assert "optnone" not in str(module.get_function("scale"))


def test_without_a_record_dir_the_compiler_runs_unchanged(tree, clang):
    proc = launch([clang, "-O2", "-c", "kernel.c", "-o", "kernel.o"], tree)
    assert proc.returncode == 0 and (tree / "kernel.o").exists()
    nm = subprocess.run(["nm", str(tree / "kernel.o")], capture_output=True, text=True).stdout
    assert "__r3_enter" not in nm and "scale" in nm


def test_preprocessing_passes_through(tree, clang):
    proc = launch([clang, "-E", "kernel.c"], tree, tree / "rec")
    assert proc.returncode == 0 and "void scale" in proc.stdout
    assert not (tree / "rec" / "tus").exists()


def test_a_broken_source_fails_like_the_compiler_does(tree, clang):
    (tree / "bad.c").write_text("int f(void) { return undefined_name; }\n")
    proc = launch([clang, "-O2", "-c", "bad.c", "-o", "bad.o"], tree, tree / "rec")
    assert proc.returncode != 0
    assert "undefined_name" in proc.stderr and "Traceback" not in proc.stderr


def test_a_unit_reading_a_global_at_a_fixed_index_gets_probes(tmp_path, clang):
    # `table[3]` is a constant expression over @table in the IR, which llvmlite cannot walk
    (tmp_path / "fixed.c").write_text(
        "double table[8];\n"
        "double sum(int n, const double *x) { double s = table[3]; for (int i = 0; i < n; i++) s += x[i]; return s; }\n"
    )
    rec = tmp_path / "rec"
    proc = launch([clang, "-O2", "-c", "fixed.c", "-o", "fixed.o"], tmp_path, rec)
    assert proc.returncode == 0 and "without probes" not in proc.stderr, proc.stderr
    kernels = units(rec)["fixed.c"]["kernels"]
    assert [(k["name"], [g["name"] for g in k["globals"]]) for k in kernels] == [("sum", ["table"])]


SHARES_C = r"""
#include <stdio.h>
#include <stdlib.h>
/* a short leaf kernel (a table search, as XSBench's grid search) called on every step of a
 * driver that does about as much work of its own */
int lookup(const double *t, int n, double x) {
    int lo = 0, hi = n - 1;
    while (hi - lo > 1) { int mid = (lo + hi) / 2; if (t[mid] > x) hi = mid; else lo = mid; }
    return lo;
}
double transport(const double *t, int n, long steps) {
    double s = 0, x = 0.5;
    for (long i = 0; i < steps; i++) {
        double y = t[lookup(t, n, x * n)];
        for (int k = 0; k < 24; k++) y = y * 0.999 + 1e-3; /* the driver's own work */
        s += y;
        x = x * 3.99 * (1 - x); /* a chaotic walk over the table */
        if (x <= 0 || x >= 1) x = 0.37;
    }
    return s;
}
int main(void) {
    int n = 4096;
    double *t = malloc(n * sizeof *t), s = 0;
    for (int i = 0; i < n; i++) t[i] = i;
    for (int r = 0; r < 4; r++) s += transport(t, n, 1500000);
    printf("%.3f\n", s);
    free(t);
    return 0;
}
"""


def test_shares_of_a_short_leaf_and_its_driver_come_from_the_profilers_ticks(tmp_path, clang):
    """Timed one call in 32, a 60 ns search comes out at nearly the whole run and its driver
    at nothing (perf on the same shape: 43% and 57%). The runtime's profiler ticks on the
    main thread's CPU clock and counts each tick for the kernel running its own code, the
    fast-path leaf included; shares come from those counts."""
    from spack_r3.record.profiles import load_profiles, outer_share_of, share_of

    (tmp_path / "shares.c").write_text(SHARES_C)
    proc = launch([clang, "-O2", "-o", "shares", "shares.c"], tmp_path, tmp_path / "rec")
    assert proc.returncode == 0 and "without probes" not in proc.stderr, proc.stderr

    def shares(sample_us):
        out = tmp_path / ("rec-%s" % sample_us)
        run = subprocess.run(
            ["./shares"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=dict(os.environ, R3_RECORD_DIR=str(out), R3_CAPTURE="none", R3_SAMPLE_US=sample_us),
        )
        assert run.returncode == 0, run.stderr
        profile = json.loads(next(out.glob("profile.*.json")).read_text())
        stats, app_s = load_profiles(str(out), min_events=1)  # how many a share needs: the next test
        return (
            profile,
            {name: share_of(s, app_s) for (_, name), s in stats.items()},
            {name: outer_share_of(s, app_s) for (_, name), s in stats.items()},
        )

    profile, ticked, outer = shares("1000")
    assert profile["sample_ns"] == 1000000 and profile["main_samples"] >= 100
    # about 0.4 and 0.6 of the run on an idle machine; on a loaded one the CPU-clock ticks
    # cover less of the wall time, so what holds anywhere is their split
    both = ticked["lookup"] + ticked["transport"]
    assert 0 < both <= 1.0
    assert ticked["lookup"] / both > 0.15 and ticked["transport"] / both > 0.15
    # As the outermost kernel on the stack: the driver holds every tick of the leaf, which
    # nothing else calls, so a tuned driver (the leaf as its own copy) is weighed once.
    samples = {k["name"]: k for k in profile["kernels"]}
    assert samples["lookup"]["main_outer_samples"] == 0
    assert (
        samples["transport"]["main_outer_samples"]
        == samples["transport"]["main_samples"] + samples["lookup"]["main_samples"]
    )
    assert outer["lookup"] == 0 and outer["transport"] == pytest.approx(ticked["lookup"] + ticked["transport"])
    profile, timed, timed_outer = shares("0")  # no profiler: the timed shares, as before
    assert profile["sample_ns"] == 0 and all(k["main_samples"] == 0 for k in profile["kernels"])
    assert timed["lookup"] > ticked["lookup"]
    assert timed_outer["lookup"] == 0 and timed_outer["transport"] > 0.5  # its top calls, timed


def test_a_process_with_few_profiler_samples_keeps_its_timed_shares(tmp_path, clang):
    """A tick-based share from n samples is off by up to 0.5/sqrt(n); a short run's timed
    times are the more exact. Both kernels here run long calls, which timing measures well."""
    from spack_r3.record.profiles import MIN_SAMPLE_EVENTS, load_profiles, share_of

    (tmp_path / "shares.c").write_text(SHARES_C)
    assert launch([clang, "-O2", "-o", "shares", "shares.c"], tmp_path, tmp_path / "rec").returncode == 0
    out = tmp_path / "profile"
    run = subprocess.run(
        ["./shares"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=dict(os.environ, R3_RECORD_DIR=str(out), R3_CAPTURE="none"),
    )
    assert run.returncode == 0, run.stderr
    profile = json.loads(next(out.glob("profile.*.json")).read_text())
    events = profile["main_sample_events"]
    assert 0 < events <= profile["main_samples"]  # a signal may carry several ticks
    timed = {k["name"]: k["main_self_ns"] for k in profile["kernels"]}
    stats, app_s = load_profiles(str(out), min_events=events + 1)
    assert {name: share_of(s, app_s) for (_, name), s in stats.items()} == {
        name: min(1.0, ns / 1e9 / app_s) for name, ns in timed.items()
    }
    assert MIN_SAMPLE_EVENTS >= 400  # at most 2.5% off


def test_a_tuned_kernel_weighs_its_callees_and_no_other_tuned_kernel_twice(tmp_path, clang):
    """A tuned kernel runs its callees as its own copies: in a build that tunes the driver
    alone, the driver's weight is its time with the leaf it calls; tuning both, the leaf's
    calls from the driver are the driver's, and the two never add past the run."""
    from spack_r3.record.profiles import load_profiles, share_of, tuned_shares

    (tmp_path / "shares.c").write_text(SHARES_C)
    assert launch([clang, "-O2", "-o", "shares", "shares.c"], tmp_path, tmp_path / "rec").returncode == 0
    for sample_us, min_events in (("0", 1), ("1000", 1)):  # timed; from the profiler's samples
        out = tmp_path / ("profile-" + sample_us)
        run = subprocess.run(
            ["./shares"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=dict(os.environ, R3_RECORD_DIR=str(out), R3_CAPTURE="none", R3_SAMPLE_US=sample_us),
        )
        assert run.returncode == 0, run.stderr
        stats, app_s = load_profiles(str(out), min_events=min_events)
        own = {name: share_of(s, app_s) for (_, name), s in stats.items()}
        driver = tuned_shares(str(out), ["transport"], min_events=min_events)
        leaf = tuned_shares(str(out), ["lookup"], min_events=min_events)
        both = tuned_shares(str(out), ["transport", "lookup"], min_events=min_events)
        assert own["transport"] < driver["transport"] <= 1.0 and leaf["lookup"] > 0
        assert both == {"transport": driver["transport"], "lookup": 0}  # every lookup runs in the driver's copy
        assert sum(both.values()) <= 1.0


LEAF_C = r"""
#include <stdio.h>
/* a short leaf kernel (a binary search, as XSBench's grid search) called in a loop by
 * another kernel, which main calls a few times */
double lerp(const double *t, double x) {
    int lo = 0, hi = 1000;
    while (hi - lo > 1) { int mid = (lo + hi) / 2; if (t[mid] > x) hi = mid; else lo = mid; }
    return lo + (x - t[lo]) / (t[lo + 1] - t[lo]);
}
double sweep(const double *t, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += lerp(t, (i % 1000) * 0.4995);
    return s;
}
int main(void) {
    static double t[1001];
    for (int i = 0; i <= 1000; i++) t[i] = i * 0.5;
    double s = 0;
    for (int r = 0; r < 4; r++) s += sweep(t, 50000);
    printf("%.6f\n", s);
    return 0;
}
"""


def test_a_short_leaf_kernel_skips_its_probes_on_untimed_calls(tmp_path, clang):
    """Once sampled (and captured), 31 of 32 calls of a short leaf kernel count themselves
    and run without probes; the calls are still counted exactly, the caller keeps its probes."""
    (tmp_path / "leaf.c").write_text(LEAF_C)
    rec = tmp_path / "rec"
    proc = launch([clang, "-O2", "-o", "leaf", "leaf.c"], tmp_path, rec)
    assert proc.returncode == 0 and "without probes" not in proc.stderr, proc.stderr
    plain = subprocess.run([clang, "-O2", "-o", "plain", "leaf.c"], cwd=tmp_path, capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr
    expected = subprocess.run(["./plain"], cwd=tmp_path, capture_output=True, text=True).stdout

    def profile(capture):
        out = tmp_path / ("rec-" + capture.strip("*") + "all")
        run = subprocess.run(
            ["./leaf"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=dict(os.environ, R3_RECORD_DIR=str(out), R3_CAPTURE=capture),
        )
        assert run.returncode == 0 and run.stdout == expected, run.stderr  # as the build without probes
        return {k["name"]: k for k in json.loads(next(out.glob("profile.*.json")).read_text())["kernels"]}

    ks = profile("none")
    assert ks["lerp"]["calls"] == 200000 and ks["lerp"]["sampled"]
    assert ks["lerp"]["probed_calls"] <= 1024 + 200000 // 32  # sampled from its 1024th call
    assert ks["sweep"]["calls"] == ks["sweep"]["probed_calls"] == 4  # a parent keeps its probes
    # captured: its probes stay until its capture, taken in the second sweep (one at a time)
    ks = profile("*")
    assert ks["lerp"]["calls"] == 200000 and ks["lerp"]["captured"] == 1 and ks["sweep"]["captured"] == 1
    assert 50000 < ks["lerp"]["probed_calls"] <= 50000 + 1024 + 150000 // 32

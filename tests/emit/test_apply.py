"""r3-apply, the launcher a tuned package builds with: tuned kernels come from replay's
``optimized_module``, the rest of the unit as the build compiles it, one copy of the
unit's static state shared by both. No Spack needed: plain make with CC="r3-apply clang".
"""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from spack_r3.emit.apply import planned_symbol, shared_names
from spack_r3.iredit import declare_only
from spack_r3.data import Launch, Pipeline
from spack_r3.emit.plan import Plan, PlannedKernel, PlannedUnit, load_plan

R3_APPLY = os.path.join(os.path.dirname(sys.executable), "r3-apply")

# A kernel that is static, uses a static (writable) accumulator and a static helper, and is
# called from main in the same unit; a kernel calling a helper that the rest of the unit
# calls too: the cases a split of the unit must keep whole.
KERNELS_C = r"""
#include <stdio.h>
static double total;
static int calls;
static double scale(double x) { return 0.5 * x; }
static void axpy(int n, double a, const double *x, double *y) {
  for (int i = 0; i < n; i++) { y[i] += a * scale(x[i]); total += y[i]; }
  calls++;
}
double mean3(double a, double b, double c) { return (a + b + c) / 3.0; }
void smooth(int n, double *v) {
  for (int i = 1; i < n - 1; i++) v[i] = mean3(v[i - 1], v[i], v[i + 1]);
}
void run_all(int n, double *x, double *y) {
  for (int r = 0; r < 20; r++) { axpy(n, 1.5, x, y); smooth(n, y); }
  printf("total=%.17g calls=%d y0=%.17g m=%.17g\n", total, calls, y[n / 2], mean3(x[0], x[1], x[2]));
}
"""

MAIN_C = r"""
#include <stdlib.h>
void run_all(int n, double *x, double *y);
int main(void) {
  int n = 1000;
  double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  for (int i = 0; i < n; i++) { x[i] = i % 7; y[i] = 1.0 / (i + 1); }
  run_all(n, x, y);
  return 0;
}
"""

MAKEFILE = "app: main.o kernels.o\n\t$(CC) -O2 -o app main.o kernels.o\n%.o: %.c\n\t$(CC) -O2 -c -o $@ $<\n"


def _tree(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "kernels.c").write_text(KERNELS_C)
    (src / "main.c").write_text(MAIN_C)
    (src / "Makefile").write_text(MAKEFILE)
    return src


def _plan(path, kernels, source="kernels.c"):
    plan = Plan("any", [PlannedUnit(source, [PlannedKernel(k, p) for k, p in kernels])])
    path.write_text(json.dumps(plan.to_json()))
    return str(path)


def _make(src, clang, plan=None, extra_env=None):
    env = dict(os.environ, **(extra_env or {}))
    if plan:
        env["R3_APPLY_PLAN"] = plan
    subprocess.run(["make", "-s", "clean"], cwd=src, capture_output=True)
    for f in ("app", "main.o", "kernels.o"):
        if (src / f).exists():
            (src / f).unlink()
    return subprocess.run(
        ["make", "-s", "CC=%s %s" % (R3_APPLY, clang)], cwd=src, env=env, capture_output=True, text=True
    )


def _symbols(obj):
    out = subprocess.run(["nm", str(obj)], capture_output=True, text=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.split()[-2:-1] in (["T"], ["t"])]


def test_tuned_unit_computes_what_the_untuned_build_computes(clang, tmp_path):
    src = _tree(tmp_path)
    built = _make(src, clang)
    assert built.returncode == 0, built.stderr
    untuned = subprocess.run(["./app"], cwd=src, capture_output=True, text=True).stdout
    assert "calls=20" in untuned

    plan = _plan(
        tmp_path / "plan.json",
        [("axpy", Pipeline(opt="3", noalias=True)), ("smooth", Pipeline(opt="2", loop_vectorize=False))],
    )
    built = _make(src, clang, plan)
    assert built.returncode == 0, built.stderr
    tuned = subprocess.run(["./app"], cwd=src, capture_output=True, text=True).stdout
    assert tuned == untuned  # exact FP settings: the same numbers, one shared `total` and `calls`
    # One definition of each tuned kernel (the static one under its hidden shared name).
    names = _symbols(src / "kernels.o")
    assert names.count("smooth") == 1
    assert len([n for n in names if n.startswith("axpy.r3.")]) == 1
    # smooth's own copy of mean3 is local to the tuned object: no second global definition
    globals_ = [
        line.split()[-1]
        for line in subprocess.run(["nm", str(src / "kernels.o")], capture_output=True, text=True).stdout.splitlines()
        if " T " in line
    ]
    assert globals_.count("mean3") == 1


def test_units_and_commands_outside_the_plan_build_unchanged(clang, tmp_path):
    src = _tree(tmp_path)
    plan = _plan(tmp_path / "plan.json", [("smooth", Pipeline(opt="3"))], source="elsewhere/kernels.c")
    built = _make(src, clang, plan)
    assert built.returncode == 0, built.stderr
    assert not any(n.startswith("axpy.r3.") for n in _symbols(src / "kernels.o"))  # not split


def test_a_kernel_gone_from_the_source_fails_the_build_with_one_line(clang, tmp_path):
    src = _tree(tmp_path)
    plan = _plan(tmp_path / "plan.json", [("renamed_kernel", Pipeline(opt="3"))])
    built = _make(src, clang, plan)
    assert built.returncode != 0
    lines = [l for l in built.stderr.splitlines() if l.startswith("r3-apply:")]
    assert len(lines) == 1 and "does not define renamed_kernel" in lines[0], built.stderr
    assert "Traceback" not in built.stderr
    # Asked for: the untuned object instead, with a warning.
    built = _make(src, clang, plan, {"R3_APPLY_FALLBACK": "1"})
    assert built.returncode == 0 and "built untuned" in built.stderr


def test_a_compile_and_link_line_builds_its_planned_unit_tuned(clang, tmp_path):
    src = _tree(tmp_path)
    untuned = _make(src, clang)
    assert untuned.returncode == 0, untuned.stderr
    expected = subprocess.run(["./app"], cwd=src, capture_output=True, text=True).stdout
    (src / "Makefile").write_text("app: main.c kernels.c\n\t$(CC) -O2 -o app main.c kernels.c\n")
    plan = _plan(tmp_path / "plan.json", [("axpy", Pipeline(opt="3", noalias=True))])
    built = _make(src, clang, plan)
    assert built.returncode == 0, built.stderr
    assert subprocess.run(["./app"], cwd=src, capture_output=True, text=True).stdout == expected
    # The executable holds the tuned (split) unit: axpy under its shared hidden name.
    assert any(n.startswith("axpy.r3.") for n in _symbols(src / "app"))


# An OpenMP kernel with a macro knob, as a source rewrite leaves one (R3_<NAME>_<n>, the
# build's value by default): the tuned build must reach the run with the plan's thread
# count and knob value, whatever OMP_NUM_THREADS says.
TEAM_C = r"""
#include <omp.h>
#ifndef R3_UNROLL_1
#define R3_UNROLL_1 1
#endif
int team, knob;
void scale(int n, double *x) {
  knob = R3_UNROLL_1;
#pragma omp parallel
  {
#pragma omp single
    team = omp_get_num_threads();
#pragma omp for
    for (int i = 0; i < n; i++) x[i] *= 2.0;
  }
}
"""

TEAM_MAIN_C = r"""
#include <stdio.h>
extern int team, knob;
void scale(int n, double *x);
int main(void) {
  double x[1000], sum = 0;
  for (int i = 0; i < 1000; i++) x[i] = i;
  scale(1000, x);
  for (int i = 0; i < 1000; i++) sum += x[i];
  printf("team=%d knob=%d sum=%.17g\n", team, knob, sum);
  return 0;
}
"""


def test_a_plans_threads_and_source_knobs_reach_the_run(clang, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "kernels.c").write_text(TEAM_C)
    (src / "main.c").write_text(TEAM_MAIN_C)
    (src / "Makefile").write_text(MAKEFILE.replace("-O2", "-O2 -fopenmp"))
    one_thread = {"OMP_NUM_THREADS": "1"}

    def run():
        out = subprocess.run(["./app"], cwd=src, capture_output=True, text=True, env=dict(os.environ, **one_thread))
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert _make(src, clang).returncode == 0
    assert run() == "team=1 knob=1 sum=999000\n"
    plan = Plan(
        "any",
        [
            PlannedUnit(
                "kernels.c", [PlannedKernel("scale", Pipeline(opt="3"), Launch(threads=3))], defines={"R3_UNROLL_1": 4}
            )
        ],
    )
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_json()))
    built = _make(src, clang, str(tmp_path / "plan.json"))
    assert built.returncode == 0, built.stderr
    assert run() == "team=3 knob=4 sum=999000\n"


def _profile(src, tmp_path, label):
    out = tmp_path / ("profile-" + label)
    run = subprocess.run(
        ["./app"],
        cwd=src,
        capture_output=True,
        text=True,
        env=dict(os.environ, R3_RECORD_DIR=str(out), R3_CAPTURE="none"),
    )
    assert run.returncode == 0, run.stderr
    (path,) = out.glob("profile.*.json")
    return run.stdout, {planned_symbol(k["name"]): k for k in json.loads(path.read_text())["kernels"]}


def test_timed_builds_report_each_planned_kernel_in_the_run(clang, tmp_path):
    """The check's timed pair: the tuned kernels and the untuned ones, each behind record's
    probe wrapper; a run with R3_RECORD_DIR writes their time inside the application."""
    src = _tree(tmp_path)
    assert _make(src, clang).returncode == 0
    expected = subprocess.run(["./app"], cwd=src, capture_output=True, text=True).stdout
    plan = _plan(tmp_path / "plan.json", [("axpy", Pipeline(opt="3")), ("smooth", Pipeline(opt="2"))])
    for label, env in (
        ("tuned", {"R3_APPLY_PROBES": "1"}),
        ("untuned", {"R3_APPLY_PROBES": "1", "R3_APPLY_UNTUNED": "1"}),
    ):
        built = _make(src, clang, plan, env)
        assert built.returncode == 0, built.stderr
        stdout, kernels = _profile(src, tmp_path, label)
        assert stdout == expected
        # Only the planned kernels are timed, each once per call (20 calls each).
        assert set(kernels) == {"axpy", "smooth"}, kernels
        assert all(k["calls"] == 20 and k["total_ns"] > 0 for k in kernels.values()), kernels
    # Without the probes setting the tuned build has no runtime and no wrappers.
    assert _make(src, clang, plan).returncode == 0
    assert not any(n.startswith("__r3") for n in _symbols(src / "app"))


def test_shared_names_and_declarations_on_ir():
    text = "\n".join(
        [
            "@count = internal global i32 0, align 4",
            '@.str = private unnamed_addr constant [3 x i8] c"%d\\00", align 1',
            "@shared = dso_local global double 0.0, align 8",
            "define internal void @kern(ptr noundef %p) #0 {",
            "entry:",
            "  %v = load i32, ptr @count, align 4",
            "  ret void",
            "}",
            "define dso_local i32 @main() #0 {",
            "  call void @kern(ptr null)",
            "  ret i32 0",
            "}",
        ]
    )
    out, names, writable = shared_names(text, ["kern"], "abcd1234")
    assert names == {"kern": "kern.r3.abcd1234"}
    assert "@count.r3.abcd1234 = hidden global i32 0" in out
    assert "@.str = private" in out  # constants may be copied: left alone
    assert sorted(writable) == ["count.r3.abcd1234", "shared"]
    assert "define hidden void @kern.r3.abcd1234(" in out
    assert "call void @kern.r3.abcd1234(ptr null)" in out
    declared = declare_only(out, ["kern.r3.abcd1234"])
    assert "declare hidden void @kern.r3.abcd1234(ptr noundef) #0" in declared
    assert "%v = load" not in declared and "define dso_local i32 @main()" in declared


def test_plan_matches_units_in_any_stage_and_predicts_with_amdahl(tmp_path):
    plan = Plan(
        "zen3",
        [
            PlannedUnit(
                "src/k.c",
                [
                    PlannedKernel("a", Pipeline(), speedup=2.0, share=0.5),
                    PlannedKernel("b", Pipeline(), speedup=4.0, share=0.2),
                ],
                {"R3_TILE_1": 32},
            )
        ],
    )
    path = tmp_path / "p.json"
    path.write_text(json.dumps(plan.to_json()))
    again = load_plan(str(path))
    assert again.unit_for("/tmp/spack-stage/x/spack-src/src/k.c") == plan.units[0]  # typed, as written
    assert again.unit_for("/tmp/other/k.c") is None
    # 1 / (1 - 0.5 * (1 - 1/2) - 0.2 * (1 - 1/4))
    assert again.predicted_app_speedup() == pytest.approx(1 / (1 - 0.25 - 0.15))


def test_an_emitted_package_changes_with_what_it_builds_not_with_what_was_measured():
    """Spack reuses an install whose package hash (the package's source, less docstrings and
    directives) has not changed, and the plan is a file beside the recipe: the recipe names
    the plan's digest, so a new plan is a new ``+r3`` install, never the old one."""
    from spack_r3.emit.apply import toolchain_digest
    from spack_r3.spack.wrap import tuned_package

    def package(pipeline, speedup=2.0, facts=None):
        plan = Plan(
            "zen3",
            [PlannedUnit("src/k.c", [PlannedKernel("a", pipeline, speedup=speedup, share=0.5)])],
            facts=dict(facts or {}),
        )
        return tuned_package("r3", "r3-dense", "v1", {"zen3": plan}, toolchain_digest())

    first = package(Pipeline(opt="3"))
    assert package(Pipeline(opt="3"), speedup=2.5, facts={"check": {"app_speedup": 1.9}}) == first
    assert package(Pipeline(opt="3", polly=True)) != first
    digest = Plan("zen3", [PlannedUnit("src/k.c", [PlannedKernel("a", Pipeline(opt="3"))])]).build_digest()
    assert "'zen3': ('r3-zen3.json', '%s')" % digest in first and "R3_TOOLCHAIN = '" in first
    compile(first, "package.py", "exec")


# A wavefront of time tiles (issue 46) won for a Gauss-Seidel kernel whose build has no
# -fopenmp: the planned unit alone compiles with it, and the link, which has none either,
# gets LLVM's OpenMP runtime.
SEIDEL_MAKEFILES = (
    "app: forms.o\n\t$(CC) -O3 -o app forms.o -lm\n%.o: %.c\n\t$(CC) -O3 -c -o $@ $<\n",
    "app: forms.c\n\t$(CC) -O3 -o app forms.c -lm\n",  # compile and link in one line
)


@pytest.mark.parametrize("makefile", SEIDEL_MAKEFILES, ids=["objects", "one-line"])
def test_a_wavefront_winner_builds_with_openmp_added_and_computes_the_untuned_output(clang, tmp_path, makefile):
    from spack_r3.search.mutators import Feedback, KernelSource
    from spack_r3.search.mutators.ruleset import RulesMutator
    from test_rules_stencil_forms import FORMS_C

    src = tmp_path / "src"
    src.mkdir()
    (src / "forms.c").write_text(FORMS_C)
    (src / "Makefile").write_text(makefile)
    assert _make(src, clang).returncode == 0
    expected = subprocess.run(["./app"], cwd=src, capture_output=True, text=True).stdout
    assert b"libomp" not in subprocess.run(["readelf", "-d", str(src / "app")], capture_output=True).stdout

    unit = KernelSource("seidel9", "seidel9", "forms.c", FORMS_C, ["-O3"], str(src), clang, add_openmp=True)
    (wave,) = [p for p in RulesMutator().propose(unit, Feedback()) if p.rule == "wavefront"]
    (src / "forms.c").write_text(wave.text)  # as the package's patch leaves the source
    planned = PlannedUnit(
        "forms.c",
        [PlannedKernel("seidel9", Pipeline(opt="3"), Launch(threads=2), rule="wavefront")],
        defines=dict(zip(wave.knobs, (2, 3))),  # partial tiles both ways
        openmp=True,
    )
    plan = Plan("any", [planned])
    assert Plan.from_json(json.loads(json.dumps(plan.to_json()))).units[0].openmp
    assert plan.build_digest() != Plan("any", [dataclasses.replace(planned, openmp=False)]).build_digest()
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_json()))
    built = _make(src, clang, str(tmp_path / "plan.json"))
    assert built.returncode == 0, built.stderr
    run = subprocess.run(["./app"], cwd=src, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout == expected  # the wavefront keeps every result bit for bit
    assert "__kmpc_fork_call" in subprocess.run(["nm", str(src / "app")], capture_output=True, text=True).stdout
    assert b"libomp" in subprocess.run(["readelf", "-d", str(src / "app")], capture_output=True).stdout


def test_a_tuned_build_refuses_a_cpu_without_the_features_its_kernels_were_compiled_for(clang, tmp_path):
    """The target check r3-apply links into a tuned unit: on this CPU, a build tuned for the
    kernel as built runs; told the CPU lacks a feature the tuned code was compiled with
    (R3_TARGET_CHECK_LACKS, as on an older CPU), it stops with one line before any kernel
    runs, unless told to warn."""
    from spack_r3.emit import targetcheck

    if not targetcheck.applies():
        pytest.skip("the target check is x86's")
    # x86-64-v3's code may use AVX2 and FMA: clang's own predefined macros say so
    needs = targetcheck.required_features(clang, "x86-64-v3", "")
    assert {"avx2", "fma", "sse4.2"} <= set(needs) and "avx512f" not in needs
    assert "avx512f" in targetcheck.required_features(clang, "x86-64-v3", "+avx512f")
    src = _tree(tmp_path)
    built = _make(src, clang)
    untuned = subprocess.run(["./app"], cwd=src, capture_output=True, text=True).stdout
    plan = _plan(tmp_path / "plan.json", [("smooth", Pipeline(opt="3", cpu="x86-64", features=""))])
    built = _make(src, clang, plan)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run(["./app"], cwd=src, capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout == untuned, ran.stderr  # x86-64's baseline: every x86-64 CPU has it
    baseline_needs = targetcheck.required_features(clang, "x86-64", "")
    assert "sse4.2" not in baseline_needs and "avx" not in baseline_needs
    # tuned for x86-64 with SSE4.2 and AVX added: a CPU without AVX is refused
    plan = _plan(tmp_path / "plan.json", [("smooth", Pipeline(opt="3", cpu="x86-64", features="+sse4.2,+avx"))])
    assert _make(src, clang, plan).returncode == 0
    refused = subprocess.run(
        ["./app"], cwd=src, capture_output=True, text=True, env=dict(os.environ, R3_TARGET_CHECK_LACKS="avx")
    )
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.startswith(
        "r3: this program was tuned for x86-64 and its tuned code needs avx, which this CPU lacks"
    )
    warned = subprocess.run(
        ["./app"],
        cwd=src,
        capture_output=True,
        text=True,
        env=dict(os.environ, R3_TARGET_CHECK_LACKS="avx", R3_TARGET_CHECK="warn"),
    )
    assert "this CPU lacks" in warned.stderr
    if targetcheck_cpu_has(clang, tmp_path, "avx"):  # (it would stop on an illegal instruction otherwise)
        assert warned.returncode == 0 and warned.stdout == untuned


def targetcheck_cpu_has(clang, tmp_path, feature):
    """Whether this CPU has ``feature`` (a probe of its own, apart from the check's)."""
    probe = tmp_path / "probe.c"
    probe.write_text('int main(void) { __builtin_cpu_init(); return !__builtin_cpu_supports("%s"); }\n' % feature)
    subprocess.run([clang, str(probe), "-o", str(tmp_path / "probe")], check=True)
    return subprocess.run([str(tmp_path / "probe")]).returncode == 0

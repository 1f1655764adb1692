"""Argument specialization: a kernel's recorded-constant integer arguments folded into a
clone behind a guard (spack_r3/compile/specialize.py), from the recording to a tuned build.

Each test is one thing a user meets: which arguments a search offers to specialize, a
specialized candidate replayed and verified, its SPEC written and read back, a tuned build
run with the recorded sizes (the clone runs) and with others (the original runs, right
answer), the report naming the arguments, and status flagging a guard that never matched.
Real clang, llvmlite and r3-apply; nothing depends on the CPU or on timing.
"""

import json
import os
import subprocess
import sys

import pytest

from spack_r3.capture import load_capture_dir
from spack_r3.data import OK, Pipeline, Variant
from spack_r3.emit.plan import Plan, PlannedKernel, PlannedUnit
from spack_r3.errors import PipelineError
from spack_r3.compile import specialize
from spack_r3.replay.engine import init_llvm
from spack_r3.compile.pipeline import format_spec, parse
from spack_r3.replay.server import ReplayServer
from spack_r3.compile.stages import KernelIR, optimized_module
from spack_r3.search.results import KernelResult, results_table
from spack_r3.search.space import KernelFacts, Space
from spack_r3.roundtrip.check import guard_counts
from spack_r3.roundtrip.status import status

from r3cli import flags, r3
from r3cli import flags, r3

R3_APPLY = os.path.join(os.path.dirname(sys.executable), "r3-apply")

# n bounds the loop, stride multiplies the index, flag is a branch, unused does nothing,
# rep changes from call to call; a is a pointer, s a double. Values are multiples of 1/8:
# every order of evaluation gives the same numbers.
KERNELS_C = r"""
void kern(int n, int stride, int flag, int unused, int rep, double *a, double s) {
  for (int i = 0; i < n; i++) {
    a[i * stride] = a[i * stride] * s + (i == rep);
    if (flag) a[i * stride] += 1.0;
  }
}
"""

MAIN_C = r"""
#include <stdio.h>
#include <stdlib.h>
void kern(int n, int stride, int flag, int unused, int rep, double *a, double s);
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2000, stride = argc > 2 ? atoi(argv[2]) : 3;
  double *a = malloc(sizeof(double) * n * stride), t = 0.0;
  for (int i = 0; i < n * stride; i++) a[i] = i % 9;
  for (int r = 0; r < 3; r++) kern(n, stride, 1, 7, r, a, 0.5);
  for (int i = 0; i < n * stride; i++) t += a[i] * (i % 5 + 1);
  printf("%.17g\n", t);
  return 0;
}
"""

MAKEFILE = "app: main.o kernels.o\n\t$(CC) -O2 -o app main.o kernels.o\n%.o: %.c\n\t$(CC) -O2 -c -o $@ $<\n"
RECORDED = ((0, 2000), (1, 3))  # n and stride as ./app records them


def _tree(root):
    src = root / "src"
    src.mkdir()
    (src / "kernels.c").write_text(KERNELS_C)
    (src / "main.c").write_text(MAIN_C)
    (src / "Makefile").write_text(MAKEFILE)
    return src


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, clang):
    """Three recorded calls of kern (``--instances 3``): (workspace, capture directories)."""
    root = tmp_path_factory.mktemp("spec")
    ws = str(root / "ws")
    assert (
        r3(
            "--workspace",
            ws,
            "record",
            *flags(source=_tree(root), run="./app", kernel="kern", instances="3"),
        )
        == 0
    )
    caps = sorted(os.path.join(ws, "captures", d) for d in os.listdir(os.path.join(ws, "captures")))
    assert len(caps) == 3
    return ws, caps


def _kernel_ir(cap):
    capture = load_capture_dir(cap)
    with open(os.path.join(cap, "module.bc"), "rb") as f:
        return KernelIR.from_bitcode(
            capture.kernel,
            f.read(),
            recorded_globals=[g["name"] for g in capture.globals],
            clang=capture.compile_command[0],
        )


def test_the_arguments_that_shape_the_kernel_are_offered(recorded):
    _, caps = recorded
    init_llvm()
    captures = [load_capture_dir(c) for c in caps]
    args = specialize.constant_args(captures, _kernel_ir(caps[0]).ir, "kern")
    found = {a.name: (a.value, a.roles) for a in args}
    # rep changes between calls; a (a pointer) and s (a double) are not integers
    assert found == {"n": (2000, ("bound",)), "stride": (3, ("stride",)), "flag": (1, ("branch",)), "unused": (7, ())}
    labels = [label for label, _ in specialize.choices(args)]
    assert labels == ["none", "n=2000", "stride=3", "flag=1", "n=2000,stride=3,flag=1"]
    # the search space offers them as one setting, and its variant carries the values
    space = Space(KernelFacts("kern", specialize=tuple(specialize.choices(args))))
    values = dict(space.defaults(), specialize="stride=3")
    assert space.variant(values).pipeline.specialize == ((1, 3),)
    assert space.variant(space.defaults()).pipeline.specialize == ()
    assert "specialize" not in [p.name for p in Space(KernelFacts("kern")).params]


def test_a_specialized_candidate_replays_verified(recorded):
    _, caps = recorded
    init_llvm()
    source = _kernel_ir(caps[0])
    plain = str(optimized_module(source, parse("O3")))
    folded = str(optimized_module(source, parse("O3,specialize=0:2000+1:3")))
    assert "@__r3_spec.hits.kern" in folded and "__r3_spec" not in plain
    with ReplayServer() as server:
        for spec in (
            "O3,specialize=0:2000+1:3",
            "O2,noalias=1,specialize=2:1",
            "O3,specialize=0:999",
        ):  # a value no call had: the guard runs the original
            for cap in caps:
                ev = server.submit(cap, Variant(pipeline=parse(spec)), repeat=1)
                assert ev.status == OK and ev.verified, (spec, ev.diagnostics)
        ev = server.submit(caps[0], Variant(pipeline=parse("O3,specialize=5:1")), repeat=1)
        assert ev.status == "compile-error" and "not an integer" in ev.diagnostics


def test_the_specialization_round_trips_through_spec_and_json():
    p = parse("O3,noalias=1,specialize=1:3+0:2000")
    assert p.specialize == RECORDED
    assert format_spec(p) == "O3,noalias=1,specialize=0:2000+1:3"
    assert parse(format_spec(p)) == p
    assert Pipeline.from_json(json.loads(json.dumps(p.to_json()))) == p
    assert Variant.from_json(Variant(pipeline=p).to_json()) == Variant(pipeline=p)
    assert "specialize" not in Pipeline().to_json()  # absent when unused: older plans read the same
    for spec, needle in (
        ("O3,specialize=n:3", "expected INDEX:VALUE"),
        ("O3,specialize=1:3+1:4", "named twice"),
        ("compiler=build,specialize=0:1", "takes none of"),
    ):
        with pytest.raises(PipelineError) as err:
            parse(spec)
        assert needle in str(err.value) and "\n" not in str(err.value)


def _make(src, clang, plan=None):
    env = dict(os.environ)
    if plan:
        env["R3_APPLY_PLAN"] = plan
    for f in ("app", "main.o", "kernels.o"):
        if (src / f).exists():
            (src / f).unlink()
    built = subprocess.run(
        ["make", "-s", "CC=%s %s" % (R3_APPLY, clang)], cwd=src, env=env, capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr


def _run(src, log, *args):
    env = dict(os.environ, R3_SPEC_LOG=str(log))
    out = subprocess.run(["./app"] + [str(a) for a in args], cwd=src, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_tuned_build_runs_the_clone_only_for_the_recorded_arguments(clang, tmp_path):
    src = _tree(tmp_path)
    _make(src, clang)
    untuned = {args: _run(src, tmp_path / "untuned.log", *args) for args in ((), (500, 2), (2000, 4))}
    assert not (tmp_path / "untuned.log").exists()  # no guard in the untuned build
    plan = Plan("any", [PlannedUnit("kernels.c", [PlannedKernel("kern", Pipeline(specialize=RECORDED))])])
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_json()))
    _make(src, clang, str(tmp_path / "plan.json"))
    # the recorded sizes: the clone runs every call
    assert _run(src, tmp_path / "recorded.log") == untuned[()]
    assert specialize.read_counts(tmp_path / "recorded.log") == {"kern": [3, 3]}
    # other sizes (n, or only the stride): the original runs, with the right answer
    for args in ((500, 2), (2000, 4)):
        assert _run(src, tmp_path / "other.log", *args) == untuned[args]
    assert specialize.read_counts(tmp_path / "other.log") == {"kern": [6, 0]}

    # The check's record of those runs, kept in the plan, is what status reads: the guard
    # that never matched is flagged, and not the one that did.
    repo = tmp_path / "repo"
    (repo / "packages").mkdir(parents=True)
    (repo / "repo.yaml").write_text("repo:\n  namespace: r3tuned\n")
    for name, log in (("app", "other.log"), ("app2", "recorded.log")):
        (repo / "packages" / name).mkdir()
        (repo / "packages" / name / "package.py").write_text("# a tuned package\n")
        plan.facts = {"check": {"guards": guard_counts(plan, str(tmp_path / log))}}
        (repo / "packages" / name / "r3-any.json").write_text(json.dumps(plan.to_json()))
    rows = {r.package: r for r in status(str(repo))}
    assert [line for line in rows["app"].stale if line.startswith("guard: kern")], rows["app"].stale
    assert "none of its 6 calls" in rows["app"].stale[0]
    assert not rows["app2"].stale


def test_the_report_names_the_specialized_arguments(recorded):
    _, caps = recorded
    capture = load_capture_dir(caps[0])
    # what kernel_result gives a winner that specialized: its source's names and values
    names = specialize.named(capture, parse("O3,specialize=0:2000+1:3").specialize)
    assert names == ["n=2000", "stride=3"]
    result = KernelResult(
        "kern",
        [capture.id],
        0.5,
        1e-3,
        5e-4,
        2.0,
        1.9,
        2.1,
        10,
        {},
        False,
        True,
        Variant(pipeline=parse("O3,specialize=0:2000+1:3")),
        specialized=names,
    )
    assert "kern: specialized on n=2000, stride=3" in results_table([result])
    assert KernelResult.from_json(json.loads(json.dumps(result.to_json()))).specialized == names


# OpenMP kernels: okern's parallel loop reads n and m through the pointers its fork call
# hands the outlined function, fkern's gets them by value (firstprivate); wkern's region
# writes its n (it halves it), so folding n there would be wrong.
OMP_KERNELS_C = r"""
void okern(int n, int m, double *a, const double *b, double s) {
#pragma omp parallel for
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) a[i * m + j] = a[i * m + j] * s + b[j];
}

void fkern(int n, int m, double *a, const double *b) {
#pragma omp parallel for firstprivate(n, m)
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) a[i * m + j] += b[j] * 0.25;
}

void wkern(int n, double *a) {
#pragma omp parallel
  {
#pragma omp single
    n = n / 2;
#pragma omp for
    for (int i = 0; i < n; i++) a[i] += 1.0;
  }
}
"""

OMP_MAIN_C = r"""
#include <stdio.h>
#include <stdlib.h>
void okern(int n, int m, double *a, const double *b, double s);
void fkern(int n, int m, double *a, const double *b);
void wkern(int n, double *a);
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 300, m = argc > 2 ? atoi(argv[2]) : 40;
  double *a = malloc(sizeof(double) * n * m), *b = malloc(sizeof(double) * m), t = 0.0;
  for (int i = 0; i < n * m; i++) a[i] = i % 7;
  for (int j = 0; j < m; j++) b[j] = j % 3;
  for (int r = 0; r < 2; r++) okern(n, m, a, b, 0.5);
  for (int r = 0; r < 2; r++) fkern(n, m, a, b);
  for (int r = 0; r < 2; r++) wkern(n, a);
  for (int i = 0; i < n * m; i++) t += a[i] * (i % 5 + 1);
  printf("%.17g\n", t);
  return 0;
}
"""


@pytest.fixture(scope="module")
def omp_recorded(tmp_path_factory, clang):
    root = tmp_path_factory.mktemp("omp-spec")
    src = root / "src"
    src.mkdir()
    (src / "kernels.c").write_text(OMP_KERNELS_C)
    (src / "main.c").write_text(OMP_MAIN_C)
    (src / "Makefile").write_text(MAKEFILE.replace("-O2", "-O2 -fopenmp"))
    ws = str(root / "ws")
    assert (
        r3(
            "--workspace",
            ws,
            "record",
            *flags(source=src, run="./app", kernel=["okern", "fkern", "wkern"], instances=2),
        )
        == 0
    )
    caps = {}
    for d in sorted(os.listdir(os.path.join(ws, "captures"))):
        path = os.path.join(ws, "captures", d)
        caps.setdefault(load_capture_dir(path).kernel, []).append(path)
    return src, caps


def test_an_openmp_kernel_is_specialized_inside_its_parallel_region(omp_recorded):
    _, caps = omp_recorded
    init_llvm()
    captures = [load_capture_dir(c) for c in caps["okern"]]
    ir = _kernel_ir(caps["okern"][0]).ir
    # n and m reach the loops only through the outlined function: they are still offered
    args = {a.name: a for a in specialize.constant_args(captures, ir, "okern")}
    assert (args["n"].value, args["m"].value) == (300, 40)
    assert args["n"].roles and "stride" in args["m"].roles
    # the clone's region reads them from constants, in a clone of the outlined function
    text = specialize.specialize_text(ir, "okern", ((0, 300), (1, 40)), "void")
    assert "@okern.r3.c1 = private unnamed_addr constant i32 40" in text
    outlined = [line for line in text.splitlines() if "__kmpc_fork_call(" in line]
    assert any(".r3.spec" in line for line in outlined) and any(".r3.spec" not in line for line in outlined)
    # fkern's region gets them by value: its clone reads the numbers
    fir = _kernel_ir(caps["fkern"][0]).ir
    fargs = {a.name: a for a in specialize.constant_args([load_capture_dir(c) for c in caps["fkern"]], fir, "fkern")}
    assert fargs["n"].roles and "stride" in fargs["m"].roles
    ftext = specialize.specialize_text(fir, "fkern", ((0, 300), (1, 40)), "void")
    assert "@fkern.omp_outlined.r3.spec" in ftext and "fkern.r3.c" not in ftext
    # wkern writes its n inside the region: the region keeps reading the kernel's copy
    wtext = specialize.specialize_text(_kernel_ir(caps["wkern"][0]).ir, "wkern", ((0, 300),), "void")
    assert "wkern.r3.c0" not in wtext and "r3.spec" in wtext
    with ReplayServer() as server:
        for kernel, spec in (
            ("okern", "O3,specialize=0:300+1:40"),
            ("okern", "O2,specialize=1:40"),
            ("fkern", "O3,specialize=0:300+1:40"),
            ("wkern", "O3,specialize=0:300"),
        ):
            for cap in caps[kernel]:
                ev = server.submit(cap, Variant(pipeline=parse(spec)), repeat=1)
                assert ev.status == OK and ev.verified, (kernel, spec, ev.diagnostics)


def test_a_tuned_openmp_build_folds_only_for_the_recorded_arguments(omp_recorded, clang, tmp_path):
    src, _ = omp_recorded
    _make(src, clang)
    untuned = {args: _run(src, tmp_path / "untuned.log", *args) for args in ((), (100, 40), (300, 8))}
    folded = Pipeline(specialize=((0, 300), (1, 40)))
    plan = Plan(
        "any",
        [
            PlannedUnit(
                "kernels.c",
                [
                    PlannedKernel("okern", folded),
                    PlannedKernel("fkern", folded),
                    PlannedKernel("wkern", Pipeline(specialize=((0, 300),))),
                ],
            )
        ],
    )
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_json()))
    _make(src, clang, str(tmp_path / "plan.json"))
    assert _run(src, tmp_path / "recorded.log") == untuned[()]
    assert specialize.read_counts(tmp_path / "recorded.log") == {"okern": [2, 2], "fkern": [2, 2], "wkern": [2, 2]}
    for args in ((100, 40), (300, 8)):  # other sizes: the original regions, the right answer
        assert _run(src, tmp_path / "other.log", *args) == untuned[args]

"""Fortran kernels, recorded, replayed, tuned and built tuned with real flang-19.

The demo is ``repos/r3/sources/fheat``: module allocatables (``fields::diffuse``), an
assumed-shape kernel whose dummies are descriptors (``fields::smooth``), fixed-form
FORTRAN 77 with COMMON and SAVE data (``relax_``), a C kernel the Fortran program calls
(``field_norm``) which calls back into Fortran (``row_sum``, ``bind(c)``), a kernel that
allocates module arrays (``fields::setup``) and one that prints (``fields::report``).
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from r3cli import r3, r3_output
from spack_r3 import cxxnames, fortran
from spack_r3.capture import list_captures
from spack_r3.data import Pipeline
from spack_r3.emit.plan import Plan, PlannedKernel, PlannedUnit
from spack_r3.search.mutators import KernelSource, fortranrules
from spack_r3.search.mutators.ruleset import RulesMutator
from spack_r3.workspace import Workspace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FHEAT = os.path.join(ROOT, "repos", "r3", "sources", "fheat")
R3_APPLY = os.path.join(os.path.dirname(sys.executable), "r3-apply")


@pytest.fixture(scope="module")
def recorded(flang, tmp_path_factory):
    ws = str(tmp_path_factory.mktemp("fheat-ws"))
    assert r3("--workspace", ws, "record", "--source", FHEAT, "--run", "./fheat 96 100") == 0
    return ws


def captures(ws):
    return {c.kernel: c for c in list_captures(Workspace(ws))}


def test_flang_names_read_as_fortran_spells_them():
    assert cxxnames.demangle("_QMgridPsmooth") == "grid::smooth"
    assert cxxnames.display("_QMgridFouterPinner") == "grid::outer::inner"
    # a user names a module procedure in full or alone, in any case; an external one without its _
    assert cxxnames.best_matches("SMOOTH", ["_QMgridPsmooth", "smooth_x"]) == (cxxnames.QUALIFIED, ["_QMgridPsmooth"])
    assert cxxnames.match_level("grid::smooth", "_QMgridPsmooth") == cxxnames.DEMANGLED
    assert cxxnames.match_level("relax", "relax_") == cxxnames.DEMANGLED
    assert cxxnames.match_level("relax", "relax__") == 0 and cxxnames.demangle("relax_") == "relax_"
    assert fortran.unreplayable_call("_FortranAioBeginExternalListInput") == "it reads input (Fortran READ from a unit)"
    assert fortran.unreplayable_call("_FortranAioBeginOpenUnit") == "it opens Fortran units"
    assert fortran.unreplayable_call("_FortranAioOutputReal64") is None  # output changes nothing computed
    assert fortran.unreplayable_call("_FortranAAssign") is None  # array assignment: replay loads the runtime


def test_a_fortran_application_records_its_kernels_by_their_fortran_names(recorded):
    caps = captures(recorded)
    assert {"_QMfieldsPsmooth", "_QMfieldsPdiffuse", "relax_", "row_sum", "_QMfieldsPreport"} <= set(caps)
    assert "_QQmain" not in caps  # the main program is the whole run, not a kernel
    # the unit's bitcode is flang's before LLVM's passes: its loops are still there to tune
    assert caps["_QMfieldsPdiffuse"].compile_command[0] == shutil.which(caps["_QMfieldsPdiffuse"].compile_command[0])
    assert fortran.is_flang(caps["_QMfieldsPdiffuse"].compile_command[0])
    assert caps["_QMfieldsPreport"].unreplayable is None  # it prints: as C's printf, that replays
    rc, out, _ = r3_output("--workspace", recorded, "kernels")
    assert rc == 0 and "fields::smooth" in out and "fields::diffuse" in out


@pytest.mark.parametrize(
    "kernel",
    [
        "_QMfieldsPdiffuse",  # module allocatables; `t = tn` calls the runtime's assignment
        "_QMfieldsPsmooth",  # assumed-shape dummies: descriptors on the caller's stack
        "relax_",  # COMMON /RLXPAR/ and a SAVEd counter
        "row_sum",  # bind(c), called from C
    ],
)
def test_each_fortran_kernel_replays_verified(recorded, kernel):
    cap = captures(recorded)[kernel]
    rc, out, err = r3_output("--workspace", recorded, "replay", cap.id, "--repeat", 2, "--json")
    assert rc == 0, err
    res = json.loads(out)
    assert res["status"] == "ok" and res["verified"] is True
    assert res["kernel_demangled"] == cxxnames.demangle(kernel)


def test_a_polly_pipeline_on_module_arrays_replays_verified(recorded, polly):
    cap = captures(recorded)["_QMfieldsPdiffuse"]
    rc, out, err = r3_output(
        "--workspace", recorded, "replay", cap.id, "--pipeline", "O3,polly=1", "--repeat", 2, "--json"
    )
    assert rc == 0, err
    assert json.loads(out)["verified"] is True


READER_F90 = """
subroutine accumulate(n, total)
  integer, intent(in) :: n
  real(8), intent(out) :: total
  real(8) :: x
  integer :: i
  total = 0d0
  do i = 1, n
    read(*, *) x
    total = total + x
  end do
end subroutine
program reader
  real(8) :: total
  call accumulate(3, total)
  print *, total
end program
"""


def test_a_kernel_reading_input_is_refused_with_the_reason(flang, tmp_path):
    src = tmp_path / "reader"
    src.mkdir()
    (src / "reader.f90").write_text(READER_F90)
    (src / "numbers.txt").write_text("1\n2\n3\n")
    (src / "Makefile").write_text("reader: reader.f90\n\t$(FC) -O2 -o reader reader.f90\n")
    ws = str(tmp_path / "ws")
    assert r3("--workspace", ws, "record", "--source", str(src), "--run", "./reader < numbers.txt") == 0
    cap = captures(ws)["accumulate_"]
    assert cap.unreplayable.startswith("it reads input (Fortran READ from a unit) (_FortranAioBeginExternalListInput")
    rc, _, err = r3_output("--workspace", ws, "replay", cap.id)
    assert rc == 2 and "cannot replay: it reads input" in err


def test_a_kernel_that_prints_replays_verified(recorded):
    cap = captures(recorded)["_QMfieldsPreport"]
    rc, out, err = r3_output("--workspace", recorded, "replay", cap.id, "--repeat", 2, "--json")
    assert rc == 0, err
    assert json.loads(out)["verified"] is True


def test_a_fortran_kernel_tunes_to_a_confirmed_result(recorded):
    rc, out, err = r3_output(
        "--workspace",
        recorded,
        "tune",
        "--kernel",
        "SMOOTH",
        "--mutator",
        "none",
        "--budget",
        "4",
        "--confirm-rounds",
        "1",
        "--confirm-pairs",
        "3",
        "--json",
    )
    assert rc == 0, err
    (result,) = json.loads(out)["kernels"]
    assert result["kernel"] == "_QMfieldsPsmooth" and result["kernel_demangled"] == "fields::smooth"
    assert result["evaluations"] >= 4 and result["winner"]


def _make(src, env, fc, cc):
    subprocess.run(["make", "-s", "clean"], cwd=src, capture_output=True)
    built = subprocess.run(["make", "-s", "FC=" + fc, "CC=" + cc], cwd=src, env=env, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    runs = [["./fheat", "64", "30"], ["./cdrive", "512", "5"]]
    return "".join(subprocess.run(r, cwd=src, capture_output=True, text=True, check=True).stdout for r in runs)


def test_r3_apply_builds_tuned_fortran_units_that_compute_the_same(flang, clang, tmp_path):
    src = tmp_path / "fheat"
    shutil.copytree(FHEAT, src)
    untuned = _make(src, dict(os.environ), flang, clang)
    assert "check passed" in untuned
    plan = Plan(
        "any",
        [
            PlannedUnit(
                "fields.f90",
                [
                    PlannedKernel("_QMfieldsPdiffuse", Pipeline(opt="3", unroll=True)),
                    PlannedKernel("_QMfieldsPsmooth", Pipeline(opt="3", noalias=True)),
                    PlannedKernel("row_sum", Pipeline(opt="1")),
                ],
            ),
            PlannedUnit("relax.f", [PlannedKernel("relax_", Pipeline(opt="2", loop_vectorize=False))]),
        ],
    )
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_json()))
    env = dict(os.environ, R3_APPLY_PLAN=str(tmp_path / "plan.json"))
    untuned_object = (src / "fields.o").read_bytes()
    tuned = _make(src, env, "%s %s" % (R3_APPLY, flang), "%s %s" % (R3_APPLY, clang))
    assert tuned == untuned  # exact FP settings: the same numbers, one COMMON block, one SAVEd counter
    assert (src / "fields.o").read_bytes() != untuned_object  # built as planned, not as before
    # a kernel gone from the unit fails the build with one line
    plan.units[1].kernels[0].symbol = "relax_gone_"
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_json()))
    subprocess.run(["make", "-s", "clean"], cwd=src, capture_output=True)
    built = subprocess.run(
        ["make", "-s", "FC=%s %s" % (R3_APPLY, flang), "CC=%s %s" % (R3_APPLY, clang)],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
    )
    assert built.returncode != 0 and "relax.f does not define relax_gone_" in built.stderr


def _fortran_source(text, kernel, openmp=False):
    return KernelSource(
        kernel=kernel,
        function=cxxnames.demangle(kernel).split("::")[-1],
        filename="k.f90",
        text=text,
        parse_args=[],
        compile_dir=".",
        clang="flang-new-19",
        openmp=openmp,
    )


RECURRENCE_F90 = """
module m
contains
  subroutine sweep(a, n)
    integer, intent(in) :: n
    real(8), intent(inout) :: a(n, n)
    integer :: i, j
    do i = 2, n
      do j = 1, n
        a(i, j) = a(i - 1, j) + a(i, j)   ! carried along i
      end do
    end do
  end subroutine
  subroutine scale(a, n)
    integer, intent(in) :: n
    real(8), intent(inout) :: a(n, n)
    integer :: i, j
    do i = 1, n
      do j = 1, n
        a(i, j) = 2d0 * a(i, j)
      end do
    end do
  end subroutine
end module
"""


def test_fortran_rules_refuse_what_a_dependence_forbids():
    refused = fortranrules.propose(_fortran_source(RECURRENCE_F90, "_QMmPsweep", openmp=True))
    assert "interchange" not in [p.rule for p in refused]  # a(i-1,j) read, a(i,j) written
    assert fortranrules.independent(["a(i, j) = a(i - 1, j) + a(i, j)"], ["i", "j"]) == (
        "a is written and read at different subscripts"
    )
    props = fortranrules.propose(_fortran_source(RECURRENCE_F90, "_QMmPscale", openmp=True))
    (swap,) = [p for p in props if p.rule == "interchange"]
    assert swap.description == "interchange i,j in scale" and swap.promise == 2
    assert "    do j = 1, n\n      do i = 1, n\n        a(i, j) = 2d0 * a(i, j)" in swap.text
    assert [p.description for p in props if p.rule == "omp-simd"] == ["omp simd on the j loop in scale"]
    # explicit-shape dummies are contiguous already; a unit without -fopenmp gets no simd directive
    serial = fortranrules.propose(_fortran_source(RECURRENCE_F90, "_QMmPscale"))
    assert [p.rule for p in serial] == ["interchange"]


def test_fortran_rewrites_replay_verified(recorded):
    from spack_r3.replay.server import ReplayServer
    from spack_r3.search.remix import kernel_source
    from spack_r3.sourcepatch import make_patch
    from spack_r3.data import OK, Variant

    caps = captures(recorded)
    with ReplayServer(cache_dir=os.path.join(recorded, "cache")) as server:
        for kernel, wanted in (
            ("_QMfieldsPblur", ["interchange i,j in blur", "contiguous a,b in blur"]),
            ("_QMfieldsPsmooth", ["contiguous a,b in smooth"]),  # its loops are in column order already
            # `t = tn` on allocatables: flang's runtime Assign, or an inline loop as a section
            ("_QMfieldsPdiffuse", ["assign t as whole sections in diffuse"]),
        ):
            cap = caps[kernel]
            directory = os.path.join(recorded, "captures", cap.id)
            src = kernel_source(cap, directory)
            props = RulesMutator().propose(src, None)
            assert [p.description for p in props] == wanted
            for p in props:
                variant = Variant(source_patch=make_patch(src.text, p.text, src.filename), source_rule=p.rule)
                ev = server.submit(directory, variant, pairs=1, timeout=120)
                assert ev.status == OK, (p.description, ev.status, ev.diagnostics)


BLUR_REWRITE = """\
! r3: walk down columns: j outer, i inner
subroutine blur(a, b)
    real(8), intent(in), contiguous :: a(:, :)
    real(8), intent(inout), contiguous :: b(:, :)
    integer :: i, j
    do j = 2, size(a, 2) - 1
      do i = 2, size(a, 1) - 1
        b(i, j) = 0.25d0 * (a(i-1, j) + a(i+1, j)) + 0.5d0 * a(i, j)
      end do
    end do
end subroutine"""

RENAMED_DUMMIES = BLUR_REWRITE.replace("blur(a, b)", "blur(src, dst)").replace("walk down", "renamed, walk down")


def test_the_model_is_shown_fortran_and_its_fortran_replays_verified(recorded):
    from modelserver import ScriptedModel
    from spack_r3.data import OK, Variant
    from spack_r3.model.client import ModelConfig
    from spack_r3.replay.server import ReplayServer
    from spack_r3.search.mutators import Feedback
    from spack_r3.search.mutators.llm import LLMMutator
    from spack_r3.search.remix import kernel_source
    from spack_r3.sourcepatch import make_patch

    cap = captures(recorded)["_QMfieldsPblur"]
    directory = os.path.join(recorded, "captures", cap.id)
    src = kernel_source(cap, directory)
    answer = "".join("```fortran\n%s\n```\n\n" % b for b in (RENAMED_DUMMIES, BLUR_REWRITE))
    with ScriptedModel([answer]) as server:
        model = LLMMutator(ModelConfig(server.url, "scripted-coder", "sk-test", timeout=10))
        (proposal,) = model.propose(src, Feedback())
    system, user = server.requests[0]["body"]["messages"]
    assert "kernels of Fortran programs" in system["content"] and "```fortran" in system["content"]
    assert "Function `blur` in Fortran file `fields.f90`" in user["content"]
    assert "`subroutine blur(a, b)`" in user["content"] and "```fortran" in user["content"]
    # the rewrite that renamed the dummies is dropped with the reason; the other is spliced in place
    assert model.rejected[0][1] == "the rewrite changes the dummy arguments of blur (src, dst, was a, b)"
    assert proposal.description == "walk down columns: j outer, i inner"
    assert proposal.text.count("subroutine blur(a, b)") == 1 and "subroutine smooth(a, b)" in proposal.text
    assert BLUR_REWRITE.split("\n", 1)[1] in proposal.text and "! r3:" not in proposal.text
    with ReplayServer(cache_dir=os.path.join(recorded, "cache")) as replay:
        variant = Variant(source_patch=make_patch(src.text, proposal.text, src.filename), source_rule="llm")
        ev = replay.submit(directory, variant, pairs=1, timeout=120)
    assert ev.status == OK, ev.diagnostics


def test_r3_mep_writes_a_fortran_kernel_as_a_standalone_program(recorded, tmp_path):
    caps = captures(recorded)
    # a module procedure on its dummies alone: its module's specification part and itself, in Fortran
    out = tmp_path / "smooth"
    rc, _, err = r3_output("--workspace", recorded, "mep", caps["_QMfieldsPsmooth"].id, "-o", str(out))
    assert rc == 0, err
    kernel = (out / "kernel.f90").read_text()
    assert "module fields" in kernel and "subroutine smooth(a, b)" in kernel and "subroutine diffuse" not in kernel
    assert sorted(os.listdir(out)) == ["Makefile", "README.md", "data", "driver.c", "kernel.f90", "mep.h"]
    check = subprocess.run(["make", "-s", "check"], cwd=out, capture_output=True, text=True)
    assert check.returncode == 0 and "fields::smooth: verified" in check.stdout, check.stdout + check.stderr
    # COMMON and a SAVEd counter live at recorded addresses: the kernel's IR, linked by flang
    out = tmp_path / "relax"
    rc, _, err = r3_output("--workspace", recorded, "mep", caps["relax_"].id, "-o", str(out))
    assert rc == 0, err
    assert (out / "kernel.ll").exists() and not (out / "kernel.f").exists()
    check = subprocess.run(["make", "-s", "check"], cwd=out, capture_output=True, text=True)
    assert check.returncode == 0 and "relax_: verified" in check.stdout, check.stdout + check.stderr


OMP_F90 = """
module grid
  implicit none
  real(8), allocatable :: u(:, :), v(:, :)
contains
  subroutine step(n)
    integer, intent(in) :: n
    integer :: i, j
    !$omp parallel do private(i)
    do j = 2, n - 1
      do i = 2, n - 1
        v(i, j) = 0.25d0 * (u(i-1, j) + u(i+1, j) + u(i, j-1) + u(i, j+1))
      end do
    end do
    !$omp end parallel do
  end subroutine
end module
program omp
  use grid
  integer :: it
  allocate(u(200, 200), v(200, 200))
  u = 1d0; u(1, :) = 5d0; v = 0d0
  do it = 1, 20
    call step(200)
    u = v
  end do
  print *, sum(v)
end program
"""


def test_an_openmp_fortran_region_replays_under_its_launch_settings(flang, tmp_path):
    src = tmp_path / "omp"
    src.mkdir()
    (src / "omp.f90").write_text(OMP_F90)
    (src / "Makefile").write_text("omp: omp.f90\n\t$(FC) -O2 -fopenmp -o omp omp.f90\n")
    ws = str(tmp_path / "ws")
    assert r3("--workspace", ws, "record", "--source", str(src), "--run", "OMP_NUM_THREADS=2 ./omp") == 0
    cap = captures(ws)["_QMgridPstep"]
    assert cap.launch.get("openmp")  # flang's !$omp parallel do: a fork like clang's
    for threads in ("1", "2"):
        rc, out, err = r3_output("--workspace", ws, "replay", cap.id, "--threads", threads, "--repeat", 2, "--json")
        assert rc == 0, err
        res = json.loads(out)
        assert res["verified"] is True and res["launch"].get("threads") == int(threads)


AXPY = """subroutine axpy(n, a, x, y)
  integer :: n, i
  real(8) :: a, x(n), y(n)
  do i = 1, n
    y(i) = y(i) + a * x(i)
  end do
end subroutine
"""


def test_an_unoptimized_build_s_contractions_stay_unfused_under_fma_built(flang, tmp_path, monkeypatch):
    """flang marks its operations ``contract``; a build at -O0 selects each alone and fuses
    none (Spack's CloverLeaf recipe builds its Fortran so), where an optimized replay for the
    same FMA target would fuse them: wrong output on every candidate. ``fma=built`` keeps
    what the build did: unfused at -O0, fused where the build optimized."""
    from spack_r3.replay.engine import init_llvm
    from spack_r3.compile.pipeline import parse
    from spack_r3.compile.stages import KernelIR, object_key, optimized_module

    init_llvm()
    src = tmp_path / "axpy.f90"
    src.write_text(AXPY)
    bc = tmp_path / "axpy.bc"
    # as r3-record keeps it: before LLVM's passes, for a target with FMA (flang's IR names the
    # CPU only: its features, FMA among them, are LLVM's for that CPU)
    subprocess.run(
        [flang, "-O2", "-march=haswell", "-c", "-emit-llvm", *fortran.BITCODE_FLAGS, str(src), "-o", str(bc)],
        check=True,
        capture_output=True,  # (the bisect limit names every pass it skips)
    )

    def contracted(level, spec):
        source = KernelIR.from_bitcode("axpy_", bc.read_bytes(), clang=flang, build_level=level)
        assert source.built_fusion == (True, level != "0")
        ir = str(optimized_module(source, parse(spec), cpu="haswell", features=source.built[1]))
        assert re.search(r"= fmul .*double", ir), ir  # (the loop is still there)
        return bool(re.search(r"= f(?:mul|add) (?:\w+ )*contract", ir))

    assert not contracted("0", "O3") and contracted("3", "O3")
    assert not contracted("3", "O3,fma=off")
    # ... and an object cached for one is never the other's (the cache once served the fused
    # code to an -O0 capture)
    monkeypatch.setenv("R3_STAGE_CACHE", str(tmp_path / "cache"))
    keys = {
        object_key(KernelIR.from_bitcode("axpy_", bc.read_bytes(), build_level=level), parse("O3"), None, "haswell", "")
        for level in ("0", "3")
    }
    assert len(keys) == 2

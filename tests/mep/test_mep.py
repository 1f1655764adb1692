"""r3 mep: a captured kernel as a Minimal Executable Program, built and checked by make
with gcc and with clang (the recording's architecture is this machine's)."""

import os
import shutil
import subprocess

import pytest

from spack_r3.capture import list_captures
from spack_r3.workspace import Workspace
from r3cli import flags, r3, r3_subprocess
from conftest import REPO_ROOT

DEMOS = os.path.join(REPO_ROOT, "repos", "r3", "sources")


def capture_id(ws, kernel):
    return next(c.id for c in list_captures(Workspace(ws)) if kernel in (c.kernel, c.kernel.split("E")[0]))


@pytest.fixture(scope="session")
def compilers(clang):
    """(C compiler, C++ compiler) pairs: gcc's and the record clang's."""
    found = []
    if shutil.which("gcc") and shutil.which("g++"):
        found.append(("gcc", "g++"))
    cxx = clang.replace("clang", "clang++")
    found.append((clang, cxx if shutil.which(cxx) else clang))
    return found


def make_check(directory, cc, cxx, *extra):
    subprocess.run(["make", "-s", "clean"], cwd=directory, check=True, capture_output=True)
    return subprocess.run(
        ["make", "-s", "CC=" + cc, "CXX=" + cxx, "RUNS=3", "check"] + list(extra),
        cwd=directory,
        capture_output=True,
        text=True,
    )


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    """heat (OpenMP kernels) and dense recorded on one workspace, at a tolerance that any
    compiler's FMA contraction stays within."""
    ws = str(tmp_path_factory.mktemp("ws"))
    assert r3("--workspace", ws, "record", "--source", os.path.join(DEMOS, "heat"), "--run", "./heat 64 10") == 0
    assert (
        r3(
            "--workspace",
            ws,
            "record",
            *flags(source=os.path.join(DEMOS, "dense"), run="./dense 64 1", kernel="matmul", tolerance="1e-9"),
        )
        == 0
    )
    return ws


@pytest.mark.parametrize("kernel", ["jacobi_step", "residual2", "matmul"])
def test_mep_of_a_demo_kernel_builds_and_checks_with_gcc_and_clang(demos, tmp_path, compilers, kernel):
    out = tmp_path / "mep"
    assert r3("--workspace", demos, "mep", kernel, "-o", out) == 0
    assert {"Makefile", "README.md", "mep.h", "driver.c", "kernel.c", "data"} <= set(os.listdir(out))
    # relocatable: the copy elsewhere builds the same (nothing names the workspace)
    moved = tmp_path / "elsewhere"
    shutil.copytree(out, moved)
    shutil.rmtree(out)
    assert demos not in (moved / "Makefile").read_text() + (moved / "mep.h").read_text()
    slice_text = (moved / "kernel.c").read_text()
    assert kernel in slice_text and "main(" not in slice_text  # the slice: not the whole unit
    readme = (moved / "README.md").read_text()
    assert capture_id(demos, kernel) in readme and "r3 record --source" in readme
    for cc, cxx in compilers:
        proc = make_check(moved, cc, cxx)
        assert proc.returncode == 0, (cc, proc.stdout + proc.stderr)
        assert "%s: verified" % kernel in proc.stdout and "median" in proc.stdout


def test_an_openmp_kernel_runs_on_its_recorded_threads(demos, tmp_path):
    out = tmp_path / "mep"
    assert r3("--workspace", demos, "mep", "jacobi_step", "-o", out) == 0
    from spack_r3.capture import load_capture

    recorded = load_capture(Workspace(demos), capture_id(demos, "jacobi_step")).launch
    assert recorded["openmp"] and "-fopenmp" in (out / "Makefile").read_text()
    assert "#define MEP_THREADS %d\n" % recorded["threads"] in (out / "mep.h").read_text()


def test_changed_data_is_a_mismatch_and_a_nonzero_exit(demos, tmp_path, clang):
    out = tmp_path / "mep"
    assert r3("--workspace", demos, "mep", "matmul", "-o", out) == 0
    post = out / "data" / "post.bin"
    data = bytearray(post.read_bytes())
    data[-9] ^= 0x40  # a high bit of the last double of the last compared region
    post.write_bytes(bytes(data))
    proc = make_check(out, clang, clang)
    assert proc.returncode != 0
    assert "WRONG OUTPUT" in proc.stdout and "differs" in proc.stderr


def test_bad_input_is_one_line_and_exit_2(demos, tmp_path):
    proc = r3_subprocess("--workspace", demos, "mep", "no_such_kernel", "-o", tmp_path / "x")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "unknown capture" in proc.stderr
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "f").write_text("x")
    proc = r3_subprocess("--workspace", demos, "mep", "matmul", "-o", busy)
    assert proc.returncode == 2 and "not an empty directory" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = r3_subprocess("--workspace", demos, "mep", "matmul", "-o", tmp_path / "v", "--variant")
    assert proc.returncode == 2 and "r3 tune" in proc.stderr


def test_an_unreplayable_capture_is_one_line_and_exit_2(tmp_path):
    ws = str(tmp_path / "ws")
    # cg's poisson2d returns pointers to blocks it allocates: recorded, and refused by replay
    assert (
        r3(
            "--workspace",
            ws,
            "record",
            *flags(source=os.path.join(DEMOS, "cg"), run="./cg 16 50 1e-8", kernel="poisson2d"),
        )
        == 0
    )
    proc = r3_subprocess("--workspace", ws, "mep", "poisson2d", "-o", tmp_path / "m")
    assert proc.returncode == 2 and "cannot replay" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "m").exists()


CXX_TREE = {
    "grid.h": "#pragma once\nstruct Grid { int n; double *v; double relax(double w); };\nextern double damping;\n",
    "grid.cpp": """#include "grid.h"
#include <cstdio>
#include <cstdlib>
double damping = 0.5;
static double norm(const Grid &g) { double s = 0; for (int i = 0; i < g.n; i++) s += g.v[i] * g.v[i]; return s; }
double Grid::relax(double w) {
    for (int sweep = 0; sweep < 40; sweep++)
        for (int i = 1; i < n - 1; i++) v[i] = (1 - w) * v[i] + w * damping * (v[i - 1] + v[i + 1]);
    return norm(*this);
}
void unused_helper(Grid &g) { g.v[0] = 1; }
int main(int argc, char **argv) {
    int n = argc > 1 ? std::atoi(argv[1]) : 4000;
    Grid g{n, new double[n]};
    for (int i = 0; i < n; i++) g.v[i] = (i * 7919 % 1000) / 1000.0;
    double r = 0;
    for (int it = 0; it < 5; it++) r = g.relax(0.8);
    std::printf("%.6f\\n", r);
    return 0;
}
""",
    "Makefile": "grid: grid.cpp grid.h\n\t$(CXX) -O2 -std=c++17 -o grid grid.cpp\n",
}

C_STATIC_TREE = {
    "count.c": """#include <stdio.h>
#include <stdlib.h>
double scaled_sum(const double *x, int n) {
    static int calls;  /* a function's static: recorded, and no slice can put it at its address */
    calls++;
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i] * calls;
    return s;
}
int main(void) {
    int n = 100000;
    double *x = malloc(n * sizeof *x), r = 0;
    for (int i = 0; i < n; i++) x[i] = i % 17;
    for (int it = 0; it < 50; it++) r += scaled_sum(x, n);
    printf("%g\\n", r);
    return 0;
}
""",
    "Makefile": "count: count.c\n\t$(CC) -O2 -o count count.c\n",
}


def _tree(path, files):
    path.mkdir()
    for name, text in files.items():
        (path / name).write_text(text)
    return str(path)


def test_a_cpp_kernel_gets_a_cpp_driver_and_its_global_at_its_address(tmp_path, compilers):
    ws = str(tmp_path / "ws")
    src = _tree(tmp_path / "src", CXX_TREE)
    assert (
        r3(
            "--workspace",
            ws,
            "record",
            *flags(source=src, build='make CXX="$R3_CXX"', run="./grid", kernel="Grid::relax", tolerance="1e-9"),
        )
        == 0
    )
    out = tmp_path / "mep"
    assert r3("--workspace", ws, "mep", "Grid::relax", "-o", out) == 0
    assert (out / "driver.cpp").exists() and (out / "kernel.cpp").exists()
    kernel = (out / "kernel.cpp").read_text()
    assert "#define damping (*(__typeof__(damping) *)0x" in kernel  # the recorded global, at its address
    assert "norm(" in kernel and "unused_helper" not in kernel and "main(" not in kernel
    assert (out / "include" / "grid.h").exists()
    for cc, cxx in compilers:
        proc = make_check(out, cc, cxx)
        assert proc.returncode == 0, (cxx, proc.stdout + proc.stderr)
        assert "Grid::relax" in proc.stdout and "verified" in proc.stdout


def test_a_kernel_with_no_slice_carries_its_ir(tmp_path, compilers):
    ws = str(tmp_path / "ws")
    src = _tree(tmp_path / "src", C_STATIC_TREE)
    assert (
        r3(
            "--workspace",
            ws,
            "record",
            *flags(source=src, build='make CC="$R3_CC"', run="./count", kernel="scaled_sum"),
        )
        == 0
    )
    out = tmp_path / "mep"
    assert r3("--workspace", ws, "mep", "scaled_sum", "-o", out) == 0
    assert (out / "kernel.ll").exists() and not (out / "kernel.c").exists()
    assert "kernel.ll" in (out / "README.md").read_text()
    for cc, cxx in compilers:  # the driver by either compiler, the IR by clang
        proc = make_check(out, cc, cxx)
        assert proc.returncode == 0, (cc, proc.stdout + proc.stderr)
        assert "scaled_sum: verified" in proc.stdout


# -- the model mutator sees the kernel as its MEP source --------------------------------

UNIT = """\
#include <stddef.h>

static double scale(double x) { return 2.0 * x; }

double unused(const double *y, int n) { return n ? y[0] : 0; }

void saxpy(int n, double a, const double *x, double *y)
{
    for (int i = 0; i < n; i++)
        y[i] = scale(a) * x[i] + y[i];
}

int main(void) { return 0; }
"""

REWRITE = """\
// r3: hoist scale(a) out of the loop
static double scale(double x) { return x + x; }

void saxpy(int n, double a, const double *x, double *y)
{
    const double s = scale(a);
    for (int i = 0; i < n; i++)
        y[i] = s * x[i] + y[i];
}"""


def test_the_model_is_shown_the_mep_source_and_its_rewrite_goes_back_into_the_unit(clang, tmp_path):
    from modelserver import ScriptedModel

    from spack_r3.model.client import ModelConfig
    from spack_r3.search.mutators import Feedback, KernelSource
    from spack_r3.search.mutators.llm import LLMMutator
    from spack_r3.sourcepatch import apply_patch, make_patch

    source = KernelSource(
        kernel="saxpy",
        function="saxpy",
        filename="k.c",
        text=UNIT,
        parse_args=["-std=c11"],
        compile_dir=str(tmp_path),
        clang=clang,
    )
    with ScriptedModel(["```c\n%s\n```\n" % REWRITE]) as server:
        (proposal,) = LLMMutator(ModelConfig(server.url, "scripted-coder", "sk-test", timeout=10)).propose(
            source, Feedback()
        )
    shown = server.requests[0]["body"]["messages"][1]["content"]
    # shown: the slice (the kernel and its callee), not the functions it never reaches
    program = shown.split("### `k.c` (the slice)\n```c\n", 1)[1].split("\n```", 1)[0]
    assert "static double scale" in program and "void saxpy" in program
    assert "unused" not in program and "main" not in program
    # ... which compiles alone
    (tmp_path / "slice.c").write_text(program)
    subprocess.run([clang, "-std=c11", "-c", str(tmp_path / "slice.c"), "-o", str(tmp_path / "slice.o")], check=True)
    # reintegrated: the rewritten callee replaces the unit's, the rest of the unit stays byte for byte
    body = REWRITE.split("\n", 1)[1]
    want = (
        UNIT[: UNIT.index("static double scale")]
        + UNIT[UNIT.index("double unused") : UNIT.index("void saxpy")]
        + body
        + UNIT[UNIT.index("\n\nint main") :]
    )
    assert proposal.text == want
    assert UNIT.count("static double scale") == proposal.text.count("static double scale") == 1
    assert apply_patch(UNIT, make_patch(UNIT, proposal.text, "k.c")) == proposal.text  # the unit's patch
    (tmp_path / "unit.c").write_text(proposal.text)
    subprocess.run([clang, "-std=c11", "-c", str(tmp_path / "unit.c"), "-o", str(tmp_path / "unit.o")], check=True)


def test_mep_of_a_tuned_winner_has_its_patch_pipeline_flags_and_launch(demos, tmp_path, clang):
    from spack_r3.capture import load_capture
    from spack_r3.data import Launch, Pipeline, Variant
    from spack_r3.replay.source import unit_text
    from spack_r3.search.results import KernelResult, save_results
    from spack_r3.sourcepatch import make_patch

    ws = Workspace(demos)
    cap = load_capture(ws, capture_id(demos, "matmul"))
    unit = unit_text(cap, ws.capture_dir(cap.id))
    old = (
        "            c[i * n + j] = 0.0;\n            for (int k = 0; k < n; k++)\n"
        "                c[i * n + j] += a[i * n + k] * b[k * n + j];\n"
    )
    new = (
        "            double s = 0.0;  /* the same sum, in a register */\n            for (int k = 0; k < n; k++)\n"
        "                s += a[i * n + k] * b[k * n + j];\n            c[i * n + j] = s;\n"
    )
    assert old in unit
    variant = Variant(
        pipeline=Pipeline(opt="2", unroll=False, passes=("sroa",), fast_math=("contract",)),
        launch=Launch(),
        source_patch=make_patch(unit, unit.replace(old, new), "kernels.c"),
        source_rule="scalar-replacement",
    )
    # what r3 tune saves for a confirmed winner (results/<capture>.json)
    save_results(
        ws,
        [
            KernelResult(
                "matmul",
                [cap.id],
                0.9,
                1e-3,
                5e-4,
                2.0,
                1.9,
                2.1,
                10,
                {},
                True,
                True,
                variant,
                pairs=8,
            )
        ],
    )
    out = tmp_path / "winner"
    assert r3("--workspace", demos, "mep", "matmul", "--variant", "-o", out) == 0
    assert "double s = 0.0;" in (out / "kernel.c").read_text()  # the patch applied
    makefile = (out / "Makefile").read_text()
    cflags = next(l for l in makefile.splitlines() if l.startswith("CFLAGS"))
    assert "-O2" in cflags and "-fno-unroll-loops" in cflags and "-ffp-contract=fast" in cflags
    assert "-O3" not in cflags
    readme = (out / "README.md").read_text()
    assert "passes=sroa" in readme and "2.000x" in readme  # no flag for an extra pass: said so
    proc = make_check(out, clang, clang)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "matmul: verified" in proc.stdout
    # beside it, the variant's kernel as replay compiled it (what r3 measured), checked the same way
    assert (out / "r3" / "kernel.o").exists() and "check-r3" in readme
    proc = make_check(out, clang, clang, "check-r3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("matmul: verified") == 2


def test_mep_of_a_polly_winner_builds_with_every_polly_setting_it_was_measured_with(demos, tmp_path, clang):
    """The MEP's flags and replay's Polly stage lower the same rows (settings.lower): a
    winner's fusion, tiling and register tiling reach clang as -mllvm options."""
    from spack_r3.data import Launch, Pipeline, Variant
    from spack_r3.compile.stages import polly_available, polly_options
    from spack_r3.search.results import KernelResult, save_results

    if not polly_available(clang):
        pytest.skip("no opt with Polly for %s" % clang)
    ws = Workspace(demos)
    cid = capture_id(demos, "matmul")
    pipeline = Pipeline(polly=True, polly_tile=32, polly_fusion=True, polly_tile2=True, polly_regtile=True)
    variant = Variant(pipeline=pipeline, launch=Launch())
    save_results(
        ws, [KernelResult("matmul", [cid], 0.9, 1e-3, 4e-4, 2.5, 2.4, 2.6, 10, {}, True, True, variant, pairs=8)]
    )
    out = tmp_path / "polly"
    assert r3("--workspace", demos, "mep", cid, "--variant", "-o", out) == 0
    cflags = next(l for l in (out / "Makefile").read_text().splitlines() if l.startswith("CFLAGS"))
    for option in polly_options(pipeline)[1:]:
        assert "-mllvm %s" % option in cflags, option
    assert "no compiler flag" not in (out / "README.md").read_text()
    proc = make_check(out, clang, clang)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "matmul: verified" in proc.stdout


def test_mep_of_an_openmp_winner_runs_its_threads(demos, tmp_path, clang):
    from spack_r3.data import Launch, Pipeline, Variant
    from spack_r3.search.results import KernelResult, save_results

    ws = Workspace(demos)
    cid = capture_id(demos, "jacobi_step")
    variant = Variant(pipeline=Pipeline(), launch=Launch(threads=1))
    save_results(
        ws,
        [
            KernelResult(
                "jacobi_step",
                [cid],
                0.5,
                1e-3,
                8e-4,
                1.2,
                1.1,
                1.3,
                10,
                {},
                False,
                True,
                variant,
                pairs=8,
            )
        ],
    )
    out = tmp_path / "winner"
    assert r3("--workspace", demos, "mep", cid, "--variant", "-o", out) == 0
    assert "#define MEP_THREADS 1\n" in (out / "mep.h").read_text()
    assert "-march=native" in (out / "Makefile").read_text()
    proc = make_check(out, clang, clang)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 thread\n" in proc.stdout


C_GLOBALS_TREE = {
    "w.c": """#include <stdio.h>
#include <stdlib.h>
static double weights[8] = {1, 2, 3, 4, 5, 6, 7, 8};
long calls_total;
static double pick(int i) { return weights[i & 7]; }
double weighted(const double *x, int n) {
    calls_total++;
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i] * pick(i);
    weights[0] += 1.0;
    return s;
}
int main(void) {
    int n = 20000;
    double *x = malloc(n * sizeof *x), r = 0;
    for (int i = 0; i < n; i++) x[i] = i % 13;
    for (int it = 0; it < 20; it++) r += weighted(x, n);
    printf("%g %ld\\n", r, calls_total);
    return 0;
}
""",
    "Makefile": "w: w.c\n\t$(CC) -O2 -o w w.c\n",
}


def test_globals_of_the_unit_are_read_and_written_at_their_recorded_addresses(tmp_path, compilers):
    ws = str(tmp_path / "ws")
    src = _tree(tmp_path / "src", C_GLOBALS_TREE)
    assert (
        r3(
            "--workspace",
            ws,
            "record",
            *flags(source=src, build='make CC="$R3_CC"', run="./w", kernel="weighted"),
        )
        == 0
    )
    out = tmp_path / "mep"
    assert r3("--workspace", ws, "mep", "weighted", "-o", out) == 0
    kernel = (out / "kernel.c").read_text()
    # the definitions became declarations; the names reach the recorded objects
    assert "extern double weights[8];" in kernel and "extern long calls_total;" in kernel
    assert "= {1, 2, 3" not in kernel and "#define weights (*(__typeof__(weights) *)0x" in kernel
    for cc, cxx in compilers:  # weights[0] and calls_total as the recorded call left them: compared
        proc = make_check(out, cc, cxx)
        assert proc.returncode == 0, (cc, proc.stdout + proc.stderr)
        assert "weighted: verified" in proc.stdout

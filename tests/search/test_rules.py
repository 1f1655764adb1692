"""The ``rules`` mutator: deterministic rewrites of a kernel, found on clang's AST.

A small program of our own, compiled with -fopenmp, holds one kernel per situation: a
perfect i,k,j nest, a matrix product whose j loop first clears c (not a perfect nest), a
dot product, and kernels where a rewrite would be wrong: a loop-carried dependence, a
stencil reading ahead of what it writes, a scalar carried between iterations, a
triangular nest. It is recorded once; each test asks the mutator for its proposals on
one kernel and, where a rule applies, proves the rewrite by replaying it against the
recording (compiled, run, outputs compared). Tests never assert a speedup.
"""

import dataclasses
import json
import os

import pytest

from spack_r3.capture import load_capture_dir
from spack_r3.data import OK, Pipeline, Variant
from spack_r3.replay.server import ReplayServer
from spack_r3.search.mutators import Feedback, KernelSource, Proposal
from spack_r3.search.mutators import cast
from spack_r3.search.bayes import Target, storage
from spack_r3.search.mutators.ruleset import RulesMutator
from spack_r3.search.patterns import Patterns
from spack_r3.search.remix import ORIGINAL, Child, Remix, RemixOptions, inherited_settings, kernel_source
from spack_r3.search.space import Space
from spack_r3.search.tune import kernel_facts
from spack_r3.sourcepatch import Composer, make_patch
from spack_r3.workspace import Workspace

from test_record_replay import capture_of, recorded_workspace

KERNELS_C = r"""
#include <math.h>

void mm_ikj(int n, const double *a, const double *b, double *c)
{
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n; k++)
            for (int j = 0; j < n; j++)
                c[i * n + j] += a[i * n + k] * b[k * n + j];
}

void matmul(int n, const double *a, const double *b, double *c)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            c[i * n + j] = 0.0;
            for (int k = 0; k < n; k++)
                c[i * n + j] += a[i * n + k] * b[k * n + j];
        }
}

double dot(int n, const double *x, const double *y)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += x[i] * y[i];
    return s;
}

void prefix(int n, double *a, const double *b)
{
    for (int i = 1; i < n; i++)
        a[i] = a[i - 1] + b[i];
}

void smooth(int n, double *a, const double *b)
{
    for (int i = 0; i < n - 1; i++)
        a[i] = 0.5 * (a[i + 1] + sqrt(b[i]));
}

double decay(int n, double *out, const double *x)
{
    double s = 0.0;
    for (int i = 0; i < n; i++) {
        s = 0.5 * s + x[i];
        out[i] = s;
    }
    return s;
}

double pairs(int n, const double *p)  /* n points as x, y, z triples */
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double dx = p[3 * j] - p[3 * i], dy = p[3 * j + 1] - p[3 * i + 1], dz = p[3 * j + 2] - p[3 * i + 2];
            s += dx * dx + dy * dy + dz * dz;
        }
    return s;
}

void colsum(int n, double A[48][48], double *s)  /* column sums of an n x n corner */
{
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++)
            s[j] += A[i][j];
}

void lower(int n, double *a)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++)
            a[i * n + j] *= 2.0;
}

void energy(int n, double *e, const double *p, const double *q, double emin)  /* LULESH's shape */
{
#pragma omp parallel for schedule(static) firstprivate(emin)
    for (int i = 0; i < n; i++) {
        e[i] = e[i] - 0.5 * (p[i] + q[i]);
        e[i] = e[i] < emin ? emin : e[i];
    }
}
"""

MAIN_C = r"""
#include <stdio.h>
#include <stdlib.h>
void mm_ikj(int, const double *, const double *, double *);
void matmul(int, const double *, const double *, double *);
double dot(int, const double *, const double *);
void prefix(int, double *, const double *);
void smooth(int, double *, const double *);
double decay(int, double *, const double *);
double pairs(int, const double *);
void colsum(int, double [48][48], double *);
void lower(int, double *);
void energy(int, double *, const double *, const double *, double);

int main(void) {
  int n = 45;  /* not a multiple of any tile size or vector width: remainders run too */
  double *a = malloc(n * n * sizeof(double)), *b = malloc(n * n * sizeof(double));
  double *c = calloc(n * n, sizeof(double)), *d = malloc(n * n * sizeof(double));
  for (int i = 0; i < n * n; i++) { a[i] = (i % 7) * 0.25 + 1.0 / (i + 1); b[i] = (i % 5) * 0.5 - 1.0 / (i + 3); }
  for (int r = 0; r < 2; r++) { mm_ikj(n, a, b, c); matmul(n, a, b, d); }
  double s = dot(n * n, a, b);
  prefix(n * n, c, a); smooth(n * n, d, b);
  s += decay(n * n, c, b);
  s += pairs(n, a);
  double (*e)[48] = malloc(48 * sizeof *e);
  for (int i = 0; i < 48 * 48; i++) e[i / 48][i % 48] = (i % 11) * 0.125;
  colsum(n, e, c);
  lower(n, d);
  energy(n * n, d, a, b, 0.25);
  printf("%g %g %g\n", c[n * n - 1], d[n + 1], s);
  return 0;
}
"""

MAKEFILE = (
    "prog: main.o kernels.o\n\t$(CC) -O2 -fopenmp -o $@ main.o kernels.o -lm\n"
    "%.o: %.c\n\t$(CC) -O2 -fopenmp -c -o $@ $<\n"
)
KERNELS = ("mm_ikj", "matmul", "dot", "prefix", "smooth", "decay", "pairs", "colsum", "lower", "energy")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, clang):
    """One workspace with a capture of every kernel of the program."""
    files = {"kernels.c": KERNELS_C, "main.c": MAIN_C, "Makefile": MAKEFILE}
    return recorded_workspace(tmp_path_factory, "rules", files, KERNELS)


@pytest.fixture(scope="module")
def server(recorded):
    with ReplayServer(cache_dir=os.path.join(recorded, "cache")) as s:
        yield s


def source(ws, kernel):
    d = capture_of(ws, kernel)
    return kernel_source(load_capture_dir(d), d)


def proposals(ws, kernel, **changes):
    src = dataclasses.replace(source(ws, kernel), **changes)
    return src, RulesMutator().propose(src, Feedback())


def rules_of(props):
    return [p.rule for p in props]


def one(props, rule, containing=""):
    found = [p for p in props if p.rule == rule and containing in p.description]
    assert len(found) == 1, "%s %r: %s" % (rule, containing, [p.description for p in props])
    return found[0]


def replays(ws, server, src, proposal, knobs=None, tolerance=None, verify_runs=1):
    """The rewrite compiles and gives the recorded results (every knob at the value given,
    else at its default); returns the text the replay built."""
    cast.dump(src, proposal.text)  # it parses
    defines = {name: values[0] for name, values in proposal.knobs.items()}
    defines.update(knobs or {})
    variant = Variant(
        source_patch=make_patch(src.text, proposal.text, src.filename),
        source_defines=defines,
        source_rule=proposal.rule,
    )
    ev = server.submit(
        capture_of(ws, src.kernel), variant, pairs=3, timeout=60, tolerance=tolerance, verify_runs=verify_runs
    )
    assert ev.status == OK, (proposal.description, ev.status, ev.diagnostics)
    return proposal.text


def test_restrict_marks_every_pointer_parameter(recorded, server):
    src, props = proposals(recorded, "mm_ikj")
    p = one(props, "restrict")
    assert p.description == "restrict a, b, c in mm_ikj"
    assert "const double *restrict a, const double *restrict b, double *restrict c" in p.text
    replays(recorded, server, src, p)
    # once all are restrict, there is nothing left to offer
    again = RulesMutator().propose(dataclasses.replace(src, text=p.text), Feedback())
    assert "restrict" not in rules_of(again)


def test_omp_parallel_on_an_outer_loop_with_independent_iterations(recorded, server):
    src, props = proposals(recorded, "mm_ikj")
    assert src.openmp
    p = one(props, "omp-parallel")
    assert p.description == "omp parallel for over i in mm_ikj"
    assert "#pragma omp parallel for\n    for (int i = 0;" in p.text
    replays(recorded, server, src, p, verify_runs=3)  # a race can verify once by luck
    # a unit not compiled with -fopenmp: the pragma would do nothing, so it is not offered
    _, serial = proposals(recorded, "mm_ikj", openmp=False)
    assert not {"omp-parallel", "omp-simd"} & set(rules_of(serial))


def test_omp_simd_and_loop_hints_on_the_innermost_loop(recorded, server):
    src, props = proposals(recorded, "mm_ikj")
    simd = one(props, "omp-simd")
    assert "#pragma omp simd\n            for (int j" in simd.text
    replays(recorded, server, src, simd)
    vec = one(props, "vectorize-pragma")
    assert vec.knobs == {"R3_IC_1": (4, 1, 2, 8)}
    assert "R3_LOOP(clang loop vectorize(enable) interleave_count(R3_IC_1))" in vec.text
    assert "#ifndef R3_IC_1\n#define R3_IC_1 4\n#endif" in vec.text
    replays(recorded, server, src, vec, knobs={"R3_IC_1": 2})
    unroll = one(props, "unroll-pragma")
    assert list(unroll.knobs) == ["R3_UF_1"]
    replays(recorded, server, src, unroll, knobs={"R3_UF_1": 8})


def test_an_omp_parallel_for_of_an_innermost_loop_becomes_parallel_for_simd(recorded, server):
    """LULESH's hot loops are each an ``omp parallel for``'s own: no hint that needs a loop of
    its own reaches them, so the directive itself gains ``simd``, its clauses kept."""
    src, props = proposals(recorded, "energy")
    p = one(props, "omp-simd")
    assert p.description.startswith("omp parallel for simd on the i loop at line ")
    assert "#pragma omp parallel for simd schedule(static) firstprivate(emin)\n" in p.text
    assert not {"omp-parallel", "vectorize-pragma", "unroll-pragma"} & set(rules_of(props))
    replays(recorded, server, src, p, verify_runs=3)


def test_no_for_simd_where_the_loop_nests_or_a_scalar_is_shared(tmp_path, clang):
    text = (
        "void rows(int n, double *a) {\n#pragma omp parallel for\n  for (int i = 0; i < n; i++)\n"
        "    for (int j = 0; j < n; j++)\n      a[i * n + j] *= 2.0;\n}\n"
        "void shared(int n, double *a) {\n  double t;\n#pragma omp parallel for\n"
        "  for (int i = 0; i < n; i++) {\n    t = a[i];\n    a[i] = t * t;\n  }\n}\n"
        "void region(int n, double *a) {\n#pragma omp parallel\n  {\n"
        "  #pragma  omp for nowait\n  for (int i = 0; i < n; i++) {\n    double t = a[i];\n    a[i] = t * t;\n  }\n"
        "  }\n}\n"
    )
    rows = RulesMutator().propose(unit(tmp_path, text, "rows", openmp=True), Feedback())
    assert "#pragma omp simd\n    for (int j" in one(rows, "omp-simd").text  # the inner loop, not the directive
    shared = RulesMutator().propose(unit(tmp_path, text, "shared", openmp=True), Feedback())
    assert "omp-simd" not in rules_of(shared)  # t is shared: the loop has a race already; leave it be
    region = RulesMutator().propose(unit(tmp_path, text, "region", openmp=True), Feedback())
    assert "#pragma  omp for simd nowait\n" in one(region, "omp-simd").text


def test_interchange_of_a_perfect_nest(recorded, server):
    src, props = proposals(recorded, "mm_ikj")
    assert sorted(p.description for p in props if p.rule == "interchange") == [
        "interchange i,k in mm_ikj",
        "interchange k,j in mm_ikj",
    ]
    p = one(props, "interchange", "k,j")
    assert "for (int j = 0; j < n; j++)\n            for (int k = 0; k < n; k++)" in p.text
    replays(recorded, server, src, p)


def test_interchange_after_distributing_the_initialization(recorded, server):
    """matmul's j loop clears c[i*n+j] before its k loop: not a perfect nest. Its iterations
    are independent, so it is split in two (clear, then the nest) and the nest interchanged."""
    src, props = proposals(recorded, "matmul")
    p = one(props, "interchange", "j,k")
    assert p.description == "interchange j,k in matmul after distributing c[i * n + j] = 0.0"
    replays(recorded, server, src, p)
    # before i,j: j,k makes the innermost loop walk b and c contiguously
    assert [q.description for q in props if q.rule == "interchange"][0] == p.description
    # no tiling of a nest that is not perfect
    assert not [q for q in props if q.rule == "tile" and "j,k" in q.description]


def test_unroll_and_jam_keeps_the_element_it_accumulates_in_a_local(recorded, server):
    """i,k,j matmul: blocks of k run inside the j loop, c[i*n+j] in a register across a
    block; each element still gets its terms in k order, so the results stay exact."""
    src, props = proposals(recorded, "mm_ikj")
    p = one(props, "unroll-and-jam")
    assert p.description == "unroll-and-jam k into the j loop in mm_ikj (R3_UJ_1), c[i * n + j] in a local"
    assert p.knobs == {"R3_UJ_1": (4, 2, 8, 16)}
    assert "for (int k = k_jam; k < k_jam + R3_UJ_1; k++)" in p.text
    replays(recorded, server, src, p)  # 45 = 11 * 4 + 1: the last k runs in the loop after the blocks
    replays(recorded, server, src, p, knobs={"R3_UJ_1": 16})


def test_tile_with_the_size_as_a_knob(recorded, server):
    src, props = proposals(recorded, "mm_ikj")
    p = one(props, "tile", "k,j")
    assert p.knobs == {"R3_TILE_1": (32, 8, 16, 64, 128)}
    assert "k_tile + R3_TILE_1 < (n) ? k_tile + R3_TILE_1 : (n)" in p.text
    replays(recorded, server, src, p, knobs={"R3_TILE_1": 8})  # 45 = 5 * 8 + 5: a partial tile
    replays(recorded, server, src, p)


def test_scalar_replacement_of_an_accumulated_element(recorded, server):
    src, props = proposals(recorded, "matmul")
    p = one(props, "scalar-replace")
    assert p.description == "scalar-replace c[i * n + j] across the k loop in matmul"
    assert "double r3_c = c[i * n + j];" in p.text and "c[i * n + j] = r3_c;" in p.text
    replays(recorded, server, src, p)
    # in the i,k,j nest the element moves with the innermost loop: nothing to keep
    assert "scalar-replace" not in rules_of(proposals(recorded, "mm_ikj")[1])


def test_stage_copies_an_array_read_with_a_stride_into_the_order_the_loop_reads(recorded, server):
    """matmul reads b[k * n + j] over k; a copy transposed on entry makes it r3_b[j * n + k].
    The sums keep their order: the results are exact."""
    src, props = proposals(recorded, "matmul")
    p = one(props, "stage")
    assert p.description == "stage b with k contiguous in matmul"
    assert "double *restrict r3_b = r3_stage_matmul_1(b, n, n);" in p.text
    assert "a[i * n + k] * r3_b[(long)j * n + k]" in p.text and "__builtin_free(r3_b);" in p.text
    replays(recorded, server, src, p)
    # in the i,k,j nest every innermost read is already contiguous
    assert "stage" not in rules_of(proposals(recorded, "mm_ikj")[1])


def test_stage_splits_an_array_of_triples_into_three_arrays(recorded, server):
    src, props = proposals(recorded, "pairs")
    p = one(props, "stage")
    assert "r3_stage_pairs_1(p, n, 3)" in p.text
    # the reads the inner loop makes come from the copy; the outer loop's stay as they were
    assert "r3_p[j] - p[3 * i], dy = r3_p[1L * n + j] - p[3 * i + 1]" in p.text
    assert "__builtin_free(r3_p);\n    return s;" in p.text  # freed before the one return
    replays(recorded, server, src, p)


def test_stage_transposes_a_two_dimensional_array_read_down_its_columns(recorded, server):
    """A[i][j] over i, A declared with rows of 48: the copy holds whole rows' worth, transposed."""
    src, props = proposals(recorded, "colsum")
    p = one(props, "stage")
    assert "double *restrict r3_A = r3_stage_colsum_1(A[0], n, 48);" in p.text
    assert "s[j] += r3_A[(long)j * n + i];" in p.text
    replays(recorded, server, src, p)
    # rows of a length only known at run time (a C99 array parameter): not staged
    vla = src.text.replace("double A[48][48]", "double A[n][n]")
    assert "stage" not in rules_of(RulesMutator().propose(dataclasses.replace(src, text=vla), Feedback()))


def test_two_kernels_staged_apart_compose_into_one_unit(recorded, server):
    """What emit does with the winners of two kernels of one unit, each rewritten against
    the original: one unit holding both, each kernel still giving its recorded results."""
    mm, pairs = source(recorded, "matmul"), source(recorded, "pairs")
    assert mm.text == pairs.text
    unit = Composer(mm.text)
    for src in (mm, pairs):
        unit.add(make_patch(src.text, one(RulesMutator().propose(src, Feedback()), "stage").text, src.filename))
    assert "r3_stage_matmul_1(b, n, n)" in unit.text and "r3_stage_pairs_1(p, n, 3)" in unit.text
    for src in (mm, pairs):
        replays(recorded, server, src, Proposal(unit.text, "stage", "matmul and pairs staged"))


def test_a_floating_point_sum_is_reordered_only_within_a_tolerance(recorded, server):
    exact, props = proposals(recorded, "dot")
    assert exact.tolerance is None
    assert not {"omp-parallel", "omp-simd", "vectorize-pragma"} & set(rules_of(props))
    assert "unroll-pragma" in rules_of(props)  # unrolling keeps the order
    src, props = proposals(recorded, "dot", tolerance=1e-9)
    p = one(props, "omp-parallel")
    assert "#pragma omp parallel for reduction(+:s)" in p.text
    replays(recorded, server, src, p, tolerance=1e-9, verify_runs=2)
    assert "omp simd reduction(+:s)" in one(props, "omp-simd").text


def test_the_replay_check_catches_a_wrong_rewrite(recorded, server):
    """What the tests above rely on: a rewrite that changes results does not verify."""
    src = source(recorded, "matmul")
    wrong = src.text.replace("c[i * n + j] = 0.0;", "c[i * n + j] = 1.0;")
    variant = Variant(source_patch=make_patch(src.text, wrong, src.filename))
    ev = server.submit(capture_of(recorded, "matmul"), variant, pairs=3, timeout=60)
    assert ev.status != OK


@pytest.mark.parametrize("kernel", ["prefix", "smooth", "decay"])
def test_no_parallel_loop_with_a_carried_dependence(recorded, kernel):
    """a[i] = a[i-1] + ...; a[i] = f(a[i+1]); s = 0.5 * s + x[i]: iterations depend on each other."""
    _, props = proposals(recorded, kernel)
    assert not {"omp-parallel", "omp-simd", "scalar-replace"} & set(rules_of(props))
    assert "restrict" in rules_of(props)


def test_no_interchange_or_tiling_of_a_triangular_nest(recorded):
    _, props = proposals(recorded, "lower")
    assert not {"interchange", "tile"} & set(rules_of(props))
    assert "omp-parallel" in rules_of(props)  # its rows are still independent


# ---- on texts alone (no recording): what the rules refuse, and the language they write


def unit(tmp_path, text, function, filename="k.c", **kw):
    parse_args = ["-fopenmp"] if kw.get("openmp") else []  # as the unit's compile command would give
    return KernelSource(
        kernel=function,
        function=function,
        filename=filename,
        text=text,
        parse_args=parse_args,
        compile_dir=str(tmp_path),
        clang="/usr/bin/clang-19",
        **kw,
    )


def test_no_unroll_and_jam_where_the_copies_share_nothing_or_the_order_matters(tmp_path, clang):
    text = (
        "void scale(int n, double *a) {\n  for (int i = 0; i < n; i++)\n    for (int j = 0; j < n; j++)\n"
        "      a[i * n + j] *= 2.0;\n}\n"
        "void shift(int n, double *x, const double *b) {\n  for (int i = 0; i < n; i++)\n"
        "    for (int j = 0; j < n - 1; j++)\n      x[j] = x[j + 1] + b[i];\n}\n"  # (i, j+1) before (i+1, j)
        "void sums(int n, double *x, const double *b) {\n  for (int i = 0; i < n; i++)\n"
        "    for (int j = 0; j < n; j++)\n      x[j] += b[i * n + j];\n}\n"
    )
    assert "unroll-and-jam" not in rules_of(RulesMutator().propose(unit(tmp_path, text, "scale"), Feedback()))
    assert not {"unroll-and-jam", "interchange"} & set(
        rules_of(RulesMutator().propose(unit(tmp_path, text, "shift"), Feedback()))
    )
    p = one(RulesMutator().propose(unit(tmp_path, text, "sums"), Feedback()), "unroll-and-jam")
    assert p.description == "unroll-and-jam i into the j loop in sums (R3_UJ_1), x[j] in a local"


def test_restrict_is_refused_when_the_body_makes_parameters_alias(tmp_path, clang):
    text = (
        "void axpy(int n, double *x, double *y);\n"
        "void twice(int n, double *x, double *y) { axpy(n, x, x); }\n"
        "void shift(int n, double *x, double *y) { y = x + 1; for (int i = 0; i < n; i++) y[i] += x[i]; }\n"
    )
    for fn in ("twice", "shift"):
        assert "restrict" not in rules_of(RulesMutator().propose(unit(tmp_path, text, fn), Feedback()))


def test_cxx_units_get_the_cxx_spelling(tmp_path, clang):
    text = "void scale(int n, double *x, double s) { for (int i = 0; i < n; i++) x[i] *= s; }\n"
    p = one(RulesMutator().propose(unit(tmp_path, text, "scale", filename="k.cpp"), Feedback()), "restrict")
    assert "double *__restrict__ x" in p.text


def test_a_pure_counter_declared_outside_becomes_private(tmp_path, clang):
    """PolyBench style: counters declared at the top of the function."""
    text = (
        "void scale(int n, int m, double A[40][40], double beta) {\n  int i, j;\n"
        "  for (i = 0; i < n; i++)\n    for (j = 0; j < m; j++)\n      A[i][j] *= beta;\n}\n"
        "int leak(int n, double *a) {\n  int i, j;\n  for (i = 0; i < n; i++)\n"
        "    for (j = 0; j < n; j++)\n      a[i * n + j] = 0;\n  return j;\n}\n"
    )
    props = RulesMutator().propose(unit(tmp_path, text, "scale", openmp=True), Feedback())
    assert "#pragma omp parallel for private(j)" in one(props, "omp-parallel").text
    # j's last value is returned: making it private (or reordering the loops) would change it
    leak = rules_of(RulesMutator().propose(unit(tmp_path, text, "leak", openmp=True), Feedback()))
    assert not {"omp-parallel", "interchange", "tile"} & set(leak)


def test_several_parallel_for_loops_also_get_simd_all_at_once(tmp_path, clang):
    text = (
        "void update(int n, double *e, double *p, const double *w) {\n"
        "#pragma omp parallel for\n  for (int i = 0; i < n; i++)\n    e[i] += w[i];\n"
        "#pragma omp parallel for\n  for (int i = 0; i < n; i++)\n    p[i] = 0.4 * e[i];\n}\n"
    )
    props = [
        p
        for p in RulesMutator().propose(unit(tmp_path, text, "update", openmp=True), Feedback())
        if p.rule == "omp-simd"
    ]
    assert [p.description for p in props] == [
        "omp ... for simd on all 2 such loops in update",
        "omp parallel for simd on the i loop at line 2 in update",
        "omp parallel for simd on the i loop at line 5 in update",
    ]
    assert props[0].text.count("#pragma omp parallel for simd\n") == 2
    assert [p.text.count(" simd") for p in props[1:]] == [1, 1] and props[1].text != props[2].text


def test_a_unit_s_own_wrapper_of_a_math_function_counts_as_math(tmp_path, clang):
    """LULESH writes ``SQRT(x)`` for its own ``inline real8 SQRT(real8 arg) { return sqrt(arg) ; }``:
    a pure wrapper is as safe in a loop as ``sqrt``; one that writes a global is not."""
    text = (
        "#include <math.h>\ntypedef double real8;\n"
        "static inline real8 SQRT(real8 arg) { return sqrt(arg) ; }\n"
        "static double calls_made;\nstatic inline double counted(double x) { calls_made += 1; return sqrt(x); }\n"
        "void norm(int n, double *a) {\n#pragma omp parallel for\n"
        "  for (int i = 0; i < n; i++)\n    a[i] = SQRT(a[i] * a[i] + 1.0);\n}\n"
        "void tally(int n, double *a) {\n#pragma omp parallel for\n"
        "  for (int i = 0; i < n; i++)\n    a[i] = counted(a[i]);\n}\n"
    )
    norm = RulesMutator().propose(unit(tmp_path, text, "norm", openmp=True), Feedback())
    assert "#pragma omp parallel for simd\n" in one(norm, "omp-simd").text
    tally = RulesMutator().propose(unit(tmp_path, text, "tally", openmp=True), Feedback())
    assert "omp-simd" not in rules_of(tally)


def test_loops_beyond_the_analysis_are_left_alone(tmp_path, clang):
    """A store through a pointer derived in the loop, a call that may write anything, a
    jump out of the loop, a written array read under another name: the rules do not guess."""
    text = (
        "void log_row(double *);\n"
        "void rows(int n, double *c) {\n  for (int i = 0; i < n; i++) {\n    double *row = c + i * n;\n"
        "    for (int j = 0; j < n; j++)\n      row[j] = 1.0;\n  }\n}\n"
        "void calls(int n, double *c) {\n  for (int i = 0; i < n; i++) {\n    c[i] = 2.0;\n"
        "    log_row(c);\n  }\n}\n"
        "void stops(int n, double *c) {\n  for (int i = 0; i < n; i++) {\n    if (c[i] < 0) break;\n"
        "    c[i] = 2.0;\n  }\n}\n"
        "void ahead(int n, double *c) {\n  double *d = c + 1;\n  for (int i = 0; i < n; i++)\n"
        "    c[i] = d[i] + (c + 1)[i];\n}\n"
    )
    for fn in ("rows", "calls", "stops", "ahead"):
        props = RulesMutator().propose(unit(tmp_path, text, fn, openmp=True), Feedback())
        assert not {"omp-parallel", "omp-simd", "interchange", "tile", "scalar-replace"} & set(rules_of(props)), fn


@pytest.mark.parametrize("original_best", [1e3, 1e-3])
def test_a_child_clearly_slower_with_the_inherited_settings_is_cut(recorded, server, original_best, tmp_path):
    """A rewrite is measured first with the original's best settings; one that is clearly
    slower than the original's best then (every child against 1000x) stops there, and the
    evaluations it did not use go back to the original's search at once; one in the
    running (every child against 0.001x) gets its whole inner study, and is kept as a
    pattern for later kernels with its gain over the original's best."""
    ws = Workspace(recorded)
    target = Target(kernel="dot", captures=[capture_of(recorded, "dot")], source_variant="cut-%g" % original_best)
    facts = kernel_facts(target, cores=1)
    space = Space(facts)
    inherit = [space.defaults(), space.adopt({"noalias": True})]
    options = RemixOptions(budget=12, child_budget=4, seed=1, pairs=3)
    patterns = Patterns(Workspace(str(tmp_path)))
    remix = Remix(ws, storage(ws), target, facts, RulesMutator(), options, patterns, inherit=inherit)
    given_back = []
    remix.run([server], original_best, extend=given_back.append)
    measured = [c for c in remix.children if c.status == OK]
    assert measured
    kept = {e["id"]: e for e in patterns.entries()}
    if original_best > 1:
        assert not kept  # no child beat the original's best: nothing to inherit
    else:
        assert set(kept) == {c.id for c in measured}
        for child in measured:
            assert kept[child.id]["rule"] == child.rule
            assert kept[child.id]["gain"] == pytest.approx(child.speedup / original_best, rel=1e-3)
    for child in measured[:-1]:
        if original_best > 1:
            assert child.cut.startswith("cut after the original's best settings")
            assert child.evaluations == 1 + len(inherit)  # its check, then the inherited settings
        else:
            assert not child.cut and child.evaluations == 1 + options.child_budget
    # The loop spent its budget exactly (the last child gets what is left of it), and what
    # the children left went back to the original's search.
    assert measured[-1].evaluations <= 1 + options.child_budget
    assert remix.spent() == options.budget
    assert sum(given_back) == remix.extended
    if original_best > 1:  # a cut child's unused evaluations went back as soon as it was cut
        assert given_back[0] == 1 + options.child_budget - (1 + len(inherit))


def test_the_rewrites_a_child_makes_possible_come_right_after_it(recorded, server):
    """matmul's interchange to i,k,j is cut (every child is, against 1000x), but the
    unroll-and-jam it makes possible, which matmul itself does not offer, is its next child,
    ahead of the original's other rewrites."""
    ws = Workspace(recorded)
    target = Target(kernel="matmul", captures=[capture_of(recorded, "matmul")], source_variant="follow-ups")
    facts = kernel_facts(target, cores=1)
    options = RemixOptions(budget=14, child_budget=4, seed=1, pairs=3)
    remix = Remix(ws, storage(ws), target, facts, RulesMutator(), options, inherit=[Space(facts).defaults()])
    remix.run([server], 1000.0)  # (no original's search to give cut children's budget back to)
    kids = remix.children
    at = next(i for i, c in enumerate(kids) if c.description.startswith("interchange j,k"))
    assert kids[at].cut and kids[at + 1].parent == kids[at].id
    assert kids[at + 1].rules == ("interchange", "unroll-and-jam") and kids[at + 1].status == OK
    assert "unroll-and-jam" not in [c.rule for c in kids[:at]]
    # Each child's check, at the baseline settings, is a trial of its study: a candidate for
    # the winner like the study's own (cut or not, a child may be fastest there). Not where
    # the check ran with more threads than the baseline settings give (omp-parallel).
    for child, study in remix.studies():
        checks = [t for t in study.trials() if t.user_attrs.get("check")]
        assert child.evaluations == len(study.trials()) + (child.rule == "omp-parallel")
        if child.rule != "omp-parallel":
            assert len(checks) == 1 and checks[0].user_attrs["evaluation"]["speedup"] == child.check_speedup
            assert study.space.variant(checks[0].params, study.target.base).pipeline == Pipeline()


def test_rewrites_that_won_on_earlier_kernels_are_proposed_first_larger_gain_first(recorded, tmp_path):
    """Pattern inheritance: the rules that beat an earlier kernel's best settings lead the
    next kernel's rewrites, in the order of their gains; the rest follow in the order
    first_to_try gives any rewrites. A gain within noise is no pattern, and neither is an entry of an older workspace that
    kept the speedup over the build alone (dot's every child read 9-12x that way)."""
    patterns = Patterns(Workspace(str(tmp_path)))
    facts = kernel_facts(Target(kernel="dot", captures=[capture_of(recorded, "dot")]), cores=1)

    def won(rule, gain):
        child = Child(rule + "-id", ORIGINAL, (rule,), "a %s rewrite" % rule, "--- a\n+++ b\n", speedup=3.0 * gain)
        return patterns.add("dot", child, facts, gain)

    assert won("restrict", 1.1) and won("unroll-pragma", 1.4)
    assert not won("omp-simd", 1.02)  # within noise
    with open(patterns.path) as f:
        entries = json.load(f)["patterns"]
    entries.append({"kernel": "old", "id": "old", "rule": "tile", "speedup": 12.0, "patch": ""})
    with open(patterns.path, "w") as f:
        json.dump({"patterns": entries}, f)
    assert patterns.rule_ranking() == {"unroll-pragma": 1.4, "restrict": 1.1}
    assert [e["rule"] for e in patterns.examples("matmul")] == ["unroll-pragma", "restrict"]

    target = Target(kernel="matmul", captures=[capture_of(recorded, "matmul")], source_variant="inherits")
    facts = kernel_facts(target, cores=1)
    remix = Remix(
        Workspace(recorded),
        storage(Workspace(recorded)),
        target,
        facts,
        RulesMutator(),
        RemixOptions(budget=1),
        patterns,
    )
    ranked = [p.rule for _, p in remix._proposals(None, 1.0)]
    plain = rules_of(RulesMutator().propose(source(recorded, "matmul"), Feedback()))
    assert ranked[:2] == ["unroll-pragma", "restrict"]  # each winning rule's first rewrite, larger gain first
    assert sorted(ranked) == sorted(plain)  # the same rewrites; the others in first_to_try's order


@pytest.mark.parametrize(
    "body",
    [
        "for (int j = 0; j < n; j++) { s += p[3 * j]; p[3 * j + 1] = 0.0; }",  # the array is written
        "for (int j = 0; j < n; j++) if (j % 2) s += p[3 * j] + p[3 * j + 2];",  # a read that may not happen
        "for (int j = 0; j < n; j++) s += p[3 * j] + p[3 * j + 3];",  # a column beyond the stride
        "for (int j = 0; j < n - 1; j++) s += p[3 * j] + p[3 * j + 2];",  # rows up to a bound that is not fixed
        "n = n / 2; for (int j = 0; j < n; j++) s += p[3 * j] + p[3 * j + 2];",  # a bound the body changes
        "for (int j = 0; j < n; j++) { if (p[3 * j] < 0) break; s += p[3 * j + 2]; }",  # a jump out
        "for (int j = 0; j < n; j++) s += use(p) + p[3 * j] + p[3 * j + 2];",  # the pointer itself escapes
        "for (int j = 0; j < n; j++) s += p[j] * p[3 * j + 2];",  # not strided everywhere
    ],
)
def test_stage_is_refused_where_the_copy_could_differ_from_what_the_kernel_reads(tmp_path, clang, body):
    text = (
        "double use(double *);\ndouble k(int n, double *p)\n{\n    double s = 0.0;\n    %s\n    return s;\n}\n" % body
    )
    assert "stage" not in rules_of(RulesMutator().propose(unit(tmp_path, text, "k"), Feedback()))
    fine = text.replace(body, "for (int j = 0; j < n; j++) s += p[3 * j] + p[3 * j + 2];")
    assert "stage" in rules_of(RulesMutator().propose(unit(tmp_path, fine, "k"), Feedback()))


def test_children_also_try_the_best_settings_with_reassociation_and_without_polly():
    best = [{"opt": "3", "polly": True, "polly_tile": 16, "fast_math": "none"}, {"opt": "2", "fast_math": "contract"}]
    relaxed = {"opt": "3", "polly": True, "polly_tile": 16, "fast_math": "reassoc+contract+nsz+arcp"}
    assert inherited_settings(best) == best + [
        relaxed,
        {"opt": "3", "polly": False, "fast_math": "reassoc+contract+nsz+arcp"},
    ]
    reassociates = [{"opt": "3", "fast_math": "reassoc+contract"}]
    assert inherited_settings(reassociates) == reassociates  # it reassociates already, without Polly
    exact = [{"opt": "3", "noalias": True, "polly": True}]  # no tolerance: no fast-math setting at all
    assert inherited_settings(exact) == exact + [{"opt": "3", "noalias": True, "polly": False}]
    # Without Polly, the loop optimizations its code did without are back as the -O level does them.
    polly_alone = [
        {
            "opt": "s",
            "vectorize": "off",
            "slp": "off",
            "unroll": "on",
            "polly": True,
            "polly_vec": "stripmine",
            "fast_math": "reassoc+contract",
        }
    ]
    assert inherited_settings(polly_alone)[-1] == {
        "opt": "s",
        "vectorize": "default",
        "slp": "default",
        "unroll": "on",
        "polly": False,
        "fast_math": "reassoc+contract",
    }
    assert inherited_settings([]) == []

"""Rewrites for the shapes that lost in issue 46: stencils under a time loop, adjacent
loops, a statement sequence, a reduction over a nest; and Polly's scheduler options.

The kernels are our own (scripts/kernels46/shapes.c, the same the benchmark runs),
recorded once at a small size. Where a rule applies, its rewrite is proved by replaying
it against the recording (compiled, run, every output compared), with its knobs at
values that leave partial tiles; where it does not, the rule says why (``Refused``).
Tests never assert a speedup.
"""

import dataclasses
import os

import pytest

from spack_r3.data import OK, Variant
from spack_r3.compile.pipeline import format_spec, parse
from spack_r3.replay.server import ReplayServer
from spack_r3.search.mutators import Feedback
from spack_r3.search.mutators import stencils
from spack_r3.search.mutators.loops import Function, Refused
from spack_r3.search.mutators.ruleset import RulesMutator
from spack_r3.search.remix import by_class_in_turn

from test_record_replay import capture_of, recorded_workspace
from test_rules import one, replays, rules_of, source, unit
from conftest import REPO_ROOT

KERNELS = os.path.join(REPO_ROOT, "scripts", "kernels46")
MAKEFILE = (
    "prog: main.o shapes.o\n\t$(CC) -O2 -fopenmp -o $@ main.o shapes.o -lm\n"
    "%.o: %.c\n\t$(CC) -O2 -fopenmp -DN=40 -DSTEPS=5 -c -o $@ $<\n"
)
SHAPES = ("jacobi2d", "heat3d", "fdtd2d", "seidel2d", "chain2", "syrk_lower", "frobenius")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, clang):
    files = {name: open(os.path.join(KERNELS, name)).read() for name in ("shapes.c", "main.c")}
    return recorded_workspace(tmp_path_factory, "shapes46", dict(files, Makefile=MAKEFILE), SHAPES)


@pytest.fixture(scope="module")
def server(recorded):
    with ReplayServer(cache_dir=os.path.join(recorded, "cache")) as s:
        yield s


def proposals(ws, kernel, **changes):
    src = dataclasses.replace(source(ws, kernel), **changes)
    return src, RulesMutator().propose(src, Feedback())


def test_time_tiles_of_jacobi_skew_by_two_and_shift_the_copy_back_by_one(recorded, server):
    """The sweep of row i reads rows i-1..i+1 of a; the copy-back writes row i of a: it runs
    one row behind the sweep, and a step's rows two positions behind the step before."""
    src, props = proposals(recorded, "jacobi2d")
    p = one(props, "time-tile")
    assert p.description == "time-tile t over 2 row loops in jacobi2d (skew 2, shifts 0,1; R3_TT_1, R3_TI_1)"
    assert p.knobs == {"R3_TT_1": (8, 4, 16, 32), "R3_TI_1": (32, 16, 64, 128)}
    replays(recorded, server, src, p, knobs={"R3_TT_1": 2, "R3_TI_1": 5})  # 5 steps, 38 rows: partial tiles
    replays(recorded, server, src, p)
    w = one(props, "wavefront")
    assert "#pragma omp parallel for schedule(dynamic)\n" in w.text
    replays(recorded, server, src, w, knobs={"R3_TT_1": 2, "R3_TI_1": 4}, verify_runs=3)
    # a time-tiling rewrite leads the remix's rewrites of a stencil
    assert by_class_in_turn(props)[0].rule in ("wavefront", "time-tile")


@pytest.mark.parametrize("kernel, skew", [("heat3d", 2), ("fdtd2d", 1), ("seidel2d", 1)])
def test_time_tiles_and_wavefronts_of_other_stencils(recorded, server, kernel, skew):
    """3-D heat (two buffers in turn), an FDTD-like leapfrog of three fields, and Gauss-Seidel's
    in-place sweep, whose dependences within a step leave it the wavefront as its parallelism."""
    src, props = proposals(recorded, kernel)
    p = one(props, "time-tile")
    assert "(skew %d" % skew in p.description
    replays(recorded, server, src, p, knobs={"R3_TT_1": 3, "R3_TI_1": 7})
    replays(recorded, server, src, one(props, "wavefront"), knobs={"R3_TT_1": 2, "R3_TI_1": 3}, verify_runs=3)
    if kernel == "seidel2d":  # its rows depend on each other: no other parallel loop
        assert "omp-parallel" not in rules_of(props)


def test_fusion_of_the_sweep_and_its_copy_back(recorded, server):
    src, props = proposals(recorded, "jacobi2d")
    p = one(props, "fuse")
    assert p.description == "fuse the i loops at lines 21 and 24 in jacobi2d (the second shifted by 1)"
    assert "int i = r3_p - 1;" in p.text
    replays(recorded, server, src, p)


def test_fusion_of_two_products_of_a_chain_and_distribution_of_a_rank_k_update(recorded, server):
    src, props = proposals(recorded, "chain2")
    p = one(props, "fuse")
    assert "shifted" not in p.description  # row i of tmp is all that row i of d reads
    replays(recorded, server, src, p)
    src, props = proposals(recorded, "syrk_lower")
    d = one(props, "distribute")
    assert d.description == "distribute the i loop at line 110 in syrk_lower into 2"
    replays(recorded, server, src, d)


def test_a_parallel_outer_loop_with_a_reduction_within_a_tolerance(recorded, server):
    """The sum of squares over a nest: ``reduction(+:s)`` on the outer loop reorders the
    sum, so it is offered only where the kernel's tolerance allows relaxing FP."""
    exact, props = proposals(recorded, "frobenius")
    assert "omp-parallel" not in rules_of(props)
    src, props = proposals(recorded, "frobenius", tolerance=1e-9)
    p = one(props, "omp-parallel")
    assert "#pragma omp parallel for reduction(+:s)\n    for (int i = 0;" in p.text
    replays(recorded, server, src, p, tolerance=1e-9, verify_runs=3)


# ---- what the rules refuse, and why (texts alone)

REFUSED = r"""
#define N 64
void swap_steps(int steps, int n, double a[N][N], double b[N][N]) {
  for (int t = 0; t < steps; t++) {
    for (int i = 1; i < n - 1; i++)
      for (int j = 1; j < n - 1; j++)
        b[i][j] = 0.5 * (a[i - 1][j] + a[i + 1][j]);
    n = n - 1;
  }
}
void by_step(int steps, int n, double a[N][N]) {
  for (int t = 1; t < steps; t++)
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++)
        a[t][j] += a[t - 1][j] * 0.5;
}
void mirror(int steps, int n, double a[N][N]) {
  for (int t = 0; t < steps; t++)
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++)
        a[i][j] = a[n - 1 - i][j] * 0.5;
}
void residual(int steps, int n, double a[N][N], double *r) {
  double s = 0.0;
  for (int t = 0; t < steps; t++)
    for (int i = 1; i < n - 1; i++)
      for (int j = 0; j < n; j++) {
        s += a[i][j];
        a[i][j] = 0.5 * (a[i - 1][j] + a[i + 1][j]);
      }
  *r = s;
}
void backward(int n, double *a, double *b, const double *c) {
  for (int i = 1; i < n; i++) {
    a[i] = b[i - 1] * 2.0;
    b[i] = c[i] + 1.0;
  }
}
void forward(int n, double *a, double *b, const double *c) {
  for (int i = 1; i < n; i++) {
    b[i] = c[i] + 1.0;
    a[i] = b[i - 1] * 2.0;
  }
}
"""


def refusal(tmp_path, function, rule):
    fn = Function(unit(tmp_path, REFUSED, function, openmp=True))
    loop = fn.loops()[0]
    with pytest.raises(Refused) as err:
        rule(fn, loop)
    return str(err.value)


def test_time_tiling_refuses_what_is_not_a_stencil_under_a_time_loop(tmp_path, clang):
    tile = lambda fn, loop: stencils.tiled(fn, loop, parallel=True)  # noqa: E731
    assert refusal(tmp_path, "swap_steps", tile) == "the t loop's body holds a statement that is not a loop over rows"
    assert refusal(tmp_path, "by_step", tile) == "a moves with t: not a time loop"
    assert refusal(tmp_path, "mirror", tile) == "a is accessed without i + c in a subscript"
    assert refusal(tmp_path, "residual", tile) == "s is carried from one iteration to the next"
    for fn in ("swap_steps", "by_step", "mirror", "residual"):
        props = RulesMutator().propose(unit(tmp_path, REFUSED, fn, openmp=True), Feedback())
        assert not {"time-tile", "wavefront"} & set(rules_of(props)), fn


def test_distribution_refuses_a_backward_dependence(tmp_path, clang):
    """a[i] reads b[i-1], which the next statement writes one iteration earlier: with the
    statements in loops of their own, a would read b before it is written."""
    assert (
        refusal(tmp_path, "backward", stencils._distribute)
        == "statement 2 of the i loop touches what statement 1 touched in a later iteration"
    )
    props = RulesMutator().propose(unit(tmp_path, REFUSED, "backward"), Feedback())
    assert "distribute" not in rules_of(props)
    fwd = one(RulesMutator().propose(unit(tmp_path, REFUSED, "forward"), Feedback()), "distribute")
    assert fwd.description == "distribute the i loop at line 40 in forward into 2"
    assert "    b[i] = c[i] + 1.0;\n  }\n  for (int i = 1; i < n; i++) {\n    a[i] = b[i - 1] * 2.0;\n  }" in fwd.text


def test_wavefront_needs_openmp(tmp_path, clang):
    props = RulesMutator().propose(
        unit(tmp_path, open(os.path.join(KERNELS, "shapes.c")).read(), "seidel2d"), Feedback()
    )
    assert "time-tile" in rules_of(props) and "wavefront" not in rules_of(props)


# ---- Polly's scheduler options


def test_polly_scheduler_options_round_trip_and_replay_verified(recorded, polly):
    spec = "O3,polly=1,polly_parallel=1,polly_fusion=1,polly_coincidence=1,polly_tile2=1,polly_regtile=1"
    p = parse(spec)
    assert format_spec(p) == spec and p.polly_parallel and p.polly_regtile
    assert "polly_fusion" not in parse("O3,polly=1").to_json()  # older variants read the same
    with pytest.raises(Exception) as err:
        parse("O3,polly_fusion=1")
    assert "need polly=1" in str(err.value)
    with ReplayServer() as server:
        for kernel, spec in (
            ("jacobi2d", "O3,polly=1,polly_parallel=1,polly_fusion=1"),
            ("chain2", "O3,polly=1,polly_matmul=0,polly_tile2=1,polly_regtile=1"),
            ("seidel2d", "O3,polly=1,polly_coincidence=1"),
        ):
            ev = server.submit(capture_of(recorded, kernel), Variant(pipeline=parse(spec)), repeat=1, verify_runs=2)
            assert ev.status == OK and ev.verified, (kernel, spec, ev.diagnostics)


def test_rows_of_a_flat_index_and_counters_declared_at_the_top(tmp_path, clang):
    """``a[(i - 1) * n + j]`` names row i-1 as ``A[i - 1][j]`` does; PolyBench-style counters
    declared at the top become the wavefront's private ones (t and i are declared anew)."""
    text = (
        "void flat(int steps, int n, double *restrict a, double *restrict b) {\n  int t, i, j;\n"
        "  for (t = 0; t < steps; t++) {\n    for (i = 1; i < n - 1; i++)\n      for (j = 1; j < n - 1; j++)\n"
        "        b[i * n + j] = 0.25 * (a[(i - 1) * n + j] + a[(i + 1) * n + j] + a[i * n + j - 1]);\n"
        "    for (i = 1; i < n - 1; i++)\n      for (j = 1; j < n - 1; j++)\n        a[i * n + j] = b[i * n + j];\n"
        "  }\n}\n"
    )
    props = RulesMutator().propose(unit(tmp_path, text, "flat", openmp=True), Feedback())
    w = one(props, "wavefront")
    assert (
        w.description == "wavefront of time tiles of t over 2 row loops in flat (skew 2, shifts 0,1; R3_TT_1, R3_TI_1)"
    )
    assert "#pragma omp parallel for schedule(dynamic) private(j)\n" in w.text
    assert "for (int t = r3_t0 + r3_T * R3_TT_1;" in w.text and "int i = (r3_p - 2 * (long)t) - 1;" in w.text
    assert one(props, "fuse").description == "fuse the i loops at lines 4 and 7 in flat (the second shifted by 1)"


def test_a_loop_that_ends_in_a_macros_arguments_is_rewritten_with_them(tmp_path, clang):
    """PolyBench writes its constants through a function-like macro, so the sweep's
    statement ends inside one (``/ SCALAR_VAL(9.0);``): the loop's text ends after the
    call, and the rules rewrite it as they would without the macro."""
    text = (
        "#define SCALAR_VAL(x) x\n"
        "void seidel(int tsteps, int n, double A[100][100])\n{\n"
        "  for (int t = 0; t <= tsteps - 1; t++)\n"
        "    for (int i = 1; i <= n - 2; i++)\n"
        "      for (int j = 1; j <= n - 2; j++)\n"
        "        A[i][j] = (A[i-1][j] + A[i][j-1] + A[i][j] + A[i][j+1] + A[i+1][j]) / SCALAR_VAL(5.0);\n"
        "}\n"
    )
    props = RulesMutator().propose(unit(tmp_path, text, "seidel"), Feedback())
    assert {"time-tile", "unroll-pragma"} <= set(rules_of(props))
    for p in props:  # the call kept whole: once, or once per copy of the body
        copies = 2 if p.rule == "unroll-and-jam" else 1  # a block's copy and the remainder's
        assert p.text.count("SCALAR_VAL(5.0);") == copies
        assert p.text.count("SCALAR_VAL(5.0)") == copies

"""Time tiling and wavefronts on stencils written as public benchmark suites write them
(issue 46, public code): counters declared at the top of the function, ``<=`` bounds,
constants through a function-like macro, static kernels; Gauss-Seidel's 9-point in-place
sweep; Jacobi's two stencils per step (B from A, then A from B); 3-D heat the same way; an
FDTD step that also sets a boundary row from a per-step source.

The kernels are our own, written in that style and recorded once at a small size. The shift
and skew come from the dependences the accesses name (not from the kernel's name): each
description says which. Where a rule applies, its rewrite is replayed against the recording
with exact comparison (no tolerance: bit for bit), its knobs at values that leave partial
tiles and at their defaults, a wavefront verified several times with threads; where it does
not, the rule says why.
"""

import os

import pytest

from spack_r3.replay.server import ReplayServer
from spack_r3.search.mutators import Feedback
from spack_r3.search.mutators import stencils
from spack_r3.search.mutators.loops import Function, Refused
from spack_r3.search.mutators.ruleset import RulesMutator

from test_record_replay import recorded_workspace
from test_rules import one, replays, rules_of, source, unit

FORMS_C = r"""
#include <stdio.h>
#define SCALAR(x) x
#define N 26
#define STEPS 5

static void seidel9(int tsteps, int n, double A[N][N])
{
  int t, i, j;
  for (t = 0; t <= tsteps - 1; t++)
    for (i = 1; i <= n - 2; i++)
      for (j = 1; j <= n - 2; j++)
        A[i][j] = (A[i-1][j-1] + A[i-1][j] + A[i-1][j+1]
                   + A[i][j-1] + A[i][j] + A[i][j+1]
                   + A[i+1][j-1] + A[i+1][j] + A[i+1][j+1]) / SCALAR(9.0);
}

static void jacobi_pair(int tsteps, int n, double A[N][N], double B[N][N])
{
  int t, i, j;
  for (t = 0; t < tsteps; t++) {
    for (i = 1; i < n - 1; i++)
      for (j = 1; j < n - 1; j++)
        B[i][j] = SCALAR(0.2) * (A[i][j] + A[i][j-1] + A[i][1+j] + A[1+i][j] + A[i-1][j]);
    for (i = 1; i < n - 1; i++)
      for (j = 1; j < n - 1; j++)
        A[i][j] = SCALAR(0.2) * (B[i][j] + B[i][j-1] + B[i][1+j] + B[1+i][j] + B[i-1][j]);
  }
}

static void heat_pair(int n, double A[N][N][N], double B[N][N][N])
{
  int t, i, j, k;
  for (t = 1; t <= STEPS; t++) {
    for (i = 1; i < n - 1; i++)
      for (j = 1; j < n - 1; j++)
        for (k = 1; k < n - 1; k++)
          B[i][j][k] = SCALAR(0.125) * (A[i+1][j][k] - SCALAR(2.0) * A[i][j][k] + A[i-1][j][k])
                       + SCALAR(0.125) * (A[i][j+1][k] - SCALAR(2.0) * A[i][j][k] + A[i][j-1][k])
                       + A[i][j][k];
    for (i = 1; i < n - 1; i++)
      for (j = 1; j < n - 1; j++)
        for (k = 1; k < n - 1; k++)
          A[i][j][k] = SCALAR(0.125) * (B[i+1][j][k] - SCALAR(2.0) * B[i][j][k] + B[i-1][j][k])
                       + SCALAR(0.125) * (B[i][j+1][k] - SCALAR(2.0) * B[i][j][k] + B[i][j-1][k])
                       + B[i][j][k];
  }
}

static void fdtd_edge(int tmax, int nx, int ny, double ex[N][N], double ey[N][N], double hz[N][N],
                      double *source)
{
  int t, i, j;
  for (t = 0; t < tmax; t++) {
    for (j = 0; j < ny; j++)
      ey[0][j] = source[t];
    for (i = 1; i < nx; i++)
      for (j = 0; j < ny; j++)
        ey[i][j] = ey[i][j] - SCALAR(0.5) * (hz[i][j] - hz[i-1][j]);
    for (i = 0; i < nx; i++)
      for (j = 1; j < ny; j++)
        ex[i][j] = ex[i][j] - SCALAR(0.5) * (hz[i][j] - hz[i][j-1]);
    for (i = 0; i < nx - 1; i++)
      for (j = 0; j < ny - 1; j++)
        hz[i][j] = hz[i][j] - SCALAR(0.7) * (ex[i][j+1] - ex[i][j] + ey[i+1][j] - ey[i][j]);
  }
}

static double A2[N][N], B2[N][N], C2[N][N], A3[N][N][N], B3[N][N][N], src[STEPS];

int main(void)
{
  double s = 0.0;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      A2[i][j] = (i * (j + 2) % 7) / 7.0;
      B2[i][j] = (i * (j + 3) % 5) / 5.0;
      C2[i][j] = ((i + 1) * j % 11) / 11.0;
      for (int k = 0; k < N; k++)
        A3[i][j][k] = B3[i][j][k] = ((i + j + k) % 13) / 13.0;
    }
  for (int t = 0; t < STEPS; t++)
    src[t] = t * 0.25;
  seidel9(STEPS, N, A2);
  jacobi_pair(STEPS, N, A2, B2);
  heat_pair(N, A3, B3);
  fdtd_edge(STEPS, N - 2, N, A2, B2, C2, src);  /* nx below the rows: bounds differ */
  for (int i = 0; i < N; i++)
    s += A2[i][i] + B2[i][N - 1 - i] + C2[i][i] + A3[i][i][i];
  printf("%.17g\n", s);
  return 0;
}
"""

MAKEFILE = "prog: forms.c\n\t$(CC) -O2 -fopenmp -o $@ forms.c -lm\n"
FORMS = ("seidel9", "jacobi_pair", "heat_pair", "fdtd_edge")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, clang):
    return recorded_workspace(tmp_path_factory, "forms46", {"forms.c": FORMS_C, "Makefile": MAKEFILE}, FORMS)


@pytest.fixture(scope="module")
def server(recorded):
    with ReplayServer(cache_dir=os.path.join(recorded, "cache")) as s:
        yield s


@pytest.mark.parametrize(
    "kernel, what",
    [
        # rows i-1 (new) and i+1 (old) of the same step: a step's row i waits for the last
        # step's row i+1, so skew 1
        ("seidel9", "t over 1 row loop in seidel9 (skew 1;"),
        # A from B reads B's row i+1: the second stencil one row behind; B from A of the next
        # step reads A's row i+1, written one row behind: skew 2
        ("jacobi_pair", "t over 2 row loops in jacobi_pair (skew 2, shifts 0,1;"),
        ("heat_pair", "t over 2 row loops in heat_pair (skew 2, shifts 0,1;"),
        # the boundary row 0 is one instance; hz reads ey's row i+1: one row behind
        ("fdtd_edge", "t over 3 row loops and 1 one-row statement in fdtd_edge (skew 1, shifts 0,0,0,1;"),
    ],
)
def test_time_tiles_and_wavefronts_of_benchmark_suite_stencils_replay_bit_for_bit(recorded, server, kernel, what):
    src, props = source(recorded, kernel), None
    assert src.tolerance is None  # exact comparison: no tolerance was given
    props = RulesMutator().propose(src, Feedback())
    tile, wave = one(props, "time-tile"), one(props, "wavefront")
    assert tile.description.startswith("time-tile " + what), tile.description
    assert wave.description.startswith("wavefront of time tiles of " + what), wave.description
    assert "#pragma omp parallel for schedule(dynamic) private(j" in wave.text  # counters of the top
    knobs = dict(zip(tile.knobs, (2, 5)))  # 5 steps, 24 rows: partial tiles both ways
    replays(recorded, server, src, tile, knobs=knobs)
    replays(recorded, server, src, tile)
    replays(recorded, server, src, wave, knobs=dict(zip(wave.knobs, (2, 3))), verify_runs=3)
    if kernel == "seidel9":  # the wavefront is its only parallelism
        assert "omp-parallel" not in rules_of(props)


# ---- what the skew cannot legalize, and why (texts alone)

REFUSED = r"""
#define SCALAR(x) x
#define N 64
void far(int tsteps, int n, double A[N][N])
{
  int t, i, j;
  for (t = 0; t < tsteps; t++)
    for (i = 1; i < n - 10; i++)
      for (j = 1; j < n - 1; j++)
        A[i][j] = (A[i-1][j] + A[i][j] + A[i+9][j]) / SCALAR(3.0);
}
void periodic(int tsteps, int n, double A[N][N])
{
  int t, i, j;
  for (t = 0; t < tsteps; t++) {
    for (i = 1; i < n - 1; i++)
      for (j = 1; j < n - 1; j++)
        A[i][j] = (A[i-1][j] + A[i][j] + A[i+1][j]) / SCALAR(3.0);
    for (j = 0; j < n; j++)
      A[0][j] = A[n - 2][j];
  }
}
void column(int tsteps, int n, double A[N][N], double *f)
{
  int t, i, j;
  for (t = 0; t < tsteps; t++) {
    for (i = 0; i < n; i++)
      A[i][0] = f[t];
    for (i = 1; i < n - 1; i++)
      for (j = 1; j < n - 1; j++)
        A[i][j] = (A[i-1][j] + A[i][j-1] + A[i+1][j]) / SCALAR(3.0);
  }
}
void edges_only(int tsteps, int n, double A[N][N])
{
  int t, j;
  for (t = 0; t < tsteps; t++) {
    for (j = 0; j < n; j++)
      A[0][j] = A[1][j];
    for (j = 0; j < n; j++)
      A[n - 1][j] = A[n - 2][j];
  }
}
"""


def refusal(tmp_path, function):
    fn = Function(unit(tmp_path, REFUSED, function, openmp=True))
    with pytest.raises(Refused) as err:
        stencils.tiled(fn, fn.loops()[0], parallel=True)
    props = RulesMutator().propose(unit(tmp_path, REFUSED, function, openmp=True), Feedback())
    assert not {"time-tile", "wavefront"} & set(rules_of(props)), function
    return str(err.value)


def test_time_tiling_refuses_what_a_skew_cannot_legalize(tmp_path, clang):
    # a row nine ahead: a skew of 9 rows per step would leave tiles with little reuse
    assert refusal(tmp_path, "far") == "a skew or shift beyond 8 rows"
    # a periodic boundary reads row n-2 into row 0: a dependence across the whole grid
    assert refusal(tmp_path, "periodic") == "A is accessed without a constant row in a subscript"
    # a boundary column is not a row: its elements belong to every row instance
    assert refusal(tmp_path, "column") == "the accesses of A disagree on the dimension that moves with the loop"
    # one-row statements alone: nothing to tile (row n-1 is no constant either)
    assert (
        refusal(tmp_path, "edges_only")
        == "the j loop (line 40) has no inner loop and is not one row's (it writes no one fixed row): not a space nest"
    )


@pytest.mark.parametrize("kernel, sweeps", [("jacobi_pair", 2), ("heat_pair", 2), ("fdtd_edge", 4)])
def test_each_sweep_of_a_time_loop_runs_in_parallel_and_replays_bit_for_bit(recorded, server, kernel, sweeps):
    """The time loop carries a dependence and the rows inside a sweep do not: each step's
    sweeps get ``omp parallel for`` (all of them at once first, then each alone), the steps
    stay in order. Gauss-Seidel's sweep reads the rows it writes: none (test above)."""
    src = source(recorded, kernel)
    props = [p for p in RulesMutator().propose(src, Feedback()) if p.rule == "omp-parallel"]
    together, alone = props[0], props[1:]
    assert together.description == "omp parallel for over each of the %d sweeps of a time loop in %s" % (
        sweeps,
        kernel,
    )
    assert together.text.count("#pragma omp parallel for") == sweeps
    assert len(alone) == sweeps and all(" at line " in p.description for p in alone)
    replays(recorded, server, src, together, verify_runs=3)  # a race can verify once by luck
    replays(recorded, server, src, alone[-1], verify_runs=3)

"""Rewrites for loops that carry a recurrence (issue 63): a closure's pivot hoisted out of
its row loop, and the sums of a triangular solve interchanged so the inner loop walks a
row. The kernels are our own (scripts/kernels63/shapes.c, the ones the benchmark runs),
recorded once at a small size; each rewrite is proved by replaying it against the
recording (compiled, run, every output compared bit for bit), and each refusal says why.
Tests never assert a speedup."""

import dataclasses
import os

import pytest

from spack_r3.replay.server import ReplayServer
from spack_r3.search.mutators import Feedback, nests, recurrences
from spack_r3.search.mutators.loops import Function, Refused
from spack_r3.search.mutators.ruleset import RulesMutator

from test_record_replay import recorded_workspace
from test_rules import one, proposals, replays, rules_of, unit
from conftest import REPO_ROOT

KERNELS = os.path.join(REPO_ROOT, "scripts", "kernels63")
MAKEFILE = (
    "prog: main.o shapes.o\n\t$(CC) -O2 -o $@ main.o shapes.o -lm\n"
    "%.o: %.c\n\t$(CC) -O2 -c -o $@ $<\n"  # shapes.c's and main.c's own small sizes
)
SHAPES = ("closure", "widest", "trisolve", "symm_lower", "lu", "prefix2d", "iir_cols")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, clang):
    files = {name: open(os.path.join(KERNELS, name)).read() for name in ("shapes.c", "main.c")}
    return recorded_workspace(tmp_path_factory, "shapes63", dict(files, Makefile=MAKEFILE), SHAPES)


@pytest.fixture(scope="module")
def server(recorded):
    with ReplayServer(cache_dir=os.path.join(recorded, "cache")) as s:
        yield s


@pytest.mark.parametrize("kernel, pivot", [("closure", "d[i * n + k]"), ("widest", "cap[i][k]")])
def test_a_closure_step_reads_its_pivot_once_per_row(recorded, server, kernel, pivot):
    """Floyd-Warshall's ``d[i*n+k]`` (a flat index) and a widest-path step's ``cap[i][k]``
    (read in a branch too): the row loop is split at j == k, the one iteration whose store
    may change the pivot, and the pivot is read again after it."""
    src, props = proposals(recorded, kernel)
    p = one(props, "pivot-hoist")
    assert p.description == ("hoist %s out of the j loop in %s, split where the loop stores to it" % (pivot, kernel))
    assert p.text.count("r3_pv_1 = %s;" % pivot) == 2  # before the split and after it
    replays(recorded, server, src, p)


@pytest.mark.parametrize(
    "kernel, what",
    [
        ("trisolve", "the s sums' j loop outside the r loop"),  # x[j][r], j < i, against x[i][r]
        ("symm_lower", "the s sums' k loop outside the j loop"),  # nothing the stores write is read
    ],
)
def test_the_sums_of_a_solve_and_a_symmetric_product_interchange(recorded, server, kernel, what):
    src, props = proposals(recorded, kernel)
    p = one(props, "reduction-interchange")
    assert what in p.description
    assert p.promise > 0  # the inner loop then walks a row
    assert "__builtin_free(r3_sum_1);" in p.text
    replays(recorded, server, src, p)
    # the original loop kept for a failed allocation is no loop to rewrite again
    child = dataclasses.replace(src, text=p.text)
    assert "reduction-interchange" not in rules_of(RulesMutator().propose(child, Feedback()))


def test_both_sums_of_an_lu_step_interchange(recorded, server):
    """Row i of U reads rows k < i (``a[k*n+j]``) and its own row left of the diagonal; column
    i of L reads columns k < i and the rows k < i above the diagonal: none is a written element."""
    src, props = proposals(recorded, "lu")
    found = [p for p in props if p.rule == "reduction-interchange"]
    assert len(found) == 2
    for p in found:
        replays(recorded, server, src, p)


def refusal(tmp_path, text, rule, loop_var):
    """Why ``rule`` refuses the loop over ``loop_var`` in ``f``."""
    fn = Function(unit(tmp_path, text, "f"))
    (loop,) = [loop for loop in fn.loops() if loop.name == loop_var]
    with pytest.raises(Refused) as err:
        rule(fn, loop)
    return str(err.value)


def test_what_the_pivot_rule_refuses(tmp_path, clang):
    # a second array written: the pivot may be it under another name
    assert (
        refusal(
            tmp_path,
            "void f(int n, int k, double *d, double *e) {\n  for (int j = 0; j < n; j++) {\n"
            "    d[j] = d[k] + 1.0;\n    e[j] = d[j];\n  }\n}\n",
            recurrences._pivot_hoist,
            "j",
        )
        == "not one array written"
    )
    # a scalar carried from one iteration to the next
    assert (
        refusal(
            tmp_path,
            "void f(int n, int k, double *d) {\n  double s = 0;\n  for (int j = 0; j < n; j++) {\n"
            "    s += d[k];\n    d[j] = s;\n  }\n}\n",
            recurrences._pivot_hoist,
            "j",
        )
        == "the loop carries a scalar"
    )
    # the pivot read only where a condition says so: its address may not be one to read
    assert (
        refusal(
            tmp_path,
            "void f(int n, int k, double *d) {\n  for (int j = 0; j < n; j++)\n    if (k < n) d[j] = d[k];\n}\n",
            recurrences._pivot_hoist,
            "j",
        )
        == "the pivot is read only under a condition"
    )


def test_what_the_sums_rule_refuses(tmp_path, clang):
    # x[j][r] for j <= i includes the row the stores write: an earlier r's store is read
    assert "read where another r's store may have written" in refusal(
        tmp_path,
        "void f(int n, int m, double x[8][8], double l[8][8]) {\n  for (int i = 0; i < n; i++)\n"
        "    for (int r = 0; r < m; r++) {\n      double s = 0;\n      for (int j = 0; j <= i; j++)\n"
        "        s += l[i][j] * x[j][r];\n      x[i][r] = s;\n    }\n}\n",
        recurrences._reduction_interchange,
        "r",
    )
    # the inner bounds move with r: a triangle, not a rectangle, of sums
    assert (
        refusal(
            tmp_path,
            "void f(int n, double *a, double *y) {\n  for (int r = 0; r < n; r++) {\n    double s = 0;\n"
            "    for (int j = 0; j < r; j++)\n      s += a[r * n + j];\n    y[r] = s;\n  }\n}\n",
            recurrences._reduction_interchange,
            "r",
        )
        == "the inner loop's bounds move with r"
    )


def test_the_rules_are_offered_by_the_rules_mutator(recorded):
    _, props = proposals(recorded, "closure")
    assert "pivot-hoist" in rules_of(props)


def test_a_recurrence_down_the_columns_is_interchanged_to_walk_the_rows(recorded, server):
    """A summed-area table's column pass (``s[i*w+j] += s[(i-1)*w+j]``, j outside i) carries
    its recurrence in i: with j inside, each row is one vector of independent sums. Its
    row pass (``s[i*w+j] += s[i*w+j-1]``) is unrolled and jammed across rows, so the
    chains of several rows overlap."""
    src, props = proposals(recorded, "prefix2d")
    p = one(props, "interchange", "j,i")
    assert p.promise > 0
    replays(recorded, server, src, p)
    replays(recorded, server, src, one(props, "unroll-and-jam", "i into the j loop"), knobs={"R3_UJ_1": 3})


def test_a_column_filter_is_distributed_then_interchanged(recorded, server):
    """``iir_cols`` filters each column with its sweeps inside the column loop: distributed
    first, the forward sweep's nest then interchanges (the remix's follow-up)."""
    src, props = proposals(recorded, "iir_cols")
    d = one(props, "distribute")
    child = dataclasses.replace(src, text=d.text)
    p = one(RulesMutator().propose(child, Feedback()), "interchange")
    assert p.description == "interchange j,i in iir_cols" and p.promise > 0
    replays(recorded, server, src, p)


def test_a_dependence_forward_in_one_loop_and_backward_in_the_other_keeps_the_order(tmp_path, clang):
    fn = Function(
        unit(
            tmp_path,
            "void f(int n, double a[64][64]) {\n  for (int i = 1; i < n; i++)\n"
            "    for (int j = 0; j < n - 1; j++)\n      a[i][j] = a[i - 1][j + 1] * 0.5;\n}\n",
            "f",
        )
    )
    outer, inner = [loop for loop in fn.loops()]
    with pytest.raises(Refused, match="a dependence runs forward in i and backward in j"):
        nests.pair_legal(fn, outer, inner)


ROWS_C = """#include <stdio.h>
#define N 24
/* Row i of U in the inner-product order, the sum in a scalar declared once (as
 * PolyBench's ludcmp writes it): it ends holding the last sum. */
double urow(int n, double a[N][N])
{
    int i, j, k;
    double w = 0.0;
    for (i = 0; i < n; i++)
        for (j = i; j < n; j++) {
            w = a[i][j];
            for (k = 0; k < i; k++)
                w -= a[i][k] * a[k][j];
            a[i][j] = w;
        }
    return w;
}
int main(void)
{
    static double a[N][N];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            a[i][j] = (i == j ? N : 0) + 1.0 / (i + j + 1);
    printf("%.17g %.17g\\n", urow(N - 1, a), a[5][7]);
    return 0;
}
"""


def test_a_sum_in_a_scalar_declared_before_the_loop_ends_as_it_did(tmp_path_factory, clang):
    files = {"rows.c": ROWS_C, "Makefile": "prog: rows.c\n\t$(CC) -O2 -o $@ rows.c\n"}
    ws = recorded_workspace(tmp_path_factory, "urow", files, ["urow"])
    s, props = proposals(ws, "urow")
    p = one(props, "reduction-interchange")
    assert "      w = r3_sum_1[j - r3_lo_1];" in p.text  # the scalar itself, not a new one
    with ReplayServer(cache_dir=os.path.join(ws, "cache")) as server:
        replays(ws, server, s, p)  # the return value (the last sum) compared too

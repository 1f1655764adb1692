"""The rule registry (``mutators/ruleset.py``): one row a rule, which remix, openmp and the
spending report read; the rules mutator tries C's rows' functions in the rows' order."""

import os

from conftest import REPO_ROOT
from spack_r3.search.mutators import Feedback, ruleset
from spack_r3.search.mutators.loops import Function
from spack_r3.search.mutators.ruleset import RULES, RulesMutator, rewrite_class, rule, threaded

from test_rules import KERNELS, KERNELS_C, unit
from test_rules_stencil_forms import FORMS, FORMS_C

SHAPES63 = os.path.join(REPO_ROOT, "scripts", "kernels63", "shapes.c")


def sources(tmp_path):
    with open(SHAPES63) as f:
        shapes = f.read()
    yield from (unit(tmp_path, KERNELS_C, k) for k in KERNELS)
    yield from (unit(tmp_path, FORMS_C, k, openmp=True) for k in FORMS)
    yield from (unit(tmp_path, shapes, k) for k in ("closure", "trisolve", "symm_lower"))


def test_each_rule_s_functions_propose_rewrites_of_its_own_name(tmp_path, clang):
    seen = set()
    for src in sources(tmp_path):
        fn = Function(src)
        for row in RULES:
            for propose in row.propose:
                names = {p.rule for p in propose(fn)}
                assert names <= {row.name}, (propose.__name__, names)
                seen |= names
    # the kernels reach most rows: the check above is not vacuous
    assert {"interchange", "tile", "restrict", "omp-parallel", "time-tile", "pivot-hoist"} <= seen


def test_the_mutator_tries_the_rows_in_order(tmp_path, clang):
    src = unit(tmp_path, KERNELS_C, "matmul")
    order = [r.name for r in RULES]
    names = [p.rule for p in RulesMutator().propose(src, Feedback())]
    assert names and [order.index(n) for n in names] == sorted(order.index(n) for n in names)


def test_rows_are_consistent():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))
    # a rewrite that adds threads is verified several times (a race can verify once by luck)
    assert all(r.verify_again for r in RULES if r.threads)
    assert threaded(["restrict", "omp-parallel"]) and not threaded(["restrict", "time-tile"])
    assert rewrite_class("interchange") == "loop-order" and rewrite_class("no-such-rule") == "other"
    assert rule("llm").propose == () and not rule("llm").exact
    assert ruleset.BY_NAME["reduction-interchange"].promising

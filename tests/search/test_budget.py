"""Where a kernel's budget goes: a plateaued pipeline search hands the rest to rewrites,
known wins and inherited winners are tried first, and the report says where it went.

The kernel is a two-product chain of our own (``d = (a b) c``), recorded and replayed for
real; nothing here asserts a time or a speedup.
"""

from spack_r3.data import Variant
from spack_r3.record.session import record
from spack_r3.replay.server import TIMEOUT_S, ReplayPool
from spack_r3.search.bayes import Study, storage
from spack_r3.search.mutators import KernelSource, make_mutator
from spack_r3.search.mutators.ruleset import RulesMutator
from spack_r3.search.remix import first_to_try, known_win
from spack_r3.search.results import write_report
from spack_r3.search.space import Space
from spack_r3.search.spending import CONFIRMATION, GIVEN_BACK, PIPELINES, REWRITES
from spack_r3.search.tune import TuneOptions, kernel_facts, plan_targets, plateau_patience, tune
from spack_r3.workspace import Workspace

from test_record_replay import source_tree

CHAIN_C = r"""
#define NM 24
void chain2(int n, double a[NM][NM], double b[NM][NM], double c[NM][NM], double tmp[NM][NM], double d[NM][NM])
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            tmp[i][j] = 0.0;
            for (int k = 0; k < n; k++)
                tmp[i][j] += a[i][k] * b[k][j];
        }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            d[i][j] = 0.0;
            for (int k = 0; k < n; k++)
                d[i][j] += tmp[i][k] * c[k][j];
        }
}

/* A stencil's sweep: no interchange of it makes a unit stride innermost. */
void smooth(int n, double a[NM][NM], double b[NM][NM])
{
    for (int i = 1; i < n - 1; i++)
        for (int j = 1; j < n - 1; j++)
            b[i][j] = 0.25 * (a[i - 1][j] + a[i + 1][j] + a[i][j - 1] + a[i][j + 1]);
}
"""

MAIN_C = r"""
#include <stdio.h>
#define NM 24
void chain2(int, double [NM][NM], double [NM][NM], double [NM][NM], double [NM][NM], double [NM][NM]);
static double a[NM][NM], b[NM][NM], c[NM][NM], t[NM][NM], d[NM][NM];
int main(void) {
  for (int i = 0; i < NM; i++)
    for (int j = 0; j < NM; j++) { a[i][j] = (i * 7 + j) % 5 * 0.5; b[i][j] = (i + 3 * j) % 7 * 0.25; c[i][j] = 1.0 / (i + j + 1); }
  chain2(NM, a, b, c, t, d);
  printf("%g\n", d[3][4]);
  return 0;
}
"""

MAKEFILE = "prog: main.o chain.o\n\t$(CC) -O2 -o $@ main.o chain.o\n%.o: %.c\n\t$(CC) -O2 -c -o $@ $<\n"


def chain_source(clang, function="chain2"):
    return KernelSource(
        kernel=function,
        function=function,
        filename="chain.c",
        text=CHAIN_C,
        parse_args=["-O2"],
        compile_dir="/",
        clang=clang,
    )


def test_known_wins_and_inherited_winners_are_tried_first(clang):
    """On the product chain the interchanges that put a unit stride innermost (exact: each
    element keeps its k order) come before the mutator's own order (a copy of b staged
    first); a rule that made an earlier kernel faster comes before them; an inherited
    interchange is no reason to swap a stencil's loops, where none makes a unit stride,
    and one that makes its accesses strided comes last."""
    proposals = RulesMutator().propose(chain_source(clang))
    assert proposals[0].rule == "stage"  # the mutator's own order
    order = first_to_try(proposals)
    assert [p.rule for p in order[:2]] == ["interchange", "interchange"]
    assert all(known_win(p) and "j,k" in p.description for p in order[:2])
    assert not any(known_win(p) for p in order[2:])
    inherited = first_to_try(proposals, {"scalar-replace": 1.3})
    assert inherited[0].rule == "scalar-replace" and inherited[1:3] == order[:2]

    stencil = RulesMutator().propose(chain_source(clang, "smooth"))
    assert any(p.rule == "interchange" for p in stencil) and not any(known_win(p) for p in stencil)
    assert first_to_try(stencil, {"interchange": 1.5}) == first_to_try(stencil)
    # Swapping its loops makes every access strided: that interchange is tried last.
    assert first_to_try(stencil)[-1].rule == "interchange" and first_to_try(stencil)[-1].promise < 0
    assert first_to_try(stencil, {"interchange": 1.5, "tile": 1.2})[0].rule == "tile"


def test_a_plateaued_pipeline_search_hands_the_rest_to_rewrites(clang, tmp_path_factory):
    """A study whose pipeline search has found nothing new for ``plateau_patience``
    evaluations (here: the build's code measured seven times, as a run that resumes one
    which found nothing) hands the rest of the budget to the rewrites at once, before its
    half; the kernel's result says where every evaluation went, and so does the report."""
    src = source_tree(tmp_path_factory, "budget", {"chain.c": CHAIN_C, "main.c": MAIN_C, "Makefile": MAKEFILE})
    ws = Workspace(str(tmp_path_factory.mktemp("budget-ws")))
    captures = record(ws, src, "./prog", kernels=["chain2"]).captures
    [target] = plan_targets(ws, captures, kernels=["chain2"]).targets
    options = TuneOptions(
        budget=16,
        mutator=make_mutator("rules"),
        seed=1,
        pairs=3,
        confirm_pairs=3,
        confirm_rounds=2,
        candidates=1,
        child_budget=2,
    )
    first = options.budget - round(options.budget * options.remix_share)
    flat = plateau_patience(options) + 2
    assert flat < first
    with ReplayPool(1) as pool:
        facts = kernel_facts(target, pool.cores_per_worker)
        space = Space(facts)  # the study tune opens for this kernel: the same name, resumed
        study = Study(storage(ws), target, space, sampler="tpe", seed=1, pairs=3, timeout=TIMEOUT_S)
        built = space.variant(space.defaults(), target.base)
        ev = target.submit(pool.servers[0], built, pairs=3)
        for _ in range(flat):
            study.add_evaluated(space.defaults(), Variant.from_json(built.to_json()), ev)

    [result], skipped = tune(ws, [target], options)
    assert not skipped
    spending, split = result.spending, result.spending["split"]
    assert spending["plateau"] and spending["handover"] == split[PIPELINES] == flat
    rewrites = {k: n for k, n in split.items() if k.startswith(REWRITES)}
    assert rewrites.get(REWRITES + "loop-order", 0) >= 1  # the interchange, tried first
    # Every search evaluation is accounted for, once: the pipelines', the rewrites', and what
    # the rewrites gave back; confirmation comes on top.
    assert split[PIPELINES] + split[GIVEN_BACK] + sum(rewrites.values()) == options.budget
    assert split[CONFIRMATION] >= 1

    report = open(write_report(ws, [result])["text"]).read()
    table = report[report.index("where the evaluations went") :].splitlines()
    assert table[1].split()[:3] == ["kernel", "pipelines", "given"]
    assert "loop-order" in table[1] and "confirmation" in table[1]
    row = table[3].split()
    assert row[0] == "chain2" and row[1] == str(flat) and row[-3:] == ["plateau", "at", str(flat)]

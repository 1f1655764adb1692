"""What one evaluation costs, and what it no longer pays for.

Each evaluation says where its time went (``Evaluation.stages``); a candidate whose code
was compiled before (the same module, pipeline and target: a launch-only change, a point
measured again) is loaded from the workspace's object cache instead of compiled; a
candidate clearly slower than the build, or than the search's best so far, after its first
pairs stops there (racing), marked so, and never becomes a search's best.
"""

import os

import pytest

from spack_r3.capture import list_captures
from spack_r3.data import OK, Evaluation, Launch, Variant
from spack_r3.replay import engine, worker
from spack_r3.compile.pipeline import parse
from spack_r3.replay.server import ReplayServer
from spack_r3.search.bayes import Study, Target, storage
from spack_r3.search.trials import raced_out
from spack_r3.search.space import KernelFacts, Space
from spack_r3.workspace import Workspace
from r3cli import r3

# REPS repeats an idempotent loop: a source variant with REPS=64 computes the same, 64 times over.
SCALE_C = r"""
#include <stdio.h>
#include <stdlib.h>
#ifndef REPS
#define REPS 1
#endif
void scale(long n, double *restrict a, const double *restrict b) {
    for (int r = 0; r < REPS; r++)
        for (long i = 0; i < n; i++) a[i] = 2.0 * b[i] + 1.0;
}
int main(void) {
    long n = 1 << 14;
    double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), s = 0;
    for (long i = 0; i < n; i++) b[i] = i % 7;
    for (int k = 0; k < 3; k++) scale(n, a, b);
    for (long i = 0; i < n; i++) s += a[i];
    printf("%g\n", s);
    return 0;
}
"""


@pytest.fixture(scope="module")
def scale_capture(tmp_path_factory, clang):
    """scale recorded in a fresh workspace: (workspace, capture directory)."""
    src = tmp_path_factory.mktemp("scale") / "src"
    src.mkdir()
    (src / "scale.c").write_text(SCALE_C)
    (src / "Makefile").write_text("prog: scale.c\n\t$(CC) -O3 -o $@ $<\n")
    ws = str(tmp_path_factory.mktemp("scale-ws"))
    assert r3("--workspace", ws, "record", "--source", str(src), "--run", "./prog", "--kernel", "scale") == 0
    [cap] = [c for c in list_captures(Workspace(ws)) if c.kernel == "scale"]
    return ws, os.path.join(ws, "captures", cap.id)


def compiled(ev):
    """Whether the evaluation compiled its candidate (rather than loading its object)."""
    return "codegen" in ev.stages


def test_an_evaluation_says_where_its_time_went(scale_capture, tmp_path):
    ws, cap = scale_capture
    with ReplayServer(cache_dir=str(tmp_path / "cache")) as server:
        ev = server.submit(cap, Variant(pipeline=parse("O3")), pairs=3)
    assert ev.status == OK and ev.verified, ev.diagnostics
    # the first evaluation of a capture builds its baseline too; every stage is accounted for
    for stage in ("baseline", "pipeline", "codegen", "link", "map", "restore", "verify", "timed", "check"):
        assert stage in ev.stages, stage
    assert {"process", "ipc", "other"} <= set(ev.stages)
    assert all(seconds >= 0 for seconds in ev.stages.values())
    # kept through JSON, and read by an older reader's rules (unknown keys ignored)
    assert Evaluation.from_json(dict(ev.to_json(), newer_field=1)).stages == ev.stages


def test_a_launch_only_change_reuses_the_compiled_object(scale_capture, tmp_path, monkeypatch):
    ws, cap = scale_capture
    o3, o2 = parse("O3"), parse("O2,vectorize=0")
    with ReplayServer(cache_dir=str(tmp_path / "cache")) as server:
        first = server.submit(cap, Variant(pipeline=o3), repeat=1)
        threads = server.submit(cap, Variant(pipeline=o3, launch=Launch(threads=1)), repeat=1)
        other = server.submit(cap, Variant(pipeline=o2), repeat=1)
        again = server.submit(cap, Variant(pipeline=o2), repeat=1)
    assert all(ev.status == OK for ev in (first, threads, other, again))
    assert compiled(first) and not compiled(threads) and "pipeline" not in threads.stages
    assert compiled(other) and not compiled(again) and again.code == other.code
    # with the cuts off (bench_evalcost.py's "before"), every candidate is compiled
    monkeypatch.setenv("R3_EVAL_CUTS", "0")
    with ReplayServer(cache_dir=str(tmp_path / "cache")) as server:
        assert compiled(server.submit(cap, Variant(pipeline=o3), repeat=1))


def test_a_clearly_slower_candidate_is_raced_out(scale_capture, tmp_path):
    """64 times the work at O0: every pair far below the build, so its pairs stop after the
    first RACE_AFTER; it still verified, and says it was raced out."""
    ws, cap = scale_capture
    slow = Variant(pipeline=parse("O0"), source_defines={"REPS": 64})
    with ReplayServer(cache_dir=str(tmp_path / "cache")) as server:
        raced = server.submit(cap, slow, pairs=6, race=True)
        full = server.submit(cap, slow, pairs=6)
    assert raced.status == OK and raced.verified, raced.diagnostics
    assert raced.raced_out and raced.pairs == len(raced.ratios) == worker.RACE_AFTER
    assert max(raced.ratios) < worker.RACE_BELOW
    assert full.status == OK and not full.raced_out and full.pairs == 6  # not asked to race: every pair


def test_a_candidate_clearly_below_the_search_best_is_raced_out(scale_capture, tmp_path):
    """Once a study's best is 4x the build, a new candidate races that best, not the build:
    a candidate no faster than 3x the build (every code of this loop: the build is -O3) stops
    after its first pairs, and never ranks. Asked directly, the build's own code against 4x."""
    ws, cap = scale_capture
    space = Space(KernelFacts("scale"))
    study = Study(storage(Workspace(str(tmp_path / "ws"))), Target("scale", [cap]), space)
    values = space.defaults()
    best = Evaluation(capture="cap", variant={}, speedup=4.0, ratios=[4.0] * 5, code="best")
    study.add_evaluated(values, space.variant(values), best)
    with ReplayServer(cache_dir=str(tmp_path / "cache")) as server:
        study.run([server], budget=2)
        same = server.submit(cap, Variant(pipeline=parse("O3")), pairs=6, race=4.0)
    [new] = [t for t in study.trials() if not t.user_attrs.get("check")]
    assert new.user_attrs["status"] == OK and raced_out(new)
    assert new.user_attrs["evaluation"]["pairs"] == worker.RACE_AFTER
    assert [t.user_attrs["evaluation"]["code"] for t in study.best(3)] == ["best"]
    assert same.status == OK and same.raced_out and same.pairs == worker.RACE_AFTER


def test_a_raced_out_candidate_is_never_the_best(tmp_path):
    """A raced-out trial tells the sampler its value, but neither ranks nor draws the curve."""
    space = Space(KernelFacts("k"))
    study = Study(storage(Workspace(str(tmp_path / "ws"))), Target("k", [str(tmp_path / "cap")]), space)
    values = space.defaults()

    def evaluation(ratios, code, raced):
        return Evaluation(
            capture="cap",
            variant={},
            speedup=sorted(ratios)[len(ratios) // 2],
            ratios=ratios,
            code=code,
            raced_out=raced,
        )

    study.add_evaluated(values, space.variant(values), evaluation([0.5, 0.6], "slow", True))
    assert study.best(3) == [] and study.curve() == [None]
    plain = dict(values, codegen=1)
    study.add_evaluated(plain, space.variant(plain), evaluation([0.9, 0.95, 1.0], "plain", False))
    [best] = study.best(3)
    assert best.user_attrs["evaluation"]["code"] == "plain"
    assert [t.value for t in study.trials()] == [0.55, 0.95]  # the sampler still learns both


def test_a_preempted_pair_is_measured_again_until_most_tries_were_preempted(monkeypatch):
    """On a quiet machine a preempted pair is timed again (up to MOST_RESAMPLES more tries);
    where most tries of the evaluation were preempted (every run of a long kernel on a loaded
    machine), the next would be too: pairs are kept as they come."""
    quiet = [0, 0]
    for _ in range(9):
        assert not engine.measure_again(quiet, False, 0)
    assert engine.measure_again(quiet, True, 0)  # 1 of 10 tries preempted: again
    loaded = [0, 0]
    assert [engine.measure_again(loaded, True, a) for a in range(4)] == [True, True, True, False]
    assert not engine.measure_again(loaded, True, 0)  # 5 of 5 preempted: kept
    monkeypatch.setenv("R3_EVAL_CUTS", "0")  # before the cuts: every pair up to its limit
    assert engine.measure_again(loaded, True, 0) and not engine.measure_again(loaded, True, engine.MOST_RESAMPLES)

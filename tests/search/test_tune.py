"""r3 tune: the Bayesian inner loop over compiler pipelines and launch settings.

A small program of our own with two kernels: a naive matrix product (where loop
transformations matter) and a float dot product (where floating-point relaxations
change the result). Tests read as examples: what the search space holds for a
kernel, a whole `r3 tune` run and its report, failed candidates that never rank,
and a study that survives a real kill.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

import optuna
import pytest
from optuna.trial import TrialState

from spack_r3 import cli
from spack_r3.capture import list_captures
from spack_r3.data import OK, Launch, Pipeline, Variant
from spack_r3.record.instances import COVER
from spack_r3.replay.server import ReplayPool, ReplayServer
from spack_r3.search import bayes
from spack_r3.search.bayes import Study, Target, others, storage, switch_pays
from spack_r3.search.trials import DUPLICATE, INTERRUPTED, counted, trial_variant
from spack_r3.search.confirm import Confirmed, confirm, each_server, screen
from spack_r3.search.mutators import make_mutator
from spack_r3.search.noise import INDISTINCT, MOST_FACTOR, WIN_ABOVE
from spack_r3.search.results import KernelResult, load_result, pick, result_digest, save_results
from spack_r3.search.samplers import Interleaved, make_sampler, plateau_gamma
from spack_r3.search.simplify import settings, without
from spack_r3.search.space import KernelFacts, Space
from spack_r3.search.store import journal
from spack_r3.search.tune import (
    MIN_SHARE,
    TuneOptions,
    confirm_searches,
    contenders,
    pipeline_search,
    still_climbing,
    swept,
)
from spack_r3.workspace import Workspace

from test_record_replay import source_tree
from r3cli import flags, r3, r3_subprocess

KERNELS_C = r"""
/* Sizes known at compile time keep Polly's analysis of the nest short (with sizes
   known only at run time its matrix-product optimization takes ~20 s to compile). */
#define N 48
void matmul(const double a[N][N], const double b[N][N], double c[N][N]) {
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      double s = 0.0;
      for (int k = 0; k < N; k++)
        s += a[i][k] * b[k][j];
      c[i][j] = s;
    }
}

float dot(int n, const float *x, const float *y) {
  float s = 0.0f;
  for (int i = 0; i < n; i++)
    s += x[i] * y[i];
  return s;
}
"""

MAIN_C = r"""
#include <stdio.h>
#include <stdlib.h>
void matmul(const double a[48][48], const double b[48][48], double c[48][48]);
float dot(int n, const float *x, const float *y);

int main(void) {
  int n = 48, m = 100000;
  double *a = malloc(n * n * sizeof(double)), *b = malloc(n * n * sizeof(double)), *c = malloc(n * n * sizeof(double));
  float *x = malloc(m * sizeof(float)), *y = malloc(m * sizeof(float));
  for (int i = 0; i < n * n; i++) { a[i] = (i % 7) * 0.25 + 1.0 / (i + 1); b[i] = (i % 5) * 0.5 - 1.0 / (i + 3); }
  for (int i = 0; i < m; i++) { x[i] = (float)(i % 97) / 13.0f + 1.0f / (i + 1); y[i] = (float)(i % 31) / 7.0f - 0.5f; }
  for (int r = 0; r < 3; r++) matmul((const double (*)[48])a, (const double (*)[48])b, (double (*)[48])c);
  float s = dot(m, x, y);
  printf("c[0]=%g c[last]=%g dot=%g\n", c[0], c[n * n - 1], s);
  return 0;
}
"""

W = min(2, len(os.sched_getaffinity(0)))  # workers (r3 tune refuses more than it has CPUs)
MAKEFILE = "prog: main.o kernels.o\n\t$(CC) -O2 -o $@ main.o kernels.o\n%.o: %.c\n\t$(CC) -O2 -c -o $@ $<\n"


@pytest.fixture(scope="module")
def program(tmp_path_factory, clang):
    return source_tree(tmp_path_factory, "tune", {"kernels.c": KERNELS_C, "main.c": MAIN_C, "Makefile": MAKEFILE})


def tune_matmul(ws, program, **options):
    """`r3 tune` of the program's matmul as these tests run it: quick settings, which
    ``options`` add to or override (None: left out)."""
    quick = dict(source=program, run="./prog", kernel="matmul", budget=10, workers=W, pairs=3)
    quick.update(confirm_pairs=5, confirm_rounds=2, seed=1, mutator="none")
    return r3_subprocess("--workspace", ws, "tune", *flags(**dict(quick, **options)), timeout=600)


@pytest.fixture(scope="module")
def tuned(program, tmp_path_factory):
    """One whole `r3 tune` (recording first), as a user runs it, with --json."""
    ws = str(tmp_path_factory.mktemp("tune-ws"))
    proc = tune_matmul(ws, program, json=True)
    assert proc.returncode == 0, proc.stderr
    return ws, json.loads(proc.stdout)


def captures(ws):
    return {c.kernel: os.path.join(ws, "captures", c.id) for c in list_captures(Workspace(ws))}


def dot_study(program, tmp_path):
    """dot recorded in a fresh workspace, and a random-search study of it: (ws, target, space, study)."""
    ws = str(tmp_path / "ws")
    assert r3("--workspace", ws, "record", "--source", program, "--run", "./prog", "--kernel", "dot") == 0
    target = Target("dot", [captures(ws)["dot"]])
    space = Space(KernelFacts("dot"))
    return ws, target, space, Study(storage(Workspace(ws)), target, space, sampler="random", seed=0, pairs=3)


def test_space_follows_what_the_capture_knows():
    exact = Space(KernelFacts("k", polly=True))
    names = [p.name for p in exact.params]
    assert {"opt", "vectorize", "codegen", "noalias", "passes", "pass0", "polly", "polly_tile"} <= set(names)
    assert "fast_math" not in names and "fma" not in names  # exact results: no FP relaxation searched
    assert "threads" not in names and "schedule" not in names  # a serial kernel has no launch settings

    relaxed = Space(KernelFacts("k", tolerance=1e-9, parallel=True, dispatch_loops=1, cores=4))
    names = [p.name for p in relaxed.params]
    assert {"fast_math", "fma", "threads", "schedule", "chunk"} <= set(names)
    assert "polly" not in names  # no opt with Polly on this (pretend) machine
    assert relaxed.fingerprint() != exact.fingerprint()
    text = relaxed.describe()
    assert "within tolerance 1e-09" in text and "[if passes > 0]" in text
    assert "target" not in names  # built for this machine: nothing to retarget

    # A build for a generic target (no -march): this machine's target is a choice, and
    # within tolerance FMA contraction may differ from the build's (which had none)
    generic = Space(KernelFacts("k", tolerance=1e-9, built_target="x86-64", retarget=True, built_fma=False))
    params = {p.name: p for p in generic.params}
    assert params["target"].choices == ("host", "built") and params["fma"].choices == ("built", "on")
    assert {"target": "built"} in [
        {k: v for k, v in s.items() if k == "target" and v == "built"} for s in generic.seeds()
    ]
    built = generic.variant(dict(generic.defaults(), target="built")).pipeline
    assert (built.cpu, built.features, built.fma, built.relaxes_fp) == ("built", "built", "built", False)


def test_settings_that_interact_are_a_block_swept_together():
    """Polly's tile size, matrix-multiplication pattern and vectorizer interact: sweeping
    them around a point tries each of their combinations with the point's other settings."""
    space = Space(KernelFacts("k", polly=True))
    assert space.blocks() == {"polly": ("polly_tile", "polly_matmul", "polly_vec")}
    block = space.blocks()["polly"]
    center = dict(space.defaults(), polly=True, polly_tile=16, polly_matmul=True, polly_vec="none", codegen=2)
    swept = space.sweep(center, block)
    assert len(swept) == 7 * 2 * 2 and center in swept
    assert len({json.dumps(v, sort_keys=True) for v in swept}) == 28
    assert all(others(s, block) == others(center, block) for s in swept)
    assert space.sweep(space.defaults(), block) == []  # without Polly its knobs are not in play
    assert Space(KernelFacts("k")).blocks() == {}  # no Polly on this (pretend) machine


def test_a_block_is_swept_only_where_its_switch_pays_beyond_noise():
    def trial(value, polly):
        return SimpleNamespace(value=value, params={"opt": "3", "polly": polly})

    assert switch_pays([trial(5.2, True), trial(1.8, False)], "polly")  # the dense demo's matmul
    assert not switch_pays([trial(1.03, True), trial(1.02, False)], "polly")  # spmv: Polly's code, noise's gain
    assert not switch_pays([trial(1.8, False), trial(1.2, True)], "polly")  # the best does without it
    assert switch_pays([trial(1.1, True)], "polly") and not switch_pays([], "polly")


def test_bayesian_search_starts_from_what_is_known_to_matter():
    space = Space(KernelFacts("k", tolerance=1e-9, polly=True))
    seeds = [space.variant(values) for values in space.seeds()]
    assert seeds[0] == Variant()  # the baseline itself: the reference point
    assert Variant(Pipeline(noalias=True)) in seeds and Variant(Pipeline(polly=True)) in seeds
    assert any(v.pipeline.polly and v.pipeline.relaxes_fp for v in seeds)
    exact = Space(KernelFacts("k"))
    assert not any(exact.variant(v).pipeline.relaxes_fp for v in exact.seeds())  # never outside tolerance


def test_a_source_variant_search_starts_from_the_original_winners(tmp_path):
    """A source variant's space has the rewrite's knobs (and may lose FP relaxation): the
    original's best settings are adopted where they fit and tried before anything else."""
    original = Space(KernelFacts("k", tolerance=1e-9, polly=True, parallel=True, cores=4))
    won = original.adopt(
        {"opt": "2", "polly": True, "polly_tile": 64, "fast_math": "fast", "threads": 3, "no_such_setting": 1}
    )
    child = Space(KernelFacts("k", polly=True, parallel=True, cores=2, knobs={"R3_TILE_1": (32, 64)}))
    values = child.adopt(won)
    variant = child.variant(values)
    assert variant.pipeline.opt == "2" and variant.pipeline.polly and variant.pipeline.polly_tile == 64
    assert not variant.pipeline.relaxes_fp  # this space is exact: fast-math is not taken
    assert values["threads"] == 2  # 3 threads do not fit 2 cores: the baseline's instead
    assert variant.source_defines == {"R3_TILE_1": 32}
    # Tried first, then the space's own seeds.
    ws = Workspace(str(tmp_path / "ws"))
    study = Study(storage(ws), Target("k", [str(tmp_path / "cap")], 1.0), child, seeds=[values])
    assert study.pending() == [values] + child.seeds()
    assert child.suggest(study.live.ask()) == values


def test_space_suggests_variants_through_optuna():
    space = Space(KernelFacts("k", tolerance=1e-6, polly=True, parallel=True, cores=2))
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=3))
    seen_polly = seen_passes = False
    for _ in range(40):
        trial = study.ask()
        values = space.suggest(trial)
        variant = space.variant(values)
        assert variant.pipeline.opt in ("2", "3", "s")
        assert len(variant.pipeline.passes) == values["passes"]  # conditional: only as many as asked
        assert ("polly_tile" in values) == values["polly"]
        seen_polly |= variant.pipeline.polly
        seen_passes |= bool(variant.pipeline.passes)
        assert variant.pipeline.relaxes_fp == (values["fast_math"] != "none" or values["fma"] != "built")
        assert Variant.from_json(variant.to_json()) == variant
        study.tell(trial, 1.0)
    assert seen_polly and seen_passes


def test_the_bayesian_search_draws_every_fourth_trial_at_random():
    """After its startup trials, TPE picks three trials in four and random search the fourth,
    so a region TPE rates low still gets visited. Here the "model" always says x = 0."""
    model = optuna.samplers.PartialFixedSampler({"x": 0}, optuna.samplers.RandomSampler(seed=1))
    sampler = Interleaved(model, optuna.samplers.RandomSampler(seed=2), every=4, startup=3)
    study = optuna.create_study(sampler=sampler)
    for _ in range(23):
        trial = study.ask()
        study.tell(trial, trial.suggest_int("x", 0, 10**6))
    random_picks = [t.number for t in study.trials if t.params["x"] != 0]
    assert random_picks == [6, 10, 14, 18, 22]
    assert random_picks == [n for n in range(23) if sampler.explores(n)]
    assert isinstance(make_sampler("tpe", seed=0), Interleaved)  # what `r3 tune` uses


def test_tpe_models_a_plateau_of_indistinct_bests_as_its_good_group():
    # A peak: 12x, then nothing near it. TPE's default good group, the best tenth.
    peak = plateau_gamma(lambda: [12.0, 8.0] + [3.0] * 48)
    assert peak(50) == 5
    # A plateau: nine values within noise of the best 1.02x (INDISTINCT, 5.7%), ten clearly
    # worse (the loop vectorizer off). All nine are the good group, not the best two.
    values = [1.02, 1.01, 1.0, 1.0, 1.005, 0.99, 0.98, 0.97, 0.966] + [0.4] * 10 + [None]
    assert plateau_gamma(lambda: values)(19) == 9
    # At most half the trials: the other half is what TPE learns to avoid.
    assert plateau_gamma(lambda: [1.0] * 19)(19) == 9
    assert plateau_gamma(lambda: [])(5) == 1


def test_a_search_climbs_while_its_best_rose_beyond_noise_lately():
    assert still_climbing([None, 1.0, 1.2], patience=5)  # too short to judge: go on
    assert not still_climbing([None, 1.0, 1.2, 1.2, 1.2], patience=2)
    assert not still_climbing([1.0, 1.5, 1.5, 1.505, 1.505], patience=3)  # +0.3% is noise
    assert still_climbing([1.0, 1.5, 1.5, 1.6, 1.6], patience=3)
    assert still_climbing([None, None, None, None], patience=2)  # nothing verified yet


def test_the_pipeline_search_takes_back_held_budget_while_it_climbs(program, tmp_path):
    """With a mutator, half of the budget is held for source variants; a pipeline search
    that has not stalled takes back up to half of that. A resumed run keeps the split."""
    _, _, _, study = dot_study(program, tmp_path)
    options = TuneOptions(budget=8, mutator=make_mutator("rules"), remix_share=0.5, stall_patience=100)
    with ReplayPool(1) as pool:
        # 8 evaluations are too few to judge a stall by 100: the search goes on to 8 - 4/2.
        assert pipeline_search(study, pool.servers, options) == 2
        assert len(study.trials()) == 6
        assert pipeline_search(study, pool.servers, replace(options, stall_patience=1)) == 2
        assert len(study.trials()) == 6
        # Patience 0 holds the share exactly; without a mutator nothing is held.
        assert pipeline_search(study, pool.servers, replace(options, stall_patience=0, budget=12)) == 6
        assert pipeline_search(study, pool.servers, replace(options, mutator=None, budget=6)) == 0
        assert len(study.trials()) == 6


def test_a_search_whose_candidates_all_fail_confirmation_gets_its_best_untried_confirmed(program, tmp_path):
    ws, target, space, study = dot_study(program, tmp_path)
    for values in (space.defaults(), dict(space.defaults(), codegen=1)):  # two codes
        study.enqueue(values)
    broken = Variant(source_patch="--- a/kernels.c\n+++ b/kernels.c\n@@ -1,1 +1,1 @@\n-no such line\n+x\n")
    with ReplayPool(1) as pool:
        study.run(pool.servers, budget=2)
        # The first candidate (a patch that no longer applies) is rejected: none held, so the
        # study's best code not yet confirmed (with n=1) is confirmed too.
        [confirmed] = confirm_searches(pool.servers, [(target, study, [(broken, None)])], 1, rounds=1, pairs=3)
    assert len(confirmed) == 2
    assert "does not apply" in confirmed[0].rejected
    assert confirmed[1].variant == trial_variant(study.best(1)[0])
    assert not confirmed[1].rejected and len(confirmed[1].ratios) == 3


def test_confirmation_races_the_contenders_within_noise_of_the_best(program, tmp_path):
    ws, target, space, study = dot_study(program, tmp_path)
    with ReplayPool(1) as pool:
        study.run(pool.servers, budget=12)
        # The study sends its best code, and every code after it within the race margin.
        sent = contenders(study, 1)
        ranked = study.best(4)
        floor = ranked[0].value / (1 + INDISTINCT)
        assert [v for v, _ in sent] == [trial_variant(t) for i, t in enumerate(ranked) if i == 0 or t.value >= floor]
        # A race of three that keeps one: all three in the first round, the best of them in
        # the second; a candidate without a search value (the lean best) is never screened.
        racing = [(trial_variant(t), t.value) for t in study.best(3)] + [(Variant(), None)]
        [confirmed] = confirm(pool.servers, [(target, racing)], rounds=2, pairs=3, keep=1)
    rounds = [len(c.round_ratios) for c in confirmed]
    assert sorted(rounds[:3]) == [1, 1, 2] and rounds[3] == 2
    assert [c.screened_out for c in confirmed] == [n == 1 for n in rounds]
    kept = confirmed[rounds.index(2)]
    assert all(kept.round_speedups[0] >= c.speedup for c in confirmed[:3] if c.screened_out)


def test_contenders_that_all_add_threads_bring_the_best_serial_code_along(program, tmp_path):
    """A threaded candidate's time needs every core free: where all the best add threads,
    the best code that starts none (and beat the build) is confirmed beside them, so a
    busier machine at confirmation cannot leave the kernel at its build."""
    _, _, _, study = dot_study(program, tmp_path)

    def searched(variant, value):  # a finished evaluation, as the study stores it
        ev = {"variant": variant.to_json(), "code": repr(variant), "ratios": [value]}
        study.study.add_trial(optuna.trial.create_trial(value=value, user_attrs={"status": OK, "evaluation": ev}))

    polly_threads = Variant(Pipeline(polly=True, polly_parallel=True))
    wavefront = Variant(source_patch="(a patch)", source_rule="wavefront+vectorize-pragma")
    fused = Variant(source_patch="(another)", source_rule="fuse")
    for variant, value in ((polly_threads, 1.45), (wavefront, 1.44), (fused, 1.26), (Variant(Pipeline(opt="1")), 0.9)):
        searched(variant, value)
    study.refresh()
    assert [v for v, _ in contenders(study, 1)] == [polly_threads, wavefront, fused]
    assert [v for v, _ in contenders(study, 3)] == [polly_threads, wavefront, fused]  # one serial already


def test_a_candidate_screened_out_of_the_race_is_never_picked():
    fast_once = Confirmed(
        Variant(Pipeline(opt="2")), 1.1, ratios=[1.2, 1.2, 1.2], round_speedups=[1.2], round_ratios=[[1.2, 1.2, 1.2]]
    )
    steady = Confirmed(
        Variant(Pipeline(polly=True)),
        1.1,
        ratios=[1.08] * 6,
        round_speedups=[1.08, 1.08],
        round_ratios=[[1.08] * 3] * 2,
    )
    screen([fast_once, steady], keep=1)
    assert not fast_once.screened_out and steady.screened_out  # by the first round alone
    fast_once.screened_out, steady.screened_out = True, False
    assert pick([fast_once, steady]) is steady


def test_a_winner_is_reported_without_settings_that_do_not_matter():
    # A search winner as the sampler picked it: Polly with a tile size, an inlining
    # threshold, an extra pass and 2 threads.
    winner = Variant(
        Pipeline(opt="2", inline_threshold=500, passes=("sccp",), polly=True, polly_tile=64), Launch(threads=2)
    )
    names = [name for name, _ in settings(winner)]
    assert names == ["opt", "inline_threshold", "passes", "polly", "polly_tile", "threads"]
    # Each setting can be put back to its default alone; Polly takes its knobs with it.
    alone = dict(settings(winner))
    assert alone["polly"].pipeline.polly is False and alone["polly"].pipeline.polly_tile is None
    assert alone["inline_threshold"].pipeline.inline_threshold is None and alone["inline_threshold"].pipeline.polly
    lean = without(winner, ["inline_threshold", "passes", "threads"])
    assert lean == Variant(Pipeline(opt="2", polly=True, polly_tile=64), Launch())
    assert settings(Variant()) == []  # the baseline has nothing to drop


def test_the_winner_is_the_best_candidate_faster_in_every_confirmation_round():
    def measured(variant, rounds):
        return Confirmed(
            variant,
            ratios=[r for rnd in rounds for r in rnd],
            round_speedups=[rnd[1] for rnd in rounds],
            round_ratios=[list(rnd) for rnd in rounds],
        )

    polly = Variant(Pipeline(polly=True))
    o2, o2_inline = Variant(Pipeline(opt="2")), Variant(Pipeline(opt="2", inline_threshold=500))
    # the best median, but one round slower than the baseline
    shaky = measured(polly, [(1.11, 1.12, 1.13), (1.10, 1.11, 1.12), (0.98, 0.99, 1.0)])
    steady = measured(o2_inline, [(1.08, 1.09, 1.10), (1.08, 1.09, 1.10), (1.07, 1.08, 1.09)])
    assert pick([shaky, steady]) is steady
    # where that is not clearly faster, fewer settings win
    lean = measured(o2, [(1.07, 1.08, 1.09), (1.07, 1.08, 1.09), (1.07, 1.08, 1.09)])
    assert pick([shaky, steady, lean]) is lean
    # but not where it is: 1.5% faster in every pair of every round
    steady_faster = measured(o2_inline, [(1.095, 1.10, 1.105)] * 3)
    assert pick([steady_faster, lean]) is steady_faster
    # none faster in every round and by more than noise (noise.WIN_ABOVE, 1.057x): the
    # baseline stays; 4% in replay is no reason to build a variant
    noise = measured(o2, [(1.03, 1.04, 1.05)] * 3)
    assert noise.speedup < WIN_ABOVE and pick([shaky, noise]) is None and pick([]) is None


def test_tune_reports_confirmed_winners(tuned):
    ws, out = tuned
    [k] = out["kernels"]
    for key in (
        "kernel",
        "baseline_s",
        "best_s",
        "speedup",
        "speedup_min",
        "speedup_max",
        "evaluations",
        "failed",
        "relaxes_fp",
        "winner",
    ):
        assert key in k
    assert k["kernel"] == "matmul" and k["evaluations"] == 10
    assert k["baseline_s"] > 0 and k["best_s"] > 0
    assert k["speedup_min"] <= k["speedup"] <= k["speedup_max"]
    assert k["speedup"] >= 1.0  # a candidate that does not beat the baseline re-measured is not a winner
    assert k["relaxes_fp"] is False  # exact kernel: no FP relaxation was searched
    if k["winner"] != "baseline":
        assert k["pairs"] == 10  # 2 rounds of 5 confirmation pairs
    # The winner replays verified on every recorded instance.
    variant = Variant.from_json(k["variant"])
    with ReplayServer() as server:
        for cid in k["captures"]:
            assert server.submit(os.path.join(ws, "captures", cid), variant, repeat=1).status == OK
    # The report: table, winners, plot.
    report = out["report"]
    with open(report["text"]) as f:
        text = f.read()
    assert "matmul" in text and "speedup" in text
    with open(report["plot"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # Every evaluation is in the workspace's Optuna storage.
    study = optuna.load_study(study_name=k["study"], storage=storage(Workspace(ws)))
    assert sum(counted(t) for t in study.get_trials()) == 10
    # A candidate counted as the best so far only once measured again (n pairs, then 2n more):
    # the best of many short measurements is mostly luck. n is --pairs (3) while the pairs
    # stay quiet, more where this machine makes them noisy (search/noise.py), so it is not
    # the same from run to run.
    best = None
    for t in sorted(study.get_trials(), key=lambda t: t.datetime_complete):
        if t.value is not None and (best is None or t.value > best):
            pairs = t.user_attrs["evaluation"]["pairs"]
            assert pairs % 3 == 0 and 3 <= pairs // 3 <= 3 * MOST_FACTOR, t.user_attrs["evaluation"]
            best = t.value


def test_tune_reuses_captures_and_prints_a_table(tuned, program):
    ws, out = tuned
    proc = tune_matmul(ws, program)
    assert proc.returncode == 0, proc.stderr
    assert "reusing the captures" in proc.stdout  # recorded the same way before: not recorded again
    assert "covering" in proc.stdout
    lines = proc.stdout.splitlines()
    header = next(i for i, l in enumerate(lines) if l.startswith("kernel"))
    assert "baseline" in lines[header] and "winner" in lines[header]
    assert lines[header + 2].startswith("matmul")
    # where its evaluations went: this study's 10, and the confirmation's (measured again)
    spent = lines.index("where the evaluations went")
    assert lines[spent + 1].split()[:2] == ["kernel", "pipelines"] and lines[spent + 3].split()[:2] == ["matmul", "10"]
    # The study was complete: no new evaluations, the same one study.
    study = optuna.load_study(study_name=out["kernels"][0]["study"], storage=storage(Workspace(ws)))
    assert sum(counted(t) for t in study.get_trials()) == 10
    # ... and confirmed: not again. The result is kept once, in results/; the study names it.
    assert "re-verifying" not in proc.stdout
    saved = load_result(Workspace(ws), out["kernels"][0]["captures"][0])
    assert study.user_attrs["confirmed"]["result_sha256"] == result_digest(saved)
    assert "result" not in study.user_attrs["confirmed"] and saved.speedup == out["kernels"][0]["speedup"]


def test_a_tune_measured_with_cold_private_caches_is_a_study_of_its_own(tuned, program):
    """--cache shared: every timed run starts with each thread's own caches emptied, as in an
    application where other kernels ran in between; its evaluations never mix with warm ones."""
    ws, out = tuned
    proc = tune_matmul(
        ws, program, budget=4, workers=None, confirm_pairs=3, confirm_rounds=1, cache="shared", json=True
    )
    assert proc.returncode == 0, proc.stderr
    [shared] = json.loads(proc.stdout)["kernels"]
    assert shared["cache"] == "shared" and shared["study"].endswith("/shared")
    assert shared["study"] != out["kernels"][0]["study"] and out["kernels"][0]["cache"] == "warm"
    study = optuna.load_study(study_name=shared["study"], storage=storage(Workspace(ws)))
    evaluations = [t.user_attrs["evaluation"] for t in study.get_trials() if "evaluation" in t.user_attrs]
    assert evaluations and all(e["cache"] == "shared" for e in evaluations if e["time_s"] is not None)


def test_failed_candidates_are_recorded_and_never_rank(program, tmp_path):
    ws, target, space, study = dot_study(program, tmp_path)
    with ReplayPool(1) as pool:
        # A candidate that hangs (here: a deadline no compile meets, on any machine) is a
        # failed trial; the same point with time to run is a correct one.
        study.enqueue(space.defaults())
        study.timeout = 0.001
        study.run(pool.servers, budget=1)
        study.enqueue(space.defaults(), once=False)
        study.timeout = 60.0
        study.run(pool.servers, budget=2)
    trials = sorted(study.trials(), key=lambda t: t.number)
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    assert trials[0].user_attrs["status"] == "timeout" and trials[0].value is None
    assert "killed after" in trials[0].user_attrs["evaluation"]["diagnostics"]
    assert study.failures() == {"timeout": 1}
    assert [t.number for t in study.best(3)] == [trials[1].number]  # only the correct one ranks
    # The correct one says how noisy its pairs were; a study opened again on the same
    # storage measures with the pairs that noise calls for (see search/noise.py).
    noise = trials[1].user_attrs["evaluation"]["pair_noise"]
    assert noise >= 0 and trials[0].user_attrs["evaluation"]["pair_noise"] is None
    again = Study(storage(Workspace(ws)), target, space, sampler="random", seed=0, pairs=3)
    assert again.pair_noises() == [noise]


def test_trials_that_run_the_same_code_are_one_candidate(program, tmp_path):
    """dot calls nothing, so an inlining threshold changes nothing in its code: trials that
    differ only there ran the same code, and are one candidate whose pairs are pooled,
    ranked once, as its simplest variant. Other code (another codegen level) ranks apart."""
    ws, target, space, study = dot_study(program, tmp_path)
    plain = space.defaults()
    same = [plain, dict(plain, inline=1000), dict(plain, inline=25)]
    other = dict(plain, codegen=1)
    for values in same + [other]:
        study.enqueue(values)
    with ReplayPool(1) as pool:
        study.run(pool.servers, budget=4)
    trials = sorted(study.trials(), key=lambda t: t.number)
    assert all(t.state == TrialState.COMPLETE for t in trials)
    codes = [t.user_attrs["evaluation"]["code"] for t in trials]
    assert codes[0] == codes[1] == codes[2] != codes[3]

    ranked = study.best(5)
    assert len(ranked) == 2  # two codes
    [pooled] = [t for t in ranked if t.user_attrs["evaluation"]["code"] == codes[0]]
    assert pooled.params == trials[0].params  # the simplest: no inlining threshold at all
    ratios = [r for t in trials[:3] for r in t.user_attrs["evaluation"]["ratios"]]
    assert pooled.value == pytest.approx(statistics.median(ratios))
    assert pooled.user_attrs["evaluation"]["pairs"] == len(ratios) >= 9
    assert pooled.user_attrs["evaluation"]["trials"] == 3
    # each trial was told the median of its code's pairs up to then (what the sampler learns)
    assert trials[2].value == pytest.approx(statistics.median(ratios))
    first = trials[0].user_attrs["evaluation"]["ratios"]
    assert trials[0].value == pytest.approx(statistics.median(first))


def test_a_point_measured_before_is_not_measured_again(program, tmp_path):
    """A sampler that has settled proposes the same point again and again (here it always
    proposes the baseline). After the first time, each proposal is replaced by a neighbour
    nobody measured: one setting changed (with the extra passes a longer sequence brings)."""
    ws, target, space, study = dot_study(program, tmp_path)
    plain = space.defaults()
    study.live.sampler = optuna.samplers.PartialFixedSampler(plain, optuna.samplers.RandomSampler(seed=0))
    with ReplayPool(1) as pool:
        study.run(pool.servers, budget=4)
    points = [t.params for t in sorted(study.trials(), key=lambda t: t.number)]
    assert points[0] == plain
    assert len({json.dumps(p, sort_keys=True) for p in points}) == 4
    for p in points[1:]:
        changed = {k for k in p.keys() | plain.keys() if p.get(k) != plain.get(k)}
        assert len(changed - {"pass0", "pass1", "pass2"}) == 1, changed
    # The proposals replaced are no evaluations: not counted, not kept.
    assert [t.user_attrs.get("status") for t in study.live.trials].count(DUPLICATE) == 3
    kept = optuna.load_study(study_name=study.name, storage=storage(Workspace(ws)))
    assert len(kept.trials) == 4


def test_a_neighbour_never_takes_the_place_of_a_random_draw(program, tmp_path):
    """With TPE, every fourth trial is drawn at random (``Interleaved``): a point proposed
    again is replaced by a neighbour only where the next trial is not one of those draws."""
    ws, target, space, study = dot_study(program, tmp_path)
    settled = optuna.samplers.PartialFixedSampler(space.defaults(), optuna.samplers.RandomSampler(seed=0))
    study.live.sampler = sampler = Interleaved(settled, optuna.samplers.RandomSampler(seed=1), every=4)
    with ReplayPool(1) as pool:
        study.run(pool.servers, budget=5)
    trials = sorted(study.trials(), key=lambda t: t.number)
    # 0: the point; 1 proposed it again, 2 its neighbour; 3 drawn; 4 again, 5 its
    # neighbour; 6 again, and 7 is a draw: no neighbour in between.
    assert [t.number for t in trials] == [0, 2, 3, 5, 7]
    assert [t.number for t in trials if "instead_of" in t.user_attrs] == [2, 5]
    assert [t.number for t in trials if sampler.explores(t.number)] == [3, 7]


def swept_dot(program, tmp_path, monkeypatch, pays):
    """dot's study over a space whose Polly block is cut to pattern x vectorizer (4 points,
    to keep the tests short), its first point running Polly; whether Polly pays is
    ``pays["polly"]`` (on dot it is within noise, so it is set here): (study maker, block)."""
    ws, target, _, _ = dot_study(program, tmp_path)
    space = Space(KernelFacts("dot", polly=True))
    block = ("polly_matmul", "polly_vec")
    space.blocks = lambda: {"polly": block}
    monkeypatch.setattr(bayes, "switch_pays", lambda ranked, switch: pays[switch])
    first = dict(space.plain("polly"), noalias=True)

    def study():
        s = Study(storage(Workspace(ws)), target, space, sampler="tpe", seed=0, pairs=3, seeds=[first])
        # Random proposals; random draws at trial numbers 5, 7, 9, ...
        s.live.sampler = Interleaved(
            optuna.samplers.RandomSampler(seed=0), optuna.samplers.RandomSampler(seed=1), every=2, startup=4
        )
        return s

    return study, space, block, first


def test_a_block_of_interacting_settings_is_swept_once_the_best_takes_it(program, tmp_path, polly, monkeypatch):
    """Once the best point runs Polly and Polly pays, Polly's block is swept, first with
    every other setting as built, in the slots that are not random draws, at most a third
    of a run's evaluations; a killed run's sweep goes on where it stopped."""
    study, space, block, first = swept_dot(program, tmp_path, monkeypatch, {"polly": True})
    plain = space.plain("polly")
    assert plain in space.seeds() and plain["polly_matmul"] and plain["polly_vec"] == "none"
    with ReplayPool(1) as pool:
        # 0: ``first``; 1-3: the space's seeds (3: plain); 4: the sweep's first point not
        # measured (plain is), and the one sweep point 5 evaluations leave room for
        study().run(pool.servers, budget=5)
        resumed = study()  # as after a kill
        resumed.run(pool.servers, budget=9)
    trials = sorted(resumed.trials(), key=lambda t: t.number)
    assert [t.number for t in trials] == list(range(9))
    assert trials[0].params == first and trials[3].params == plain
    assert [t.number for t in trials if t.user_attrs.get("sweep")] == [4, 6, 8]
    combos = {tuple(t.params[k] for k in block) for t in trials if t.number in (3, 4, 6, 8)}
    assert combos == {(m, v) for m in (False, True) for v in ("none", "stripmine")}
    for n in (4, 6, 8):  # every other setting as built, not as the best had them
        assert others(trials[n].params, block) == others(plain, block)
    assert resumed.study.user_attrs["sweeps"][0] == {"block": list(block), "values": plain}


def test_a_sweep_is_dropped_once_its_switch_no_longer_pays(program, tmp_path, polly, monkeypatch):
    """A sweep goes on only while Polly pays: once code without it leads (or no longer
    trails beyond noise), the sampler has the slots back."""
    pays = {"polly": True}
    study, _, _, _ = swept_dot(program, tmp_path, monkeypatch, pays)
    with ReplayPool(1) as pool:
        s = study()
        s.run(pool.servers, budget=5)  # trial 4 is the sweep's first point, as above
        pays["polly"] = False
        s.run(pool.servers, budget=9)  # (6 and 8 would have been sweep points)
    assert [t.number for t in s.trials() if t.user_attrs.get("sweep")] == [4]
    assert len(s.trials()) == 9


def test_sweeps_are_paid_from_the_share_held_for_source_variants(program, tmp_path, polly, monkeypatch):
    """A sweep's points are paid from the share held for source variants, up to half of
    it: the pipeline's own search keeps its share (here 8 of 16; at most 12 in all)."""
    study, _, _, _ = swept_dot(program, tmp_path, monkeypatch, {"polly": True})
    s = study()
    options = TuneOptions(budget=16, mutator=make_mutator("rules"), remix_share=0.5, stall_patience=0)
    with ReplayPool(1) as pool:
        remix = pipeline_search(s, pool.servers, options)
    sweeps = swept(s)
    assert 1 <= sweeps <= len(s.trials()) / 3
    assert len(s.trials()) == min(12, 8 + sweeps) and remix == 16 - len(s.trials())


WHERE_C = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
/* writes where its own frame is: no replay can reproduce that */
void where(long n, long *out) {
  volatile long here = n;
  for (long i = 0; i < n; i++) out[i] = (long)(uintptr_t)&here + i;
}
int main(void) {
  long *out = calloc(64, sizeof(long));
  where(64, out);
  printf("%ld\n", out[63] - out[0]);
  free(out);
  return 0;
}
"""


def test_a_kernel_whose_baseline_cannot_reproduce_its_recording_is_not_searched(tmp_path_factory):
    """Every candidate is held to the recording: when the kernel's own code does not
    reproduce it, the search would only collect failures. The kernel is left out, with the
    baseline's own result as the reason."""
    tree = source_tree(
        tmp_path_factory, "where", {"where.c": WHERE_C, "Makefile": "where: where.c\n\t$(CC) -O1 -o $@ $<\n"}
    )
    ws = str(tmp_path_factory.mktemp("where-ws"))
    proc = r3_subprocess(
        "--workspace",
        ws,
        "tune",
        *flags(source=tree, run="./where", kernel="where", budget=4, mutator="none", json=True),
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    assert out["kernels"] == []
    [line] = [s for s in out["skipped"] if s.startswith("where:")]
    # the baseline is the kernel as built: -O1, for the build's target
    assert (
        "its baseline (O1,codegen=1,target=built,compiler=build, the kernel as built) does not reproduce the recording"
    ) in line, line


def _finished_trials(path):
    """Finished trials in the study journal another process is writing (reading it here
    writes nothing)."""
    if not os.path.exists(path):
        return 0
    store = journal(path)
    return sum(
        t.state.is_finished()
        for s in store.get_all_studies()
        for t in store.get_all_trials(s._study_id, deepcopy=False)
    )


def test_a_killed_tune_resumes_without_losing_evaluations(program, tmp_path):
    ws = str(tmp_path / "ws")
    argv = [
        sys.executable,
        "-m",
        "spack_r3.cli",
        "--workspace",
        ws,
        "tune",
        "--source",
        program,
        "--run",
        "./prog",
        "--kernel",
        "matmul",
        "--budget",
        "30",
        "--pairs",
        "3",
        "--confirm-pairs",
        "3",
        "--confirm-rounds",
        "1",
        "--seed",
        "2",
        "--mutator",
        "none",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(str(tmp_path / "stderr"), "w"))
    store = Workspace(ws).journal_file
    finished, deadline = 0, time.monotonic() + 300
    while finished < 4 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        finished = _finished_trials(store)
    assert finished >= 4, "the study did not get going: %s" % (tmp_path / "stderr").read_text()[-2000:]
    assert proc.poll() is None and finished < 30  # killed mid-study
    proc.send_signal(signal.SIGKILL)  # a real kill: no handler runs
    proc.wait()
    [summary] = optuna.get_all_study_summaries(storage=journal(store))
    study = optuna.load_study(study_name=summary.study_name, storage=journal(store))
    before = {t.number: (t.state, t.value, t.params) for t in study.get_trials() if counted(t)}

    done = subprocess.run(argv + ["--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["kernels"][0]["evaluations"] == 30
    study = optuna.load_study(study_name=out["kernels"][0]["study"], storage=journal(store))
    after = {t.number: (t.state, t.value, t.params) for t in study.get_trials()}
    for number, trial in before.items():  # every evaluation finished before the kill is still there, unchanged
        assert after[number] == trial
    assert sum(counted(t) for t in study.get_trials()) == 30
    # What the kill left in flight is failed (its process is gone), never counted, and was asked again.
    trials = study.get_trials()
    assert all(t.state.is_finished() for t in trials)
    interrupted = [t for t in trials if not counted(t)]
    assert all(t.user_attrs["status"] == INTERRUPTED for t in interrupted)
    measured = {json.dumps(t.params, sort_keys=True) for t in trials if counted(t)}
    assert all(json.dumps(t.params, sort_keys=True) in measured for t in interrupted)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--budget", "0"], "--budget must be at least 1"),
        (["--source", "."], "--source and --run go together"),
        ([], "no replayable kernel to tune"),
        (["--kernel", "nope"], "no capture of kernel 'nope'"),
    ],
)
def test_bad_input_is_one_line(tmp_path, argv, message):
    proc = r3_subprocess("--workspace", str(tmp_path / "empty"), "tune", *argv)
    assert proc.returncode != 0
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_the_search_runs_only_on_cpus_whose_worker_waits_for_it():
    """With a pinned worker on every CPU, the threads that drive the workers run SCHED_IDLE,
    so they never preempt a timed run; a worker they (re)start runs at normal priority."""

    def policies(server, seen):
        server.start()  # what a request does after a worker died
        child = server.proc.pid
        seen[server] = (os.sched_getscheduler(0), os.sched_getscheduler(child))
        server.close()

    every_cpu = ReplayServer(cpus=sorted(os.sched_getaffinity(0)))
    unpinned = ReplayServer()
    seen = {}
    each_server([every_cpu], lambda s: policies(s, seen))
    each_server([unpinned], lambda s: policies(s, seen))
    assert seen[every_cpu] == (os.SCHED_IDLE, os.SCHED_OTHER)
    assert seen[unpinned] == (os.SCHED_OTHER, os.SCHED_OTHER)


def test_r3_tune_runs_with_the_searchs_own_defaults():
    """Given no option, r3 tune searches with what ``TuneOptions()`` holds: each default is
    written once, in the search, and the command line takes it from there."""
    args = cli.setup_parser(argparse.ArgumentParser(prog="r3")).parse_args(["tune"])
    options = TuneOptions()
    for name in (
        "budget",
        "workers",
        "sampler",
        "seed",
        "pairs",
        "confirm_pairs",
        "confirm_rounds",
        "timeout",
        "remix_share",
        "stall_patience",
        "child_budget",
        "repairs",
        "fallback_rules",
        "storage",
        "cluster",
        "kernels_at_once",
    ):
        assert getattr(args, name) == getattr(options, name), name
    # (which calls to record: the ones that stand for where each kernel's time goes)
    assert args.min_share == MIN_SHARE and args.instances == COVER


def test_a_kernels_result_is_kept_once_typed_and_old_results_still_load(tmp_path):
    ws = Workspace(str(tmp_path))
    winner = Variant(Pipeline(opt="2", polly=True), Launch(threads=2))
    result = KernelResult("k", ["c1", "c2"], 0.5, 2e-3, 1e-3, 2.0, 1.9, 2.1, 10, {}, False, True, winner)
    assert result.winner == "O2,polly=1 threads=2"  # in words, as the report writes it
    os.makedirs(ws.results_dir)
    with open(ws.result_file("c2"), "w") as f:  # an earlier run's copy under its second capture
        f.write("{}")
    save_results(ws, [result])
    assert os.listdir(ws.results_dir) == ["c1.json"]  # once, under its first capture
    for cid in ("c1", "c2"):  # found from any of its captures, its variant typed
        again = load_result(ws, cid)
        assert again.won and again.variant == winner and again.winner == result.winner
    assert load_result(ws, "c3") is None
    # A result an older r3 wrote (no "won"; the winner in words or "baseline") is judged as
    # tune judges it now: a winner within noise of the build (1.03x) did not win.
    old = dict(result.to_json(), winner="O2 threads=2")
    del old["won"]
    assert KernelResult.from_json(dict(old, speedup=1.2)).won
    assert not KernelResult.from_json(dict(old, speedup=1.03)).won
    assert not KernelResult.from_json(dict(old, winner="baseline")).won
    assert KernelResult.from_json(dict(old, speedup=1.03)).winner == "baseline"

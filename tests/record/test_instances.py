"""Representative instances (``r3 record --instances cover``, the default of ``r3 tune``).

A kernel whose calls differ in cost by 100x, its first call the cheapest (as LULESH's EOS
on its first, smallest region): the first call is captured by ``--instances 1``, and is
not where the time goes. ``cover`` logs every call in a first run, picks one call per
stratum of equal time, and captures those; each capture carries its weight, and a
candidate's speedup is the time-weighted one over them (``replay.weighted``).
"""

import json
import os

import pytest

from spack_r3.capture import list_captures
from spack_r3.data import OK, Evaluation, Variant
from spack_r3.record.instances import KernelCalls, capture_calls_env
from spack_r3.replay import weighted
from spack_r3.compile.pipeline import parse
from spack_r3.replay.server import ReplayPool, ReplayServer, omp_environment
from spack_r3.search.bayes import Target
from spack_r3.search.tune import instances_check, plan_targets, represents
from spack_r3.workspace import Workspace

from test_record_replay import source_tree
from r3cli import flags, r3

# relax() on 1,000 elements first, then on 200,000 (1 to 3 sweeps) and on 1,000 in turn: the
# costly calls carry nearly all of its time. The small calls run serial (the `if` clause, as real
# codes write it): a parallel region of 1,000 elements costs what waking the team costs, and on
# a loaded machine that wake-up (hundreds of us) made the cheap calls a stratum of their own.
VARY_C = r"""
#include <stdio.h>
#include <stdlib.h>
void relax(double *a, const double *b, long n, long rep) {
  for (long r = 0; r < rep; r++)
#pragma omp parallel for if (n > 100000)
    for (long i = 1; i < n - 1; i++) a[i] = 0.5 * a[i] + 0.25 * (b[i - 1] + b[i + 1]);
}
int main(void) {
  long big = 200000;
  double *a = calloc(big, sizeof *a), *b = calloc(big, sizeof *b);
  for (long i = 0; i < big; i++) b[i] = i % 7;
  relax(a, b, 1000, 1);
  for (int step = 0; step < 30; step++) {
    relax(a, b, big, 1 + step % 3);
    relax(a, b, 1000, 1);
  }
  double s = 0;
  for (long i = 0; i < big; i++) s += a[i];
  printf("%.6f\n", s);
  return 0;
}
"""
MAKEFILE = "vary: vary.c\n\t$(CC) -O2 -fopenmp -o $@ vary.c\n"


def calls(costs, args=None):
    """A KernelCalls of calls with these costs (ns), each with its own arguments unless given."""
    return KernelCalls("k", "/tu", 1, [(i, ns, args[i] if args else (i,)) for i, ns in enumerate(costs)])


def test_calls_of_one_cost_are_one_stratum():
    [pick] = calls([1000] * 20).picks()
    assert pick.weight == 1.0 and pick.calls == 20 and pick.call != 0  # (the first call is left out)


def test_strata_of_equal_time_where_the_costs_differ():
    # 100 calls of 1 us, then 10 of 100 us and 10 of 300 us: 0.1 ms, 1 ms and 3 ms in all
    picks = calls([1000] * 100 + [100000] * 10 + [300000] * 10).picks()
    assert abs(sum(p.weight for p in picks) - 1.0) < 1e-9
    assert all(p.call_s >= 100e-6 for p in picks), picks  # no stratum is the cheap calls
    assert max(p.weight for p in picks) < 0.8 and len(picks) >= 2


def test_a_few_costly_calls_beside_many_cheap_ones_pick_a_costly_one():
    # a thousand 1 us calls, ten 10 ms ones: the time is in the costly calls, which the mean
    # call (0.1 ms) is not
    [pick] = calls([1000] * 1000 + [10_000_000] * 10).picks()
    assert pick.call_s == 0.01 and pick.calls == 1010


def test_calls_with_the_same_arguments_cost_their_median():
    # call 5 preempted (50x), its arguments those of the other calls: no stratum of its own
    costs = [1000] * 30
    costs[5] = 50000
    [pick] = calls(costs, args=[(7, 7)] * 30).picks()
    assert pick.call_s == 1e-6


def test_a_call_repeated_alike_every_step_is_captured_mid_run_not_at_its_start():
    # LULESH's hourglass force: one call a step, the same arguments each time, the same cost;
    # its early steps see a mesh that has not moved yet (the call changes nothing there)
    [pick] = calls([4_800_000] * 100, args=[(1, 2, 3, 4)] * 100).picks()
    assert 40 <= pick.call <= 60, pick


def test_a_repeat_of_the_call_before_it_is_not_the_one_captured():
    # EOS energy: each region's call run rep=3 times over, one after another; a repeat writes
    # what the call before it wrote already. The call captured starts its run of repeats.
    args = [(region,) for step in range(10) for region in (11, 12) for _ in range(3)]
    [pick] = calls([1000] * len(args), args=args).picks()
    assert pick.call % 3 == 0 and args[pick.call - 1] != args[pick.call], pick


def test_capture_calls_env_names_each_kernel_s_calls():
    env = capture_calls_env({("/a", "k1"): calls([5, 5, 9000, 9000] * 3).picks(), ("/b", "k2"): []})
    assert env.startswith("k1=") and "k2" not in env.split("k1=")[0]


def test_weighted_speedup_is_the_harmonic_mean_by_time():
    # a serial code 30x faster on the cheap third of the time, 0.6x on the rest: slower
    assert weighted.weighted_speedup([30.0, 0.6, 0.6], [1, 1, 1]) < 1.0
    assert weighted.weighted_speedup([2.0, 2.0], [0.3, 0.7]) == pytest.approx(2.0)
    ev = weighted.combine(
        [
            Evaluation("a", {}, ratios=[3.0, 3.0], speedup=3.0, baseline_median_s=1e-5),
            Evaluation("b", {}, ratios=[0.5, 0.5], speedup=0.5, baseline_median_s=1e-3),
        ],
        [0.5, 0.5],
    )
    assert ev.speedup == pytest.approx(1 / (0.5 / 3 + 0.5 / 0.5)) and ev.instance_speedups == [3.0, 0.5]
    bad = weighted.combine([Evaluation("a", {}, speedup=2.0), Evaluation("b", {}, status="crash")], [0.5, 0.5])
    assert bad.status == "crash" and bad.diagnostics.startswith("instance 2 of 2")


@pytest.fixture(scope="module")
def vary(tmp_path_factory, clang):
    src = source_tree(tmp_path_factory, "vary", {"vary.c": VARY_C, "Makefile": MAKEFILE})
    out = {}
    for mode in ("1", "cover"):
        ws = str(tmp_path_factory.mktemp("vary-ws-" + mode))
        os.environ["OMP_WAIT_POLICY"] = "passive"  # (a setting of the run that replay must keep)
        try:
            assert (
                r3("--workspace", ws, "record", *flags(source=src, run="./vary", kernel="relax", instances=mode)) == 0
            )
        finally:
            del os.environ["OMP_WAIT_POLICY"]
        out[mode] = Workspace(ws)
    return out


def _n(capture):
    return int(capture.args[2], 16)


def test_the_first_call_is_the_cheap_one_and_cover_captures_where_the_time_goes(vary):
    [first] = list_captures(vary["1"])
    assert _n(first) == 1000 and first.selection is None
    covered = sorted(list_captures(vary["cover"]), key=lambda c: c.instance)
    assert covered and all(_n(c) == 200000 for c in covered), [_n(c) for c in covered]
    assert abs(sum(c.selection["weight"] for c in covered) - 1.0) < 1e-6
    for c in covered:  # each stands for calls of its stratum, with its own time in the logged run
        assert c.selection["calls"] >= 1 and c.selection["call_s"] > 0
    [run] = {os.path.dirname(c.app["run"]) for c in covered}
    [kernel] = json.load(open(os.path.join(run, "instances.json")))
    assert kernel["varying_args"]["2"] == [1000, 200000]  # what tells its calls apart


def test_a_candidate_is_timed_on_every_picked_call_weighed(vary):
    ws = vary["cover"]
    captures = list_captures(ws)
    [target] = plan_targets(ws, captures).targets
    assert not target.sequence
    if len(captures) < 2:  # (a machine where the sweeps cost the same: one stratum)
        assert target.weights is None
        return
    assert target.weights and len(target.weights) == len(captures)
    with ReplayServer() as server:
        ev = target.submit(server, Variant(pipeline=parse("O1")), pairs=3)
    assert ev.status == OK, ev.diagnostics
    assert len(ev.instance_speedups) == len(captures)
    assert ev.speedup == pytest.approx(weighted.weighted_speedup(ev.instance_speedups, target.weights))


def test_a_first_call_far_from_the_kernel_s_mean_call_is_reported():
    # LULESH's EOS recorded as its first call: 31.5 us replayed, 268 us its mean call
    first = [{"weight": 1.0, "calls": 1100, "app_s": 268e-6, "replay_s": 31.5e-6, "picked": False}]
    ratio, problem = represents(first, 1100)
    assert ratio == pytest.approx(31.5 / 268)
    assert "31.5us" in problem and "268.0us" in problem and "record with --instances cover" in problem
    assert represents(first, 1) == (pytest.approx(31.5 / 268), None)  # called once: its own instance
    picked = [
        dict(first[0], app_s=30e-6, picked=True, weight=0.5),
        dict(first[0], app_s=900e-6, picked=True, weight=0.5),
    ]
    picked[1]["replay_s"] = 1e-3
    assert represents(picked, 1100)[1] is None


def test_each_instance_is_set_against_its_own_call_in_the_application(vary):
    for mode, ws in vary.items():
        [target] = plan_targets(ws, list_captures(ws)).targets
        with ReplayPool(1) as pool:
            rows, ratio, problem = instances_check(pool, target, 60)
        assert len(rows) == (len(target.captures) if target.weights else 1)
        assert all(r["app_s"] > 0 and r["replay_s"] > 0 and r["threads"] for r in rows)
        assert sum(r["weight"] for r in rows) == pytest.approx(1.0)
        assert all(r["picked"] for r in rows) == (mode == "cover")
        assert (problem is None) == (1 / 3 <= ratio <= 3)


def test_replay_runs_openmp_as_the_application_did(vary):
    """The run's OpenMP settings (wait policy, affinity) are kept with each capture, and the
    replay workers of a tune start with them: a threaded kernel's fork and join cost there
    what they cost in the application."""
    captures = list_captures(vary["cover"])
    assert all(c.launch["omp_env"] == {"OMP_WAIT_POLICY": "passive"} for c in captures)
    env = omp_environment(captures)
    assert env == {"OMP_WAIT_POLICY": "passive"}
    with ReplayPool(1, env=env) as pool:
        assert all(s.env == env for s in pool.servers)


def test_instances_cover_is_r3_tune_s_default():
    from spack_r3.commands.tune import setup_parser
    import argparse

    parser = argparse.ArgumentParser()
    setup_parser(parser)
    assert parser.parse_args([]).instances == "cover"
    assert isinstance(Target("k", ["/x"]).weights, type(None))


# HPCCG's shape: one call of the solver holds every call of the kernels it drives
DRIVER_C = r"""
#include <stdio.h>
#include <stdlib.h>
void spmv(const double *a, const double *x, double *y, long n) {
  for (long i = 1; i < n - 1; i++) y[i] = a[i] * (x[i - 1] + x[i + 1]) + x[i];
}
double dot(const double *x, const double *y, long n) {
  double s = 0;
  for (long i = 0; i < n; i++) s += x[i] * y[i];
  return s;
}
double solve(const double *a, double *x, double *y, long n, int iters) {
  double s = 0;
  for (int k = 0; k < iters; k++) {
    spmv(a, x, y, n);
    s = dot(y, y, n);
    for (long i = 0; i < n; i++) x[i] = y[i] / (1.0 + s);
  }
  return s;
}
int main(void) {
  long n = 100000;
  double *a = calloc(n, sizeof *a), *x = calloc(n, sizeof *x), *y = calloc(n, sizeof *y);
  for (long i = 0; i < n; i++) a[i] = 0.25 + (i % 5) * 0.01, x[i] = 1.0;
  printf("%.6f\n", solve(a, x, y, n, 40));
  return 0;
}
"""


def test_a_driver_is_not_captured_so_that_the_kernels_it_calls_are(tmp_path_factory, capsys):
    """Capturing the solver's one call would hold every call of spmv and dot, which a
    capture taken meanwhile cannot be: the solver, most of whose time is theirs, is left
    out, and they are captured."""
    tree = source_tree(
        tmp_path_factory, "driver", {"drive.c": DRIVER_C, "Makefile": "drive: drive.c\n\t$(CC) -O1 -o $@ drive.c\n"}
    )
    ws = str(tmp_path_factory.mktemp("driver-ws"))
    assert r3("--workspace", ws, "record", *flags(source=tree, run="./drive", instances="cover")) == 0
    out = capsys.readouterr()
    assert "not capturing solve: most of its time is in kernels it calls" in out.err + out.out
    kernels = {c.kernel for c in list_captures(Workspace(ws))}
    assert {"spmv", "dot"} <= kernels and "solve" not in kernels

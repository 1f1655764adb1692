"""Which caches a kernel is timed with under `r3 tune --cache auto`.

The recorded run of a conjugate-gradient solver, as its captures describe it (sizes as
`r3 record` measured them on the cg demo at 400x400): a sparse matrix product that
streams 12.8 MB, a dot product of 1.3 MB called twice per iteration, vector updates.
Cache sizes are given, so the answers do not depend on the machine running the tests.
"""

import pytest

from spack_r3.data import COLD, SHARED, WARM, Capture
from spack_r3.replay import cachestate

MB = 1000 * 1000
L2, LLC = 1 << 20, 32 << 20  # one core's


def capture(kernel, touched, calls, threads=2, run="/ws/runs/1/record", mode="pages", instance=1, top=None):
    return Capture(
        id=kernel,
        kernel=kernel,
        source_file="kernels.c",
        compile_command=[],
        compile_dir="/",
        signature={},
        args=[],
        byval_data=[],
        ret=None,
        launch={"threads": threads, "openmp": threads > 1},
        target={},
        app={"calls": calls, "top_calls": calls if top is None else top, "run": run, "app_s": 0.32},
        instance=instance,
        instance_s=0.0,
        arena={},
        globals=[],
        files={},
        memory={"mode": mode, "touched_bytes": touched, "live_bytes": 17 * MB},
    )


@pytest.fixture
def cg_run():
    return [
        capture("spmv", int(12.8 * MB), 814),
        capture("dot", int(1.3 * MB), 1629),
        capture("axpy", int(2.6 * MB), 1626),
        capture("xpay", int(2.6 * MB), 813),
        capture("poisson2d", 4096, 1, threads=1),
    ]


def by_name(run, name):
    return next(c for c in run if c.kernel == name)


def test_a_kernel_whose_data_the_others_push_out_of_l2_is_timed_with_shared_caches(cg_run):
    choice = cachestate.choose(by_name(cg_run, "dot"), cg_run, l2=L2, llc=LLC, cpus=2)
    assert choice.state == SHARED
    # 12.8 MB every other call, 2.6 MB on every call, 2.6 MB every other call
    assert cachestate.traffic_between_calls(by_name(cg_run, "dot"), cg_run) == pytest.approx(
        int(12.8 * MB) * 814 / 1629 + int(2.6 * MB) * 1626 / 1629 + int(2.6 * MB) * 813 / 1629 + 4096 / 1629
    )
    assert "1.3 MB" in choice.reason and "L2" in choice.reason


def test_a_kernel_that_streams_more_than_l2_is_timed_warm(cg_run):
    choice = cachestate.choose(by_name(cg_run, "spmv"), cg_run, l2=L2, llc=LLC, cpus=2)
    assert choice.state == WARM and "streams" in choice.reason


def test_more_threads_hold_more(cg_run):
    # axpy's 2.6 MB do not fit in two cores' L2; in eight cores' (8 MB) they do, and the
    # 9 MB the other kernels touch between its calls push them out.
    assert cachestate.choose(by_name(cg_run, "axpy"), cg_run, l2=L2, llc=LLC, cpus=2).state == WARM
    big = [capture(c.kernel, c.memory["touched_bytes"], c.app["calls"], threads=8) for c in cg_run]
    assert cachestate.choose(by_name(big, "axpy"), big, l2=L2, llc=LLC, cpus=8).state == SHARED


def test_traffic_beyond_the_last_level_cache_is_cold(cg_run):
    choice = cachestate.choose(by_name(cg_run, "dot"), cg_run, l2=L2, llc=8 * MB, cpus=2)
    assert choice.state == COLD and "last-level" in choice.reason


def test_when_nothing_runs_between_calls_or_the_footprint_is_unknown_it_stays_warm(cg_run):
    assert cachestate.choose(by_name(cg_run, "poisson2d"), cg_run, l2=L2, llc=LLC).state == WARM
    whole_heap = capture("dot", int(1.3 * MB), 1629, mode="heap")
    choice = cachestate.choose(whole_heap, cg_run, l2=L2, llc=LLC, cpus=2)
    assert choice.state == WARM and "whole heap" in choice.reason


def test_only_kernels_of_the_same_run_count(cg_run):
    # The same program recorded again, alone: its dot has nothing beside it.
    other_run = [capture("dot", int(1.3 * MB), 1629, run="/ws/runs/2/record")]
    assert cachestate.choose(other_run[0], cg_run + other_run, l2=L2, llc=LLC, cpus=2).state == WARM
    # Later instances of a kernel are the same kernel, not traffic beside it.
    again = cg_run + [capture("spmv", int(12.8 * MB), 814, instance=2)]
    assert cachestate.traffic_between_calls(
        by_name(cg_run, "dot"), cachestate.same_run(by_name(cg_run, "dot"), again)
    ) == cachestate.traffic_between_calls(by_name(cg_run, "dot"), cg_run)


def test_nested_kernels_are_part_of_their_callers(cg_run):
    # A solver step that calls spmv, dot and the updates, recorded too: its 15 MB hold what
    # they touch inside it. Between two dot calls runs the rest of a step.
    step = [capture("cg_step", int(15 * MB), 813)]
    nested = [capture(c.kernel, c.memory["touched_bytes"], c.app["calls"], top=0) for c in cg_run]
    dot = by_name(nested, "dot")
    assert cachestate.traffic_between_calls(dot, nested + step) == pytest.approx(
        (15 * MB * 813 - int(1.3 * MB) * 1629) / 1629
    )
    assert cachestate.choose(dot, nested + step, l2=L2, llc=LLC, cpus=2).state == SHARED
    # The step itself: nothing else runs between its calls.
    assert cachestate.traffic_between_calls(step[0], nested + step) == 0
    assert cachestate.choose(step[0], nested + step, l2=L2, llc=LLC, cpus=2).state == WARM

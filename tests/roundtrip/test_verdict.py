"""The check that acts (``roundtrip.verdict``), on its own: which candidate takes a slower
kernel's place. The Spack round trip (``test_spack_roundtrip.py``) runs the same with
real emits into a real repository; here the emits and measurements are scripted, since
no test may depend on timing."""

from types import SimpleNamespace

from spack_r3.data import Launch, Pipeline, Variant
from spack_r3.roundtrip.check import AppCheck, KernelCheck, fidelity
from spack_r3.roundtrip.verdict import act, cause_of, next_alternate
from spack_r3.search.results import Alternate, KernelResult


def result(threads, *alternates):
    """A kernel whose application ran 2 threads; its winner runs ``threads``, its
    alternates the thread counts of ``alternates``, each slower than the last."""
    return KernelResult(
        "eos",
        ["c1"],
        0.4,
        1e-3,
        5e-4,
        2.0,
        1.9,
        2.1,
        40,
        {},
        False,
        True,
        Variant(Pipeline(), Launch(threads=threads)),
        instances=[{"weight": 1.0, "threads": 2}],
        alternates=[
            Alternate(Variant(Pipeline(opt="2"), Launch(threads=t)), 1.8 - 0.1 * i, 1.7, 1.9)
            for i, t in enumerate(alternates)
        ],
    )


def measured(speedup):
    k = KernelCheck("eos", 10, 1.0, 1.0 / speedup, speedup, speedup * 0.97, speedup * 1.03, 2.0, 0.5, 0.4, 0.4)
    return AppCheck(
        "app", "t", 3, 1.0, 1 / speedup, speedup, speedup, speedup, 1.5, fidelity(speedup, 1.5), "", "", "app", [k]
    )


def test_a_threads_loss_passes_over_alternates_with_the_same_thread_count():
    r = result(1, 1, None, 1)
    cause = cause_of(measured(0.8).kernels[0], r)
    assert cause.startswith("threads: the winner runs 1 thread(s), the application 2")
    assert next_alternate(r, 0, cause) == 2  # the first alternate runs 1 thread too: passed over
    assert next_alternate(r, 2, cause_of(measured(0.8).kernels[0], r, 2)) == 3  # no threads cause now
    assert next_alternate(r, 3, "unknown") is None


def test_the_next_alternate_takes_a_slower_winners_place_until_one_holds():
    r = result(None, None, None)
    emits = []

    def emit_once(exclude, alternate):
        emits.append((exclude, alternate))
        if "eos" in exclude:
            raise AssertionError("taken out, though an alternate held")
        return SimpleNamespace(plan=SimpleNamespace(units=[SimpleNamespace(kernels=[SimpleNamespace(symbol="eos")])]))

    # the winner and the first alternate run slower in the application; the second holds
    speedups = iter([0.8, 0.9, 1.3])
    verdict = act(emit_once, lambda e: measured(next(speedups)), {"eos": r})
    assert verdict.emitted and not verdict.taken_out
    assert [a for _, a in emits] == [{}, {"eos": 1}, {"eos": 2}]
    first, second = verdict.replaced
    assert (first.round, first.app_speedup, second.round, second.app_speedup) == (1, 0.8, 2, 0.9)
    assert second.was == first.now and second.replay_speedup == r.alternates[1].speedup

"""Which calls of a kernel to capture: the ones that stand for where its time goes.

A kernel's calls can differ in cost by orders of magnitude. LULESH's ``EvalEOSForElems``
runs once per material region and repetition: its first call is a region of 123 elements,
its costly ones thousands of elements twenty times over. Tuned on the first call, a serial
code "won" by avoiding a fork that the costly calls need (0.80x in the application against
2.29x replayed). So record, with ``--instances cover`` (the default of ``r3 tune``), runs the
application twice, as CERE does: a first run with probes only logs each kernel's calls on
the main thread (``runtime/calls.c``: index, time, first arguments); the calls are split
into strata of equal shares of the kernel's time (its cheapest calls, ..., its costliest)
and one call is picked per stratum, the one at the middle of its stratum's time; the second run
captures those calls by index (``R3_CAPTURE_CALLS``). Each capture carries its stratum
(``Capture.selection``): the share of the kernel's time it stands for (its weight), the
calls and the mean call there. Replay weighs a candidate's speedups on the instances by
those shares (``replay.weighted``), and what the report predicts weighs them the same way.

    calls = load_calls(record_dir)                 # {(tu_dir, kernel): KernelCalls}
    picks = {key: kc.picks() for key, kc in calls.items()}
    env["R3_CAPTURE_CALLS"] = capture_calls_env(picks)

A run whose calls differ from the logged run's (a nondeterministic application) captures
other calls than those picked: ingest keeps each capture's own recorded time beside its
stratum's mean, and tune reports a kernel whose captures do not stand for its calls.
"""

import glob
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

COVER = "cover"
MOST_INSTANCES = 3  # strata (calls captured) per kernel
WARM_UP_AFTER = 8  # logged calls from which a kernel's first call is left out (below)
SAME_ARGS = 3  # calls with one argument tuple from which their median stands for each
ONE_SPREAD = 1.5  # time-weighted p90/p10 of the calls' costs below which one call stands for all
MERGE = 1.25  # neighbouring strata whose mean calls are within this factor are one
ENV = "R3_CAPTURE_CALLS"
LOG_ENV = "R3_CALL_LOG"
ARGS_LOGGED = 4  # argument slots the call log keeps (runtime/calls.c, LOG_ARGS)


@dataclass
class Pick:
    """One call to capture, and the stratum of the kernel's calls it stands for."""

    call: int  # its index among the main thread's calls of the kernel (0: the first)
    call_s: float  # its own time in the logged run (the stratum's call at the middle of its time)
    weight: float  # the share of the kernel's time its stratum carries (a kernel's picks sum to 1)
    calls: int  # calls in its stratum (estimated from the logged sample)
    mean_s: float  # the stratum's mean call
    low_s: float = 0.0  # the stratum's costs at 10% and 90% of its time
    high_s: float = 0.0
    kernel_mean_s: float = 0.0  # the kernel's mean call over all its logged calls
    spread: float = 1.0  # the kernel's time-weighted p90/p10 call cost

    def to_json(self):
        return asdict(self)


@dataclass
class KernelCalls:
    """One kernel's logged calls: (index, ns, first argument slots), a uniform sample by
    index (``stride``: one logged index in so many)."""

    kernel: str
    tu_dir: str
    stride: int
    calls: List[Tuple[int, int, Tuple[int, ...]]] = field(default_factory=list)

    @property
    def total_ns(self):
        return sum(ns for _, ns, _ in self.calls)

    @property
    def mean_s(self):
        return self.total_ns / len(self.calls) / 1e9 if self.calls else 0.0

    def spread(self):
        """The costs at 90% and 10% of the kernel's time (its steady calls), from its
        cheapest call up: 1 where every call costs the same."""
        return _spread(self.steady())

    def steady(self):
        """The calls to pick from: all but the first where there are many, each call's cost
        the median of the calls with its arguments where at least ``SAME_ARGS`` have them.
        A first call pays what no later one does (OpenMP starting its team, the first touch
        of every page): the demo's first call of 1,000 elements took 2 ms, its later ones
        7 us. And one call preempted on a busy machine (3.7 ms against 0.1 ms) made a
        stratum of its own: calls with the same arguments cost the same."""
        calls = self.calls
        if len(calls) >= WARM_UP_AFTER:
            calls = [c for c in calls if c[0] != 0]
        groups: Dict[Tuple[int, ...], List[int]] = {}
        for c in calls:
            groups.setdefault(c[2], []).append(c[1])
        typical = {a: sorted(ns)[len(ns) // 2] for a, ns in groups.items() if len(ns) >= SAME_ARGS}
        return [(i, typical.get(a, ns), a) for i, ns, a in calls]

    def picks(self, most=MOST_INSTANCES) -> List[Pick]:
        """The calls to capture, one per stratum of equal time, in index order."""
        calls = self.steady()
        if not calls:
            return []
        total, mean, spread = sum(c[1] for c in calls), self.mean_s, _spread(calls)
        order = sorted(calls, key=lambda c: (c[1], c[0]))
        strata: List[list] = [[]]
        if spread >= ONE_SPREAD and total > 0 and most > 1:
            strata = [[] for _ in range(most)]
            done = 0
            for c in order:
                mid = (done + c[1] / 2) / total
                strata[min(most - 1, int(mid * most))].append(c)
                done += c[1]
            strata = [s for s in strata if s]
            merged = [strata[0]]
            for s in strata[1:]:
                if _mean(s) <= MERGE * _mean(merged[-1]):
                    merged[-1] = merged[-1] + s
                else:
                    merged.append(s)
            strata = merged
        else:
            strata = [order]
        # (a stratum's calls: its share of the calls picked from, of all the kernel's calls)
        logged, last = len(calls), max(c[0] for c in self.calls) + 1
        out = []
        for s in strata:
            # The call at the middle of the stratum's time, not the one nearest its mean: where
            # a thousand 1 us calls and ten 10 ms ones are one stratum (p90/p10 of the time is 1),
            # the mean call (0.1 ms) is a cheap one, and the time is in the costly ones.
            rep = self._representative(s, _time_quantile(s, 0.5))
            out.append(
                Pick(
                    call=rep[0],
                    call_s=rep[1] / 1e9,
                    weight=(sum(c[1] for c in s) / total) if total else 1.0 / len(strata),
                    calls=max(1, round(len(s) / logged * last)),
                    mean_s=_mean(s) / 1e9,
                    low_s=_time_quantile(s, 0.1) / 1e9,
                    high_s=_time_quantile(s, 0.9) / 1e9,
                    kernel_mean_s=mean,
                    spread=spread,
                )
            )
        return sorted(out, key=lambda p: p.call)

    def _representative(self, stratum, cost):
        """The call of ``stratum`` costing ``cost`` to capture. Calls with one argument tuple
        share their median cost, so many calls tie: the one in the middle of them in time,
        not the first (LULESH's hourglass force, called alike every step, was captured at
        its second step, when the mesh has not moved yet: its call changed nothing). Where
        the ties are runs of back-to-back calls with one argument tuple (EOS energy, run
        ``rep`` times over each region: a repeat writes what its run's first call wrote),
        the middle run's first call; one run (a call a step) is not repeats."""
        ties = sorted((c for c in stratum if c[1] == cost), key=lambda c: c[0])
        before = {i: a for i, _, a in self.calls}
        starts = [c for c in ties if before.get(c[0] - 1) != c[2]]
        if len(starts) > 1:
            ties = starts
        return ties[len(ties) // 2]

    def varying_args(self):
        """The argument slots (of the first few) that take more than one value over the
        calls: what tells the calls apart, for the report ("argument 3: 1..20")."""
        out = {}
        for i in range(ARGS_LOGGED):
            values = {c[2][i] for c in self.calls if len(c[2]) > i}
            if 1 < len(values) and max(values) < 1 << 32:  # integers, not pointers or doubles
                out[i] = (min(values), max(values))
        return out


def _spread(calls):
    lo, hi = _time_quantile(calls, 0.1), _time_quantile(calls, 0.9)
    return hi / lo if lo > 0 else (1.0 if hi == 0 else float("inf"))


def _mean(stratum):
    return sum(c[1] for c in stratum) / len(stratum)


def _time_quantile(calls, q):
    """The cost of the call at fraction ``q`` of the time, calls sorted by cost."""
    total = sum(ns for _, ns, _ in calls)
    done = 0
    for _, ns, _ in sorted(calls, key=lambda c: c[1]):
        done += ns
        if done >= q * total:
            return ns
    return 0


def load_calls(record_dir) -> Dict[Tuple[str, str], KernelCalls]:
    """The call logs of a run with ``R3_CALL_LOG=1`` (``calls.<pid>.json``, one a process):
    {(tu_dir, kernel): KernelCalls}. A process other than the first to log a kernel (one the
    application started) adds nothing: indices count one process's calls."""
    out: Dict[Tuple[str, str], KernelCalls] = {}
    for path in sorted(glob.glob(os.path.join(record_dir, "calls.*.json"))):
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        for k in data.get("kernels", []):
            key = (k["tu_dir"], k["name"])
            if key in out:
                continue
            out[key] = KernelCalls(
                k["name"], k["tu_dir"], int(k.get("stride", 1)), [(c[0], c[1], tuple(c[2:])) for c in k["calls"]]
            )
    return out


def capture_calls_env(picks: Dict[Tuple[str, str], List[Pick]]) -> str:
    """``R3_CAPTURE_CALLS`` for the capturing run: ``name=i,j;name2=k``."""
    by_name: Dict[str, set] = {}
    for (_, name), ps in picks.items():
        by_name.setdefault(name, set()).update(p.call for p in ps)
    return ";".join("%s=%s" % (n, ",".join(str(c) for c in sorted(calls))) for n, calls in sorted(by_name.items()))


SELECTION_JSON = "instances.json"


def write_selection(run_dir, calls, picks):
    """``instances.json`` in the run's directory: each kernel's picks, its mean call, its
    spread and the arguments that tell its calls apart (what ingest and ``r3 kernels`` read)."""
    out = []
    for key, ps in sorted(picks.items()):
        kc = calls[key]
        out.append(
            {
                "kernel": kc.kernel,
                "tu_dir": kc.tu_dir,
                "logged_calls": len(kc.calls),
                "mean_s": kc.mean_s,
                "spread": kc.spread(),
                "varying_args": {str(i): list(r) for i, r in kc.varying_args().items()},
                "picks": [p.to_json() for p in ps],
            }
        )
    path = os.path.join(run_dir, SELECTION_JSON)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, path)
    return path


def read_selection(run_dir) -> Dict[Tuple[str, str, int], dict]:
    """{(tu_dir, kernel, call index): the pick as JSON} of a run's ``instances.json``."""
    try:
        with open(os.path.join(run_dir, SELECTION_JSON)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return {(k["tu_dir"], k["kernel"], p["call"]): p for k in data for p in k["picks"]}


def selection_of(selection, meta) -> Optional[dict]:
    """The pick a capture's ``meta.json`` was taken for, or None (a kernel captured as
    ``--instances`` says). A picked call made while another capture was in progress (a
    kernel called inside one being captured) is taken at the kernel's next call: ``picked``
    names the pick, ``call`` the call captured (kept as ``taken_call``)."""
    picked = meta.get("picked", meta.get("call"))
    if picked is None:
        return None
    found = selection.get((meta.get("tu_dir"), meta.get("kernel"), picked))
    if found is not None and meta.get("call") != picked:
        found = dict(found, taken_call=meta.get("call"))
    return found

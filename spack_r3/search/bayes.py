"""The inner loop: one Optuna study per (kernel, source variant), evaluated by replay.

Every trial is one candidate Variant replayed on the kernel's first capture by a
worker of the replay pool, scored by the paired protocol (median of baseline /
candidate time ratios, both compiled and resident in the same worker). A candidate
that does not compile, crashes, hangs or computes a different result is a FAIL
trial: it carries its status and diagnostic but no value, so it never ranks.

Study state lives in the workspace's Optuna journal (``store``: ``r3.journal``;
``optuna-dashboard .../r3.journal`` opens it), made for several writers: every trial is
kept RUNNING there, with the process that holds it, while it is evaluated, and finished
there when it is. A killed run resumes where it stopped (a trial its dead process held is
failed, never counted, and its point asked again), and several runs on one workspace
share each study: each counts the others' finished and running trials against its
budget, so two runs with ``--budget N`` end with N evaluations, not 2N. The sampler
itself works on an in-memory copy of the study (``live``), brought up to date with the
storage before each ask: asking a trial from a database costs far more of this process's
CPU than in memory (a write per parameter, every trial read back for TPE),
and this process shares the CPUs with the pinned workers it feeds. Two processes that
ask at once may both claim the budget's last trial: the later claim in the storage's
order gives way (``WITHDRAWN``).

Many points of the space give a kernel the same code: a pass with nothing to do, an
inlining threshold where nothing is called, vectorizer settings on a loop that does
not vectorize (docs/tune.md, "What shaped the search"). Trials whose code is
the same (``Evaluation.code``) are one candidate measured several times: their pairs
are pooled, each trial is told the pooled median, and the ranking has one entry per
code, its simplest variant. A lucky measurement of code that runs often is then
corrected by the others, instead of becoming the search's best (the winner's curse).

A point the sampler proposes again is not measured again: once TPE has settled it
proposes the same points over and over. One of its
neighbours nobody measured is measured instead, so the search goes on looking
around what it rates best; where the next trial is one of TPE's random draws
(``samplers.Interleaved``), that draw is, since a neighbour would take its place.
Measuring the best again is confirmation's work.

Some settings interact (``Space.blocks``: Polly's tile size, matrix-multiplication
pattern and vectorizer), and TPE, which models them from the good trials, fixes them
early, on a pattern or a tile size that another of the block beats. So when the best
code's point takes such a block,
the block is swept: every combination of its settings, first with
the other settings as built, then with the best's, in the slots that are not random
draws; only where, and while, the block's switch pays beyond noise (``switch_pays``).
At most ``MAX_SWEEPS`` per study, each around other settings, in an order of their own,
and at most ``SWEEP_SHARE`` of the evaluations a run is asked for.
"""

import os
import random
import threading
import time
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Callable, List, Optional

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState, create_trial

from ..data import COMPILE_ERROR, OK, WARM, Evaluation, Variant
from ..replay import weighted
from ..replay.engine import spread
from .confirm import each_server
from .noise import PairBudget, clearly_above, pair_noise
from .samplers import make_sampler
from .trials import (
    DUPLICATE,
    INTERRUPTED,
    WITHDRAWN,
    best_curve,
    code_key,
    counted,
    evaluation_attrs,
    point,
    pooled_ratios,
    pooled_trial,
    raced_out,
)
from .store import HEARTBEAT, held, owner, storage  # noqa: F401 (storage: where callers get it)

WAIT_S = 0.5  # between two looks at trials other processes still run, before a study is done
NEIGHBOUR_TRIES = 64  # random neighbours tried before a point proposed again is measured again
MAX_SWEEPS = 2  # sweeps of a block of interacting settings per study (as built, then around the best)
SWEEP_SHARE = 1 / 3  # the most of a run's evaluations that sweeps take (docs/tune.md)
optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass
class Outcome:
    """What a kernel's search found out beside its candidates, which its result reports:
    where its evaluations went (``search.spending``), and the model's part in its rewrites
    (``remix.ModelUse.to_json``)."""

    spending: Optional[dict] = None
    model: Optional[dict] = None


@dataclass
class Target:
    """One kernel to tune: its captures (recorded instances). A candidate is timed on the
    first, on the sequence of them all (``sequence``), or, where record picked them where
    the kernel's time goes (``weights``: each one's share of it), on each, weighed
    (``replay.weighted``)."""

    kernel: str
    captures: List[str]  # capture directories
    share: float = 0.0  # of the application's run time
    parallel: bool = False
    base: Variant = field(default_factory=Variant)  # its source patch, if any
    source_variant: str = "original"  # names the source variant: one study each
    tolerance: Optional[float] = None  # relative FP tolerance of its results (None: exact)
    cache: str = WARM  # the caches each timed run starts with (data.CACHE_STATES)
    sequence: bool = False  # timed as all its recorded calls in order (replay.sequence), in warm caches
    weights: Optional[List[float]] = None  # each capture's share of the kernel's time (record.instances)
    # tune.instances_check: its instances against its calls in the application
    instances: List[dict] = field(default_factory=list, compare=False)
    replay_ratio: Optional[float] = None  # replay's call / the application's, time-weighted
    unrepresentative: Optional[str] = None  # why its captures do not stand for its calls
    # screen(variant) -> why it is rejected before any run, or None (r3 tune --gpu: device.hook.Screener)
    screen: Optional[Callable] = field(default=None, repr=False, compare=False)
    # filled in by the search (a target made from this one by replace() starts afresh)
    outcome: Outcome = field(default_factory=Outcome, init=False, repr=False, compare=False)

    @property
    def capture_id(self):
        return os.path.basename(self.captures[0])

    def submit(self, server, variant, **kw):
        """Replay ``variant`` of this kernel on ``server``: its first recorded call, or the
        sequence of them all; held to the kernel's tolerance, timed in its cache state.
        A variant its screen rejects is a compile error, and nothing runs."""
        reason = self.screen(variant) if self.screen is not None else None
        if reason:
            return Evaluation(
                capture=self.capture_id,
                variant=variant.to_json(),
                status=COMPILE_ERROR,
                diagnostics="rejected before any run: " + reason,
            )
        if self.weights and not self.sequence:
            # Racing against the best so far is per instance unsound: a candidate that
            # loses on one stratum may win the weighted sum. Every pair is measured.
            kw.pop("race", None)
            return weighted.combine(
                [
                    server.submit(capture, variant, tolerance=self.tolerance, cache=self.cache, **kw)
                    for capture in self.captures
                ],
                self.weights,
            )
        return server.submit(
            self.captures[0],
            variant,
            tolerance=self.tolerance,
            cache=WARM if self.sequence else self.cache,
            sequence=self.captures if self.sequence else None,
            **kw,
        )


@dataclass
class Progress:
    """What a study has done so far, for progress lines."""

    kernel: str
    done: int
    budget: int
    best: Optional[float]
    failed: int


def others(values, block):
    """``values`` without the settings of ``block``."""
    return {k: v for k, v in values.items() if k not in block}


def switch_pays(ranked, switch):
    """Whether the best of ``ranked`` (trials, best first) runs ``switch`` and is faster
    beyond noise than every one that does not (none measured: nothing says otherwise).
    Polly changes the code of most kernels without making it faster: a sweep there would
    spend a block's every combination on noise."""
    if not ranked or not ranked[0].params.get(switch):
        return False
    without = next((t.value for t in ranked if not t.params.get(switch)), None)
    return without is None or clearly_above(ranked[0].value, without)


class Study:
    """The search of one (kernel, source variant) with one sampler, resumable.

    study = Study(storage(ws), target, space, sampler="tpe")
    study.run(pool.servers, budget=60)
    study.best(3)   # the top finished trials, best first
    """

    def __init__(
        self, store, target, space, sampler="tpe", seed=None, pairs=5, timeout=60.0, seeds=(), noise=(), sweeps=True
    ):
        self.target, self.space = target, space
        self.timeout = timeout
        self._rng = random.Random(seed)  # picks neighbours of points proposed again
        self._sweeps = sweeps and sampler == "tpe"  # random search stays the control: no sweeps
        self._sweep = []  # (switch, values): points of the sweep under way not yet asked
        self._budget = 0  # the largest budget a run was asked for (sweeps take a share of it)
        self._centers = []  # the points sweeps began around ({"block", "values"}; kept in the study)
        # ``pairs`` per evaluation at first, more where this kernel's pairs prove noisy
        # (``noise``: one pair's noise in evaluations of the kernel's other studies).
        self.pair_budget = PairBudget(pairs, prior=noise)
        self.name = "%s@%s/%s/%s/%s" % (
            target.kernel,
            target.capture_id,
            target.source_variant,
            sampler,
            space.fingerprint(),
        )
        if target.sequence:  # measured otherwise: a study of its own
            self.name += "/sequence"
        elif target.cache != WARM:
            self.name += "/" + target.cache
        # ``study`` is what is kept (the storage, shared with other processes): the study's
        # attributes and its trials, running and finished. ``live`` is what the sampler works
        # on (memory): the same trials, brought up to date before each ask, and the ones
        # enqueued here.
        self.study = optuna.create_study(study_name=self.name, storage=store, direction="maximize", load_if_exists=True)
        self._store, self._study_id = store, self.study._study_id
        self.study.set_user_attr("kernel", target.kernel)
        self.study.set_user_attr("captures", [os.path.basename(c) for c in target.captures])
        self.study.set_user_attr("space", space.describe())
        self.live = optuna.create_study(
            direction="maximize",
            sampler=make_sampler(
                sampler,
                seed,
                values=lambda: [t.value for t in self.live.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))],
            ),
        )
        self._lock = threading.Lock()
        self._owner = owner()
        # Stored trials ``live`` has: {stored id: live id while another process runs it, else
        # None}; this process's trials in flight: {live id: stored id}; points enqueued to be
        # measured once (skipped when measured by the time they are asked).
        self._copies, self._own, self._once = {}, {}, set()
        with self._lock:
            self._sync()  # a resumed study asks the pairs it had come to (``_noted``)
        if sampler == "tpe":
            # The Bayesian search starts from what is known to matter: ``seeds`` (e.g. the best
            # pipelines of the original, for a source variant), then the space's own; those a
            # run before this one evaluated are not asked again.
            for values in list(seeds) + space.seeds():
                self.enqueue(values, {"seed": True})
            self._centers = self.study.user_attrs.get("sweeps", [])
            for center in self._centers:  # a killed run's go on (measured points are skipped)
                self._sweep += self._sweep_points(center)

    def extend(self, servers, n, progress=None):
        """Evaluate ``n`` trials more than are counted now."""
        self.run(servers, len(self.trials()) + n, progress)

    def enqueue(self, values, attrs=None, once=True):
        """Have ``values`` evaluated next, before the sampler's own choices (``once``: unless
        a trial already has them, by now or by the time they are asked)."""
        self.live.enqueue_trial(values, user_attrs=attrs, skip_if_exists=once)
        if once:
            self._once.add(point(values))

    def pending(self):
        """Parameter values enqueued and not yet asked, in order."""
        return [
            t.system_attrs["fixed_params"] for t in self.live.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        ]

    def trials(self):
        return [t for t in self.live.get_trials(deepcopy=False) if counted(t)]

    def refresh(self):
        """Take in what other processes did to the study since (``trials``, ``best``...)."""
        with self._lock:
            self._sync()

    def pair_noises(self):
        """One pair's noise in each verified evaluation so far (a prior for the kernel's
        other studies: ``Study(..., noise=...)``)."""
        return list(self.pair_budget.noises)

    def _sync(self):
        """Bring ``live`` up to date with the storage (the caller holds the lock): the trials
        other processes started or finished since. A running trial whose process died is
        failed there (never counted) and its point asked again; so are trials that an older
        r3 left running or enqueued."""
        for t in self._store.get_all_trials(self._study_id, deepcopy=False):
            if self._copies.get(t._trial_id, 0) is None:  # followed no further
                continue
            if t.state == TrialState.RUNNING and not held(t):
                t = self._interrupt(t)
            copy_id = self._copies.get(t._trial_id)
            if t.state == TrialState.WAITING:
                self._requeue(t)
            elif copy_id is None:  # new here
                if counted(t) or t.state == TrialState.RUNNING:
                    copy_id = self.live._storage.create_new_trial(self.live._study_id, template_trial=t)
                self._copies[t._trial_id] = copy_id if t.state == TrialState.RUNNING else None
                if counted(t):
                    self._noted(t)
            elif t.state != TrialState.RUNNING:  # another process's, finished since
                live = self.live._storage
                for key, value in t.user_attrs.items():
                    live.set_trial_user_attr(copy_id, key, value)
                live.set_trial_state_values(copy_id, t.state, t.values if t.state == TrialState.COMPLETE else None)
                self._copies[t._trial_id] = None
                if counted(t):
                    self._noted(t)

    def _noted(self, t):
        self.pair_budget.add((t.user_attrs.get("evaluation") or {}).get("pair_noise"))

    def _interrupt(self, t):
        """Fail stored trial ``t``, whose process died while it ran; returns it as it is now
        (another process may have failed it first)."""
        try:
            self._store.set_trial_user_attr(t._trial_id, "status", INTERRUPTED)
            self._store.set_trial_state_values(t._trial_id, TrialState.FAIL)
        except UpdateFinishedTrialError:
            pass
        self._requeue(t)
        return self._store.get_trial(t._trial_id)

    def _requeue(self, t):
        """Ask stored trial ``t``'s point again, unless it is measured by then."""
        if t.params:
            self.live.enqueue_trial(t.params, user_attrs={"requeued_from": t.number}, skip_if_exists=False)
            self._once.add(point(t.params))
        self._copies.setdefault(t._trial_id, None)

    def _taken(self):
        """Trials counted against a budget: finished and counted, or running here or in a
        process that lives (the caller holds the lock and has synced)."""
        return sum(1 for t in self.live.get_trials(deepcopy=False) if t.state == TrialState.RUNNING or counted(t))

    def _running_elsewhere(self):
        """Live ids of the trials other processes were running at the last sync."""
        return {c for c in self._copies.values() if c is not None}

    def run(self, servers, budget, progress=None):
        """Evaluate trials on ``servers`` (one thread each) until ``budget`` are counted,
        other processes' included; returns once the trials those were running have
        finished too, so that every run sharing the study confirms the same trials.
        Whatever a thread raises (a full disk under the journal, a bug) ends the run, raised
        here once every thread has stopped: the trials finished before it are kept, and
        one the thread held is failed where the storage still takes it (else the next run
        fails it, its process gone)."""
        with self._lock:
            self._budget = max(self._budget, budget)
        errors, ended = [], []

        def report():  # (the caller holds the lock)
            if progress:
                finished = self.trials()
                best = self.best(1)
                progress(
                    Progress(
                        self.target.kernel,
                        len(finished),
                        max(budget, len(finished)),
                        best[0].value if best else None,
                        sum(t.state == TrialState.FAIL for t in finished),
                    )
                )

        def drive(server):
            # Every way out of a thread is told: an exception that only ended its thread left
            # the loop below asking again, forever (a full disk at ``_claim``: 70% of a CPU
            # for 13 minutes until interrupted).
            held = []  # the trial this thread has asked, until told
            try:
                evaluate(server, held)
            except BaseException as err:
                errors.append(err)
                with self._lock:
                    for trial in held:
                        self._abandon(trial)
            finally:
                ended.append(server)

        def evaluate(server, held):
            while not errors:
                with self._lock:
                    self._sync()
                    if self._taken() >= budget:
                        return
                    trial, values = self._ask()
                    held[:] = [trial]
                    if not self._claim(trial, budget):
                        return
                    best = max((t.value for t in self.best(1)), default=None)
                    pairs = self.pair_budget.pairs()
                variant = self.space.variant(values, self.target.base)

                def measure(pairs, variant=variant, race=False):
                    return self.target.submit(server, variant, pairs=pairs, timeout=self.timeout, race=race)

                t0 = time.monotonic()
                # raced: a candidate clearly slower than the best so far (the build at
                # least) after its first pairs stops there; it could not have been the best.
                # (A capture that is unusable raises: that stops this study, in ``drive``.)
                ev = measure(pairs, race=max(1.0, best or 0.0))
                noise = pair_noise(ev.ratios) if ev.status == OK and not ev.raced_out else None
                # A candidate that would be the new best is measured again with twice its
                # pairs (and verified again) before it counts: the best of many 5-pair
                # medians is mostly luck (on a memory-bound stencil where nothing beats -O3,
                # the 5 best screened above the build, about even measured again), and a lucky
                # value misleads the sampler and every later comparison with it.
                if ev.status == OK and not ev.raced_out:
                    with self._lock:
                        pooled = self._pooled(ev)
                    if best is None or pooled > best:
                        ev = remeasured(ev, measure(2 * pairs))
                with self._lock:
                    self.pair_budget.add(noise)
                    held.clear()  # (told, even should the storage refuse it: ``_tell``)
                    self._tell(trial, variant, ev, time.monotonic() - t0, noise)
                    report()

        while True:
            with self._lock:
                report()
            each_server(servers, drive)
            if errors:
                raise errors[0]
            if len(ended) < len(servers):  # a thread that died before ``drive``: never wait on it
                raise RuntimeError(
                    "%d of %d study threads ended without a word" % (len(servers) - len(ended), len(servers))
                )
            ended.clear()
            with self._lock:
                self._sync()
                waiting = self._running_elsewhere()
            while waiting:  # (no timing decides: each ends, or its process dies)
                time.sleep(WAIT_S)
                with self._lock:
                    self._sync()
                    waiting &= self._running_elsewhere()
                    report()
            with self._lock:
                if self._taken() >= budget:  # else a process died holding some: ours to run
                    return

    def _claim(self, trial, budget):
        """Keep ``trial`` (asked in ``live``) RUNNING in the storage, held by this process;
        whether it is within ``budget``, counted with the trials claimed before it in the
        storage's order (finished and counted, or held by a process that lives). A process
        that asked at the same time as this one sees the same order: of two claims of the
        budget's last trial, the later gives way. The caller holds the lock."""
        frozen = create_trial(
            state=TrialState.RUNNING,
            params=trial.params,
            distributions=trial.distributions,
            user_attrs=dict(trial.user_attrs, owner=self._owner, beat=time.time()),
        )
        stored_id = self._store.create_new_trial(self._study_id, template_trial=frozen)
        self._copies[stored_id] = None
        self._own[trial._trial_id] = stored_id
        HEARTBEAT.hold(self._store, stored_id)  # (another host's runs see it live by its beats)
        stored = self._store.get_all_trials(self._study_id, deepcopy=False)
        number = next(t.number for t in stored if t._trial_id == stored_id)
        ahead = sum(
            1 for t in stored if t.number < number and (counted(t) or (t.state == TrialState.RUNNING and held(t)))
        )
        if ahead < budget:
            return True
        self._drop(trial, WITHDRAWN)
        return False

    def _drop(self, trial, status):
        """Fail this process's ``trial`` in flight with ``status`` (one never counted)."""
        trial.set_user_attr("status", status)
        self.live.tell(trial, state=TrialState.FAIL)
        stored_id = self._own.pop(trial._trial_id)
        HEARTBEAT.release(self._store, stored_id)
        try:
            self._store.set_trial_user_attr(stored_id, "status", status)
            self._store.set_trial_state_values(stored_id, TrialState.FAIL)
        except UpdateFinishedTrialError:  # another process took it for dead
            pass

    def _abandon(self, trial):
        """Fail this process's ``trial`` after an error stopped its evaluation (the caller
        holds the lock) wherever it still can, never raising for the storage: what that
        refuses (a full disk) stays RUNNING there, held by this process, and once it ends
        the next run takes the trial for dead, fails it and asks its point again."""
        stored_id = self._own.pop(trial._trial_id, None)
        if stored_id is not None:
            HEARTBEAT.release(self._store, stored_id)
        if self.live._storage.get_trial(trial._trial_id).state == TrialState.RUNNING:  # (else told already)
            trial.set_user_attr("status", INTERRUPTED)
            self.live.tell(trial, state=TrialState.FAIL)
        if stored_id is None:
            return
        try:
            self._store.set_trial_user_attr(stored_id, "status", INTERRUPTED)
            self._store.set_trial_state_values(stored_id, TrialState.FAIL)
        except Exception:  # (refused, or failed by another process already): the error told is the first
            pass

    def _ask(self):
        """The next trial and its values (the caller holds the lock): what was enqueued
        (unless enqueued to be measured once and measured by now), or the sampler's point,
        or where that point was measured before, a neighbour of it nobody measured (or the
        sampler's next random draw, where that comes next)."""
        while True:
            enqueued = bool(self.live.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
            if not enqueued and self._sweep:
                enqueued = self._enqueue_sweep_point()
            trial = self.live.ask()
            values = self.space.suggest(trial)
            if not enqueued:
                break
            if point(values) in self._once and point(values) in self._points(but=trial.number):
                trial.set_user_attr("status", DUPLICATE)  # (measured since, here or elsewhere)
                self.live.tell(trial, state=TrialState.FAIL)
                continue
            return trial, values  # asked for on purpose (a seed, a point a killed run had in flight)
        seen = self._points(but=trial.number)
        if point(values) not in seen:
            return trial, values
        # A neighbour asked next would take the place of a random draw of ``Interleaved``.
        draws_next = self._draws(trial.number + 1)
        other = None if draws_next else self._unmeasured_neighbour(values, seen)
        if other is None and not draws_next:  # a small space, measured all around
            return trial, values  # measured again: its pairs pool
        trial.set_user_attr("status", DUPLICATE)
        self.live.tell(trial, state=TrialState.FAIL)  # TPE ignores failed trials
        if other is not None:
            self.enqueue(other, {"instead_of": trial.number}, once=False)
        trial = self.live.ask()
        return trial, self.space.suggest(trial)

    def _draws(self, number):
        """Whether trial ``number`` is one of the sampler's random draws (``Interleaved``)."""
        explores = getattr(self.live.sampler, "explores", None)
        return bool(explores and explores(number))

    def _enqueue_sweep_point(self):
        """Enqueue the sweep's next point nobody measured, unless the next trial is a random
        draw or sweeps had their share of the run (``SWEEP_SHARE``); whether one was. A sweep
        whose switch no longer pays is dropped (code without the switch may take the lead
        while a sweep runs, and the sweeps would take the run's budget)."""
        trials = self.live.get_trials(deepcopy=False)
        if (
            self._draws(len(trials))
            or sum(bool(t.user_attrs.get("sweep")) for t in trials) >= SWEEP_SHARE * self._budget
        ):
            return False
        seen = self._points(but=None)
        ranked = self.best(len(self._code_groups()))
        while self._sweep:
            switch, values = self._sweep.pop(0)
            if not switch_pays(ranked, switch):
                self._sweep = [(s, v) for s, v in self._sweep if s != switch]
            elif point(values) not in seen:
                self.enqueue(values, {"sweep": True}, once=False)
                return True
        return False

    def _sweep_points(self, center):
        """(switch, values) of a sweep around ``center`` ({"block", "values"}), in an order of
        its own (the same on resume): a sweep cut short by its share still spans the block,
        not its first tile sizes only."""
        block = tuple(center["block"])
        switch = next((s for s, b in self.space.blocks().items() if tuple(b) == block), None)
        if switch is None:  # a block this space no longer has
            return []
        points = self.space.sweep(center["values"], block)
        random.Random(point(center["values"])).shuffle(points)
        return [(switch, values) for values in points]

    def _plan_sweep(self):
        """Where the best code's point takes a block of interacting settings and no sweep is
        under way, sweep the block: first with every other setting as built, then with the
        best's (the caller holds the lock). The block's best combination depends on the rest
        (the dense demo's matrix product: Polly's pattern off and the nest strip-mined paid
        as built, and far less with fast-math, the best's then)."""
        if not self._sweeps or self._sweep or len(self._centers) >= MAX_SWEEPS:
            return
        ranked = self.best(len(self._code_groups()))
        for switch, block in self.space.blocks().items():
            if not switch_pays(ranked, switch):
                continue
            best = ranked[0]
            swept = [others(c["values"], block) for c in self._centers if c["block"] == list(block)]
            for values in (self.space.plain(switch), best.params):
                if others(values, block) not in swept:
                    self._centers.append({"block": list(block), "values": values})
                    self.study.set_user_attr("sweeps", self._centers)
                    self._sweep = self._sweep_points(self._centers[-1])
                    return

    def _unmeasured_neighbour(self, values, seen):
        for _ in range(NEIGHBOUR_TRIES):
            other = self.space.neighbour(values, self._rng)
            if point(other) not in seen:
                return other
        return None

    def _points(self, but):
        """The points measured or being measured, except trial number ``but``'s."""
        return {
            point(t.params)
            for t in self.live.get_trials(deepcopy=False)
            if t.number != but and (t.state == TrialState.RUNNING or counted(t))
        }

    def _pooled(self, ev):
        """The median of ``ev``'s pairs and those of every finished trial that ran its code
        (the caller holds the lock)."""
        same = self._code_groups().get(code_key({"code": ev.code, "variant": ev.variant}), [])
        ratios = ev.ratios + pooled_ratios(same)
        return median(ratios) if ratios else ev.speedup

    def _code_groups(self):
        """The finished trials by the code they ran: {code_key: [trial, ...]}."""
        groups = {}
        for t in self.trials():
            if t.state == TrialState.COMPLETE:
                groups.setdefault(code_key(t.user_attrs["evaluation"]), []).append(t)
        return groups

    def _tell(self, trial, variant, ev, seconds, noise=None):
        attrs = dict(trial.user_attrs, status=ev.status, evaluation=evaluation_attrs(variant, ev, seconds, noise))
        for key in ("status", "evaluation"):
            trial.set_user_attr(key, attrs[key])
        state, value = (TrialState.COMPLETE, self._pooled(ev)) if ev.status == OK else (TrialState.FAIL, None)
        self.live.tell(trial, value, state=state)
        stored_id = self._own.pop(trial._trial_id)
        HEARTBEAT.release(self._store, stored_id)
        try:  # (the state last: another process takes the trial in once it is finished)
            for key in ("status", "evaluation"):
                self._store.set_trial_user_attr(stored_id, key, attrs[key])
            self._store.set_trial_state_values(stored_id, state, None if value is None else [value])
        except UpdateFinishedTrialError:  # another process took this one for dead: kept anew
            self._keep(
                create_trial(
                    state=state, value=value, params=trial.params, distributions=trial.distributions, user_attrs=attrs
                )
            )
        if state == TrialState.COMPLETE:
            self._plan_sweep()

    def add_evaluated(self, values, variant, ev, seconds=0.0):
        """Count an evaluation made outside the study, of ``variant`` at ``values``, as a
        finished trial: a source variant's check at the baseline settings, which may be the
        best that variant reaches (matmul's unroll-and-jam: faster at -O3 than with the
        Polly settings its study tried first) and is then a candidate like the others."""
        scratch = optuna.create_study(direction="maximize")  # gives values their distributions
        scratch.enqueue_trial(values)
        asked = scratch.ask()
        self.space.suggest(asked)
        with self._lock:
            attrs = {"check": True, "status": ev.status, "evaluation": evaluation_attrs(variant, ev, seconds, None)}
            state, value = (TrialState.COMPLETE, self._pooled(ev)) if ev.status == OK else (TrialState.FAIL, None)
            trial = create_trial(
                state=state, value=value, params=asked.params, distributions=asked.distributions, user_attrs=attrs
            )
            self.live.add_trial(trial)
            self._keep(trial)

    def _keep(self, trial):
        """Add finished ``trial`` (a FrozenTrial ``live`` has already) to the storage."""
        self._copies[self._store.create_new_trial(self._study_id, template_trial=trial)] = None

    def best(self, n=1):
        """The ``n`` best codes, best first: for each, its simplest trial, with the value,
        spread and pairs of all the trials that ran that code."""
        groups = [ts for ts in self._code_groups().values() if not all(raced_out(t) for t in ts)]
        ranked = sorted(groups, key=lambda ts: (-median(pooled_ratios(ts)), min(t.number for t in ts)))
        return [pooled_trial(ts) for ts in ranked[:n]]

    def curve(self):
        """Best verified speedup after each evaluation (None before the first success)."""
        return best_curve(self.trials())

    def failures(self):
        """Failed evaluations by kind: {"wrong-output": 3, ...}."""
        kinds = {}
        for t in self.trials():
            if t.state == TrialState.FAIL:
                kind = t.user_attrs.get("status", "failed")
                kinds[kind] = kinds.get(kind, 0) + 1
        return kinds


def remeasured(first, again):
    """One evaluation of a candidate measured twice: every pair of both counts; if the
    second measurement failed (a race that verified once by luck), so did the candidate."""
    if again.status != OK:
        return again
    ratios = first.ratios + again.ratios
    speedup, low, high = spread(ratios)
    return replace(
        first,
        speedup=speedup,
        speedup_min=low,
        speedup_max=high,
        pairs=len(ratios),
        ratios=ratios,
        resampled=first.resampled + again.resampled,
        verify_runs=first.verify_runs + again.verify_runs,
        stages={k: first.stages.get(k, 0.0) + again.stages.get(k, 0.0) for k in {**first.stages, **again.stages}},
    )


class StudyGroup:
    """The studies of one kernel seen as one search: the original's and its source
    variants' (``remix``), with failed rewrites that never got a study (``checks``:
    their statuses)."""

    def __init__(self, studies, checks=()):
        self.studies, self.checks = list(studies), list(checks)
        self.name = self.studies[0].name
        self.study = self.studies[0].study  # the original's stored study keeps the group's attributes

    def trials(self):
        return [t for s in self.studies for t in s.trials()]

    def refresh(self):
        for s in self.studies:
            s.refresh()

    def best(self, n=1):
        ranked = sorted((t for s in self.studies for t in s.best(n)), key=lambda t: -t.value)
        return ranked[:n]

    def curve(self):
        """Best verified speedup after each evaluation, across the studies in time order."""
        return best_curve(self.trials())

    def failures(self):
        kinds = {}
        for s in self.studies:
            for kind, n in s.failures().items():
                kinds[kind] = kinds.get(kind, 0) + n
        for status in self.checks:
            kinds[status] = kinds.get(status, 0) + 1
        return kinds

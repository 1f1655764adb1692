"""The check that acts: no tuned variant is left slower than the untuned build.

Replay's verdict is a prediction. LULESH through Spack's recipe was emitted at 1.36x
predicted and ran 0.97x in the application: two of its three kernels ran slower there
(0.80x, 0.63x) than untuned. So after emit, the check (``check.check_app``) measures
``+r3`` against ``~r3`` in the application, and each tuned kernel inside it; then

1. every kernel measured slower in the application than untuned (the median of its
   pairs below 1) gets its next confirmed candidate in its winner's place
   (``KernelResult.alternates``; one that shares the winner's thread count is passed over
   where threads are the likely cause), or, with none left, is taken out of the variant,
   which is emitted and measured again;
2. where no kernel alone is slower but the application is not faster, the kernel that
   gained least in the application goes, and again;
3. when nothing is left, or the application is not faster with no kernel to take out,
   the variant is withdrawn (``emit.withdraw``): no variant is emitted, and the verdict
   says why.

A kernel whose speedup in the application disagrees with replay's beyond the spread of its
pairs is flagged with the likely cause, read from its tune result: its instances (replay's
call far from the application's, or captures that do not stand for its calls), its threads
(the winner runs another thread count than the application), its caches.

    verdict = act(lambda exclude, alternate: emit(ws, pkg, exclude=exclude, alternate=alternate),
                  lambda e: check_app(ws, e, ...), results)

``emit_once(exclude, alternate)`` writes the variant without the kernels of ``exclude``
({kernel: why}) and with the alternates of ``alternate`` ({kernel: n}: its n-th, from 1)
in their winners' places, and raises ``R3Error`` when no kernel is left;
``check_once(emitted)`` measures it (``check.AppCheck``).
"""

from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional

from ..data import WARM
from ..errors import R3Error
from ..search.results import describe_variant
from .emit import withdraw

AGREE = 1.05  # beyond the range of a kernel's pairs by this factor, replay and the application disagree


@dataclass
class TakenOut:
    kernel: str
    round: int  # the check (1: the first) that measured it
    app_speedup: float
    app_speedup_min: float
    app_speedup_max: float
    replay_speedup: float
    why: str  # slower in the application; or the least gain, where the application was not faster
    cause: str  # the likely cause of the disagreement with replay

    def line(self):
        """What the plan's exclusion says and the progress line shows: one wording."""
        return "taken out after check %d: %.2fx [%.2f-%.2f] in the application (replay %.2fx), %s" % (
            self.round,
            self.app_speedup,
            self.app_speedup_min,
            self.app_speedup_max,
            self.replay_speedup,
            self.why,
        )


@dataclass
class Replaced:
    """A kernel slower in the application, given its next confirmed candidate instead."""

    kernel: str
    round: int  # the check that measured it slower
    app_speedup: float  # what the candidate it replaces ran in the application
    was: str  # that candidate, in words
    now: str  # its replacement, in words
    replay_speedup: float  # the replacement's, in replay
    cause: str

    def line(self):
        return (
            "after check %d ran %s at %.2fx in the application (%s): its next confirmed candidate %s (replay %.2fx)"
            % (
                self.round,
                self.was,
                self.app_speedup,
                self.cause,
                self.now,
                self.replay_speedup,
            )
        )


@dataclass
class Flag:
    """A kernel whose speedup in the application disagrees with replay's beyond its spread."""

    kernel: str
    app_speedup: float
    replay_speedup: float
    cause: str


@dataclass
class Verdict:
    emitted: bool  # a tuned variant is left in the repository
    why: str = ""  # why none is, when none is
    checks: List[dict] = field(default_factory=list)  # each round's AppCheck, as JSON
    taken_out: List[TakenOut] = field(default_factory=list)
    replaced: List[Replaced] = field(default_factory=list)
    flagged: List[Flag] = field(default_factory=list)  # of the last check

    @property
    def check(self) -> Optional[dict]:
        """The last check: of the variant left, or of the last one withdrawn."""
        return self.checks[-1] if self.checks else None

    def to_json(self):
        return asdict(self)


def act(emit_once: Callable, check_once: Callable, results: Dict[str, object], say=None, acting=True) -> Verdict:
    """Emit, check, take out what is slower in the application, until what is left holds
    (or nothing is). ``results``: {kernel: its tune result (``search.results.KernelResult``)}
    for the causes. ``acting`` False: one check, the variant kept whatever it measured
    (``r3 tune --keep-variant``: to inspect it), its disagreements flagged."""
    say = say or (lambda line: None)
    exclude: Dict[str, str] = {}
    alternate: Dict[str, int] = {}
    verdict = Verdict(emitted=False)
    emitted = None
    while True:
        try:
            current = emit_once(dict(exclude), dict(alternate))
        except R3Error as err:
            if emitted is not None:  # the last variant measured is slower: it goes
                withdraw(emitted)
            verdict.why = (
                "every tuned kernel was taken out of the variant: %s"
                % "; ".join("%s %s" % (k, w) for k, w in exclude.items())
                if exclude
                else str(err)
            )
            say("no tuned variant: %s" % verdict.why)
            return verdict
        emitted = current
        check = check_once(emitted)
        verdict.checks.append(check.to_json())
        verdict.flagged = flags(check, results, alternate)
        for f in verdict.flagged:
            say(
                "%s: %.2fx in the application against %.2fx in replay; likely cause: %s"
                % (f.kernel, f.app_speedup, f.replay_speedup, f.cause)
            )
        rnd = len(verdict.checks)
        slower = [k for k in check.kernels if k.app_speedup < 1.0]
        why, least_gain = "slower in the application than untuned", False
        planned = [k.symbol for u in emitted.plan.units for k in u.kernels]
        if not acting or (not slower and check.app_speedup > 1.0):
            verdict.emitted = True
            return verdict
        if not slower:
            measured = sorted(check.kernels, key=lambda k: k.app_speedup)
            if len(planned) < 2 or not measured:
                withdraw(emitted)
                verdict.why = "the application ran %.2fx [%.2f-%.2f] with +r3 against ~r3, not faster%s" % (
                    check.app_speedup,
                    check.app_speedup_min,
                    check.app_speedup_max,
                    "" if measured else " (its kernels were not timed inside it: %s)" % (check.kernels_error or "-"),
                )
                say("tuned variant withdrawn: %s" % verdict.why)
                return verdict
            slower, least_gain = measured[:1], True
            why = "the least gain in the application, which was not faster (%.2fx) with it" % check.app_speedup
        for k in slower:
            cause = cause_of(k, results.get(k.kernel), alternate.get(k.kernel, 0))
            if not least_gain:  # (a kernel that gains a little is not replaced by one replay found slower)
                n = next_alternate(results.get(k.kernel), alternate.get(k.kernel, 0), cause)
                if n is not None:
                    result = results[k.kernel]
                    now = result.alternates[n - 1]
                    swap = Replaced(
                        k.kernel,
                        rnd,
                        k.app_speedup,
                        describe_variant(_variant(result, alternate.get(k.kernel, 0))),
                        describe_variant(now.variant),
                        now.speedup,
                        cause,
                    )
                    verdict.replaced.append(swap)
                    alternate[k.kernel] = n
                    say("%s: %s" % (k.kernel, swap.line()))
                    continue
            taken = TakenOut(
                k.kernel,
                rnd,
                k.app_speedup,
                k.app_speedup_min,
                k.app_speedup_max,
                k.replay_speedup,
                why,
                cause,
            )
            verdict.taken_out.append(taken)
            exclude[k.kernel] = taken.line()
            say("taking %s out of the variant: %s" % (k.kernel, exclude[k.kernel]))


def flags(check, results, alternate=None) -> List[Flag]:
    """The kernels of ``check`` whose speedup in the application lies beyond the range of
    their pairs from replay's (by ``AGREE``), each with its likely cause (``alternate``:
    see ``act``)."""
    alternate = alternate or {}
    out = []
    for k in check.kernels:
        if k.app_speedup_min / AGREE <= k.replay_speedup <= k.app_speedup_max * AGREE:
            continue
        cause = cause_of(k, results.get(k.kernel), alternate.get(k.kernel, 0))
        out.append(Flag(k.kernel, k.app_speedup, k.replay_speedup, cause))
    return out


def _variant(result, n):
    """The result's winner (``n`` 0) or its n-th alternate."""
    return result.alternates[n - 1].variant if n else result.variant


def next_alternate(result, n, cause) -> Optional[int]:
    """The alternate (from 1) after the ``n``-th (0: the winner) to try in the kernel's
    place, or None: the next one not yet tried, passing over those that run the same
    thread count as the one that lost where threads are the likely ``cause`` (they would
    lose the same way)."""
    if result is None:
        return None
    lost = _variant(result, n).launch.threads
    for i in range(n + 1, len(result.alternates) + 1):
        if cause.startswith("threads") or "; threads" in cause:
            if result.alternates[i - 1].variant.launch.threads == lost:
                continue
        return i
    return None


def cause_of(kernel_check, result, n=0) -> str:
    """The likely cause of a kernel's speedup in the application differing from replay's,
    from its tune result (``n``: its n-th alternate ran, not its winner): instances,
    threads, caches, in that order."""
    if result is None:
        return "unknown (no tune result)"
    causes = []
    if getattr(result, "unrepresentative", None):
        causes.append("instances: %s" % result.unrepresentative)
    elif result.replay_ratio and not 1 / 1.5 <= result.replay_ratio <= 1.5:
        causes.append(
            "instances: its captured calls replay in %.2fx the time of its calls in the application"
            % result.replay_ratio
        )
    recorded = next((i.get("threads") for i in result.instances if i.get("threads")), None)
    threads = _variant(result, n).launch.threads
    if threads is not None and recorded and threads != recorded:
        causes.append("threads: the winner runs %d thread(s), the application %d" % (threads, recorded))
    if result.cache == WARM and kernel_check.app_speedup < kernel_check.replay_speedup:
        causes.append("caches: replay timed it in warm caches")
    return "; ".join(causes) or "unknown (noise in the application, or the code around the kernel)"

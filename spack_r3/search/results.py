"""What tuning found, per kernel: the result record, the table, the report files.

A kernel's result is made once, by ``kernel_result``: whether a variant beat the build is
decided there (``noise.beats_build``) and kept as ``KernelResult.won``, with the winning
``Variant`` itself (typed; JSON only on disk). It is written once, to
``results/<first capture id>.json`` (``save_results``), which emit, retarget and mep read.
The report (``<workspace>/reports/tune.txt``, ``tune.json``, ``tune.png``) is a view of
the run's results, rewritten at the end of every ``r3 tune`` and never read back: the
table, each winner's variant, and a plot of the best verified speedup against
evaluations per kernel.
"""

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, fields
from statistics import median
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from .. import cxxnames
from ..data import WARM, Json, Variant
from ..errors import R3Error
from ..fileutil import write_atomic
from ..capture import load_capture_dir
from ..compile import specialize
from ..compile.pipeline import as_built, format_spec
from ..report import percent, seconds, table
from .noise import WIN_ABOVE, beats_build, clearly_faster
from .simplify import settings

if TYPE_CHECKING:  # (annotations only)
    from ..workspace import Workspace
    from .bayes import Target
    from .confirm import Confirmed
from .spending import spending_table


@dataclass
class Alternate:
    """A confirmed candidate beside the winner that also beats the build: what the check in
    the application puts in the winner's place when the winner runs slower there
    (``roundtrip.verdict``)."""

    variant: Variant
    speedup: float  # confirmation's median of its pairs
    speedup_min: float  # lowest and highest of its round medians
    speedup_max: float

    def to_json(self) -> Json:
        return dict(asdict(self), variant=self.variant.to_json())

    @classmethod
    def from_json(cls, data: Json) -> "Alternate":
        return cls(**dict(data, variant=Variant.from_json(data["variant"])))


# Alternates a result keeps: each one the check tries costs an application build and run.
ALTERNATES = 3


@dataclass
class KernelResult:
    kernel: str
    captures: List[str]
    share: float
    baseline_s: Optional[float]
    best_s: Optional[float]
    speedup: float  # re-measured: median of every pair of the winner's last measurement (see kernel_result)
    speedup_min: float  # lowest and highest of its round medians
    speedup_max: float
    evaluations: int
    failed: Dict[str, int]
    relaxes_fp: bool
    won: bool  # a variant beat the build (``noise.beats_build``, decided once, here); else ``variant`` is the build
    variant: Variant  # the winner (the kernel as built when nothing beat it)
    search_speedup: Optional[float] = None  # what the search measured for the winner, before confirmation
    picked_speedup: Optional[float] = None  # what confirmation measured, when ``speedup`` was measured again
    pairs: int = 0  # confirmation pairs behind ``speedup``
    study: str = ""
    rejected: List[str] = field(default_factory=list)  # candidates dropped by confirmation, and why
    curve: List[Optional[float]] = field(default_factory=list)  # best search speedup after each evaluation
    tolerance: Optional[float] = None
    cache: str = WARM  # the caches each timed run started with (data.CACHE_STATES)
    calls: int = 1  # recorded calls each timed run replayed in order (replay.sequence; warm caches)
    # What a model gave its source variants (remix.ModelUse: asked, answered, rewrites, error); None: no model
    model: Optional[dict] = None
    # The winner's arguments folded in as constants behind a guard (``specialize.named``): ["n=300"]
    specialized: List[str] = field(default_factory=list)
    # Where its evaluations went (``spending``): {"split": {"pipelines": 18, ...}, "handover": 18, "plateau": True}
    spending: Optional[dict] = None
    # Its instances (``tune.instances_check``): [{weight, calls, app_s, replay_s, picked, threads,
    # speedup (the winner's there)}], the time-weighted ratio of replay's call to the
    # application's, and why they do not stand for its calls (None: they do)
    instances: List[dict] = field(default_factory=list)
    replay_ratio: Optional[float] = None
    unrepresentative: Optional[str] = None
    # The best confirmed candidate that runs one thread, and the best that runs several
    # (the application's OpenMP threads, its own count, or threads a rewrite adds): a
    # threaded kernel's serial code wins on its cheap calls (no fork to pay) and may lose
    # where the time goes, so the two are reported apart
    serial_speedup: Optional[float] = None
    threaded_speedup: Optional[float] = None
    # The other confirmed candidates that beat the build, fastest first (at most ALTERNATES)
    alternates: List[Alternate] = field(default_factory=list)

    @property
    def winner(self) -> str:
        """The winner in words (``describe_variant``), or "baseline" when nothing beat the build."""
        return describe_variant(self.variant) if self.won else BASELINE

    def to_json(self) -> Json:
        d = asdict(self)
        d["variant"] = self.variant.to_json()
        d["alternates"] = [a.to_json() for a in self.alternates]
        d["winner"] = self.winner  # (for readers of the JSON; not read back)
        d["kernel_demangled"] = cxxnames.demangle(self.kernel)
        d["failed_total"] = sum(self.failed.values())
        return d

    @classmethod
    def from_json(cls, data: Json) -> "KernelResult":
        names = {f.name for f in fields(cls)}
        kept: Dict[str, Any] = {k: v for k, v in data.items() if k in names}
        kept["variant"] = Variant.from_json(data.get("variant") or {})
        kept["alternates"] = [Alternate.from_json(a) for a in data.get("alternates") or []]
        if "won" not in data:  # written before ``won``: its "baseline" sentinel, and emit's threshold
            kept["won"] = data.get("winner") != BASELINE and beats_build(data.get("speedup", 1.0))
        return cls(**kept)


BASELINE = "baseline"  # the winner column of a kernel nothing beat


def describe_variant(variant: Variant) -> str:
    """A variant in words: its pipeline SPEC, then launch settings."""
    words = [format_spec(variant.pipeline)]
    if variant.source_patch:  # the rewrite first: it is what a build of the winner patches in
        knobs = ",".join("%s=%s" % kv for kv in sorted(variant.source_defines.items()))
        words.insert(0, "rewrite[%s%s]" % (variant.source_rule or "patch", (" " + knobs) if knobs else ""))
    launch = variant.launch
    for key in ("threads", "schedule", "chunk"):
        value = getattr(launch, key, None)
        if value is not None:
            words.append("%s=%s" % (key, value))
    return " ".join(words)


def holds(c: "Confirmed") -> bool:
    """Whether a confirmed candidate may win: faster in every round, beyond noise overall."""
    return bool(
        not c.rejected and not c.screened_out and c.ratios and beats_build(c.speedup) and min(c.round_speedups) > 1.0
    )


def pick(confirmed: Sequence["Confirmed"]) -> Optional["Confirmed"]:
    """The winner among confirmed candidates, or None when none beats the baseline: a
    winner is faster in every confirmation round, and by more than noise overall
    (``noise.beats_build``). The best
    median that fails that loses to a slower one that holds (near the noise floor the
    three best differ by less than a round's spread). Among those the best that holds is
    not clearly faster than (``noise.clearly_faster``), the variant with fewest settings wins:
    less to build, less to break. (A fixed 2% there could pick a variant 2% slower than
    one that confirmation's pairs told apart by 1%.)"""
    holding = [c for c in confirmed if holds(c)]
    best = max(holding, key=lambda c: c.speedup, default=None)
    if best is None:
        return None
    return min(
        (c for c in holding if not clearly_faster(best.round_ratios, c.round_ratios)),
        key=lambda c: (len(settings(c.variant)), -c.speedup),
    )


def kernel_result(
    target: "Target", study: Any, confirmed: Sequence["Confirmed"], again: Optional["Confirmed"] = None
) -> KernelResult:
    """The kernel's result: the ``pick`` of its confirmed candidates, its speedup from
    ``again`` (``confirm.measure_again`` of that pick) when given, since the pairs a pick
    was made by read high. A pick that does not beat the build (``noise.beats_build``)
    measured again leaves the kernel its baseline (``won`` False: nothing to emit)."""
    best = pick(confirmed)
    measured = again if best and again is not None else best
    # (a pick that does not hold measured again: listed among the rejected, with its figure)
    below = measured if measured and not measured.rejected and measured.ratios else None
    below = below if below and not beats_build(below.speedup) else None
    if measured is not None and (measured.rejected or not measured.ratios or below):
        measured = None
    any_measured = measured or next((c for c in confirmed if c.baseline_times), None)
    baseline_s = median(any_measured.baseline_times) if any_measured else None
    trials = study.trials()
    rejected = ["%s: %s" % (describe_variant(c.variant), c.rejected) for c in confirmed if c.rejected]
    if again is not None and again.rejected:
        rejected.append("%s: %s" % (describe_variant(again.variant), again.rejected))
    if below:
        rejected.append(
            "%s: %.3fx over the build, within noise (a winner needs above %.3fx)"
            % (describe_variant(below.variant), below.speedup, WIN_ABOVE)
        )
    common = dict(
        kernel=target.kernel,
        captures=[os.path.basename(c) for c in target.captures],
        share=target.share,
        evaluations=len(trials),
        failed=study.failures(),
        study=study.name,
        curve=study.curve(),
        rejected=rejected,
        tolerance=target.tolerance,
        cache=WARM if target.sequence else target.cache,
        calls=len(target.captures) if target.sequence else 1,
        picked_speedup=best.speedup if best and again is not None else None,
        model=target.outcome.model,
        spending=target.outcome.spending,
        replay_ratio=target.replay_ratio,
        unrepresentative=target.unrepresentative,
        **_by_threads(target, confirmed),
    )
    if measured is None:
        return KernelResult(
            baseline_s=baseline_s,
            best_s=baseline_s,
            speedup=1.0,
            speedup_min=1.0,
            speedup_max=1.0,
            relaxes_fp=False,
            won=False,
            variant=Variant(pipeline=as_built(load_capture_dir(target.captures[0], False))),
            pairs=len(again.ratios if again is not None else best.ratios) if best else 0,
            search_speedup=best.search_speedup if best else None,
            instances=_instances(target, None),
            **common,
        )
    assert best is not None  # (``measured`` is the pick, or the pick measured again)
    specialized = specialize.named(load_capture_dir(target.captures[0], False), best.variant.pipeline.specialize)
    return KernelResult(
        baseline_s=baseline_s,
        best_s=median(measured.times),
        speedup=measured.speedup,
        speedup_min=min(measured.round_speedups),
        speedup_max=max(measured.round_speedups),
        relaxes_fp=best.variant.pipeline.relaxes_fp,
        won=True,
        variant=best.variant,
        search_speedup=best.search_speedup,
        pairs=len(measured.ratios),
        specialized=specialized,
        instances=_instances(target, measured),
        alternates=alternates(confirmed, best),
        **common,
    )


def alternates(confirmed: Sequence["Confirmed"], best: "Confirmed") -> List[Alternate]:
    """The confirmed candidates other than ``best`` that hold as a winner must (every
    round faster, beyond noise), fastest first."""
    holding = [c for c in confirmed if c is not best and c.variant != best.variant and holds(c)]
    holding.sort(key=lambda c: -c.speedup)
    return [Alternate(c.variant, c.speedup, min(c.round_speedups), max(c.round_speedups)) for c in holding[:ALTERNATES]]


def runs_threads(variant: Variant, recorded: Optional[int], parallel: bool) -> bool:
    """Whether a variant of a kernel runs several threads: its own thread count, else the
    application's (``recorded``) where the kernel forks (``parallel``), or a rewrite's."""
    from .openmp import adds_threads

    threads = variant.launch.threads if variant.launch.threads is not None else (recorded if parallel else 1)
    return (threads or 1) > 1 or adds_threads(variant)


def _by_threads(target: "Target", confirmed: Sequence["Confirmed"]) -> Dict[str, Optional[float]]:
    """The best confirmed speedup of the candidates that run one thread, and of those that
    run several."""
    recorded = (target.instances or [{}])[0].get("threads")
    best: Dict[str, Optional[float]] = {"serial_speedup": None, "threaded_speedup": None}
    for c in confirmed:
        if c.rejected or not c.ratios:
            continue
        several = runs_threads(c.variant, recorded, target.parallel)
        key = "threaded_speedup" if several else "serial_speedup"
        if best[key] is None or c.speedup > best[key]:
            best[key] = c.speedup
    return best


def _instances(target: "Target", measured: Optional["Confirmed"]) -> List[dict]:
    """The target's instance rows with the winner's speedup on each (median over rounds)."""
    rows = [dict(r) for r in target.instances]
    if measured is not None and measured.instance_speedups and len(measured.instance_speedups[0]) == len(rows):
        for i, r in enumerate(rows):
            values = [s[i] for s in measured.instance_speedups if s[i] is not None]
            r["speedup"] = median(values) if values else None
    return rows


def failures_text(failed: Dict[str, int]) -> str:
    return ", ".join("%d %s" % (n, kind) for kind, n in sorted(failed.items())) or "-"


def results_table(results: Sequence[KernelResult]) -> str:
    rows = []
    for r in results:
        rows.append(
            [
                cxxnames.display(r.kernel),
                percent(r.share),
                seconds(r.baseline_s),
                seconds(r.best_s),
                "%.2fx [%.2f-%.2f]" % (r.speedup, r.speedup_min, r.speedup_max),
                r.evaluations,
                failures_text(r.failed),
                r.winner + (" *" if r.relaxes_fp else ""),
            ]
        )
    text = table(["kernel", "share", "baseline", "best", "speedup", "evals", "failed", "winner"], rows)
    if any(r.relaxes_fp for r in results):
        text += "\n* relaxes floating-point semantics (within the kernel's tolerance)"
    for r in results:
        if r.specialized:
            text += "\n%s: specialized on %s (a guard runs the original for other values)" % (
                cxxnames.display(r.kernel),
                ", ".join(r.specialized),
            )
    for r in results:
        line = instances_line(r)
        if line:
            text += "\n" + line
    for r in results:
        if r.model is not None:
            text += "\n%s" % model_line(r)
    return text


def instances_line(r: KernelResult) -> str:
    """What a kernel was timed on, where that is more than its first call or where its
    captures do not stand for its calls; and its best serial and threaded codes apart."""
    parts = []
    picked = [i for i in r.instances if i.get("picked")]
    if len(picked) > 1:
        text = "timed on %d calls picked where its time goes (weights %s" % (
            len(picked),
            " / ".join("%.0f%%" % (100 * i["weight"]) for i in picked),
        )
        if all(i.get("speedup") for i in picked):
            text += "; the winner %s on them" % " / ".join("%.2fx" % i["speedup"] for i in picked)
        parts.append(text + ")")
    if r.serial_speedup is not None and r.threaded_speedup is not None:
        parts.append("best serial %.2fx, best threaded %.2fx" % (r.serial_speedup, r.threaded_speedup))
    if r.unrepresentative:
        parts.append("NOT REPRESENTATIVE: " + r.unrepresentative)
    return ("%s: %s" % (cxxnames.display(r.kernel), "; ".join(parts))) if parts else ""


def model_line(result: KernelResult) -> str:
    """What the model gave a kernel, in words."""
    m = result.model or {}
    line = "model, %s: %d request(s), %d answered, %d usable rewrite(s)" % (
        cxxnames.display(result.kernel),
        m.get("asked", 0),
        m.get("answered", 0),
        m.get("rewrites", 0),
    )
    if not m.get("rewrites"):
        line += ": the model gave nothing"
    return line + ("; last error: %s" % m["error"] if m.get("error") else "")


def save_results(workspace: "Workspace", results: Sequence[KernelResult]) -> None:
    """Keep each kernel's result, once: ``results/<its first capture's id>.json``. (Earlier
    runs wrote a copy under each capture's id; those of its other captures go.)"""
    os.makedirs(workspace.results_dir, exist_ok=True)
    for r in results:
        write_atomic(workspace.result_file(r.captures[0]), json.dumps(r.to_json(), indent=1))
        for cid in r.captures[1:]:
            try:
                os.remove(workspace.result_file(cid))
            except FileNotFoundError:
                pass


def result_digest(result: KernelResult) -> str:
    """What a study keeps of its confirmed result: the digest of the one in ``results/``."""
    return hashlib.sha256(json.dumps(result.to_json(), sort_keys=True).encode()).hexdigest()


def load_result(workspace: "Workspace", capture_id: str, strict: bool = False) -> Optional[KernelResult]:
    """The saved KernelResult of the kernel a capture belongs to, or None. A results file
    that does not read is no result; with ``strict``, where no result is found and such a
    file could have been it (the capture's own, or one whose captures cannot be read), a
    R3Error says it is corrupt, naming it."""
    corrupt: List[Tuple[str, str]] = []
    found = _read_result(workspace.result_file(capture_id), corrupt)
    if found is not None or not os.path.isdir(workspace.results_dir):
        return _none_unless_corrupt(found, corrupt, strict)
    for name in sorted(os.listdir(workspace.results_dir)):  # a capture other than its kernel's first
        path = os.path.join(workspace.results_dir, name)
        if not name.endswith(".json") or path == workspace.result_file(capture_id):
            continue
        other = _read_result(path, corrupt)
        if other is not None and capture_id in other.captures:
            return other
    return _none_unless_corrupt(None, corrupt, strict)


def _none_unless_corrupt(
    found: Optional[KernelResult], corrupt: List[Tuple[str, str]], strict: bool
) -> Optional[KernelResult]:
    if found is None and strict and corrupt:
        path, why = corrupt[0]
        raise R3Error(
            "the tuning result %s is corrupt (%s): move it aside, or run r3 tune again%s"
            % (path, why, "" if len(corrupt) == 1 else " (%d more results are corrupt)" % (len(corrupt) - 1))
        )
    return found


def _read_result(path: str, corrupt: Optional[List[Tuple[str, str]]] = None) -> Optional[KernelResult]:
    """The KernelResult in ``path``, or None; one that is there but does not read is added
    to ``corrupt`` as (path, why)."""
    try:
        with open(path) as f:
            return KernelResult.from_json(json.load(f))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        if corrupt is not None:
            if isinstance(err, json.JSONDecodeError) and not err.doc.strip():
                why = "empty"
            elif isinstance(err, OSError):
                why = err.strerror or str(err)
            else:
                why = "no %s field" % err if isinstance(err, KeyError) else str(err)
            corrupt.append((path, why))
        return None


def write_report(workspace: "Workspace", results: Sequence[KernelResult], header: str = "") -> Dict[str, str]:
    """The report files in the workspace; returns their paths."""
    out = workspace.reports_dir
    os.makedirs(out, exist_ok=True)
    paths = {
        "text": os.path.join(out, "tune.txt"),
        "json": os.path.join(out, "tune.json"),
        "plot": os.path.join(out, "tune.png"),
    }
    lines = [header, results_table(results), ""] if header else [results_table(results), ""]
    for r in results:
        lines.append("%s: %s" % (cxxnames.display(r.kernel), r.winner))
        lines.append("  variant %s" % json.dumps(r.variant.to_json(), sort_keys=True))
        lines.append(
            "  search found %s, re-measured %.3fx over %d pairs; study %s"
            % ("-" if r.search_speedup is None else "%.3fx" % r.search_speedup, r.speedup, r.pairs, r.study)
        )
        for why in r.rejected:
            lines.append("  rejected %s" % why)
    if spending_table(results):
        lines += ["", spending_table(results)]
    write_atomic(paths["text"], "\n".join(lines) + "\n")
    write_atomic(paths["json"], json.dumps({"kernels": [r.to_json() for r in results]}, indent=1) + "\n")
    plot_curves(results, paths["plot"])
    return paths


def plot_curves(results: Sequence[KernelResult], path: str) -> None:
    """PNG: best verified speedup (as the search measured it) against evaluations."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for r in results:
        xs = [i + 1 for i, v in enumerate(r.curve) if v is not None]
        ys = [v for v in r.curve if v is not None]
        if xs:
            (line,) = ax.step(
                xs, ys, where="post", label="%s (confirmed %.2fx)" % (cxxnames.display(r.kernel, 30), r.speedup)
            )
            ax.plot([xs[-1]], [r.speedup], "o", color=line.get_color())
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("evaluations")
    ax.set_ylabel("best speedup over the kernel as built")
    ax.set_title("r3 tune: best verified speedup per kernel (dot: re-measured)")
    if ax.get_legend_handles_labels()[0]:  # (no kernel with a verified candidate: no curve to name)
        ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = "%s.%d.tmp.png" % (path, os.getpid())  # (two runs may write it at once)
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, path)

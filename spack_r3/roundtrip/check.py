"""The check after emit: ``<package>+r3`` against ``<package>~r3``, built by Spack, timed in
the application, paired.

Both builds come from the tuned recipe in the workspace's sandbox (``~r3`` is the
original recipe's build); each pair runs them one after the other, in alternating order,
and the pair's ratio (untuned / tuned wall time) is one sample. The prediction is replay's:
each tuned kernel's share of the run shrunk by its confirmed speedup (Amdahl).

Then each tuned kernel inside the application: ``+r3+r3probes`` and ``~r3+r3probes`` put
record's probe wrapper in front of the planned kernels (tuned and untuned; nothing else
differs), paired runs with ``R3_CAPTURE=none`` write each kernel's time, and the ratio of
the two is set against the speedup replay measured for that kernel.

A kernel specialized on recorded arguments runs its clone only when a call's arguments
match the recording: the tuned runs count each guard's calls and matches
(``$R3_SPEC_LOG``), and status flags a guard that never matched (the run used other sizes).

Which shares: the timed untuned build's, once it ran, each kernel's time as the outermost
tuned kernel on the stack. A tuned kernel runs its callees as its own copies, built with
its pipeline, and replay measured it with them: a tuned kernel called from another one
(XSBench's grid search, from the cross-section lookup) is in its caller's speedup there,
and in its own only where nothing tuned called it. The recorded run's shares are
biased low: record's probes on every function and its heap bookkeeping slow the rest of
the run (bench/README.md has dense's figure), so a prediction from
them understates what tuning the kernels gains. The timed untuned build differs from the
plain one only by a probe on each planned kernel.
"""

import os
import shutil
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import List, Optional

from ..childoutput import run_captured, short
from ..emit.apply import planned_symbol
from ..emit.plan import amdahl
from ..errors import R3Error
from ..record.profiles import load_profiles, outer_share_of, share_of
from ..compile.specialize import LOG_ENV, read_counts
from ..toolchain import find_clang
from .emit import default_repo
from .record import install, open_site, prebuild_runtimes, with_clang


@dataclass
class KernelCheck:
    """One tuned kernel's time inside the application, untuned against tuned."""

    kernel: str
    calls: int
    untuned_s: float  # medians of the timed runs (inclusive time, summed over threads)
    tuned_s: float
    app_speedup: float  # median of the pair ratios
    app_speedup_min: float
    app_speedup_max: float
    replay_speedup: float  # what replay measured (the plan's)
    fidelity: float
    share: float = 0.0  # of the untuned application's run, its own code (median over the timed untuned runs)
    outer_share: float = 0.0  # the same, as the outermost tuned kernel on the stack (what the prediction weighs)


@dataclass
class AppCheck:
    package: str
    target: str
    pairs: int
    app_untuned_s: float  # medians of the runs
    app_tuned_s: float
    app_speedup: float  # median of the pair ratios
    app_speedup_min: float
    app_speedup_max: float
    predicted_app_speedup: float  # replay's kernel speedups over the shares named by shares_from
    fidelity: float  # (app_speedup - 1) / (predicted - 1); 1.0 is replay's prediction exactly
    tuned_prefix: str
    untuned_prefix: str
    run: str
    kernels: List[KernelCheck] = field(default_factory=list)
    kernels_error: Optional[str] = None  # why the timed builds did not measure them
    shares_from: str = "recorded run"  # or "timed untuned build"
    predicted_from_recorded_shares: Optional[float] = None
    # Specialized kernels' guards over the tuned runs (``guard_counts``): [{kernel, calls, hits}]
    guards: List[dict] = field(default_factory=list)

    def to_json(self):
        return asdict(self)


def fidelity(measured, predicted):
    if abs(predicted - 1.0) < 1e-6:
        return 1.0 if abs(measured - 1.0) < 0.02 else 0.0
    return (measured - 1.0) / (predicted - 1.0)


def _timed(command, cwd, env, timeout):
    start = time.perf_counter()
    # (its output read as it comes, only its end kept: childoutput)
    proc = run_captured(command, shell=True, cwd=cwd, env=env, timeout=timeout, stdout_head=0, merge=True, group=True)
    seconds = time.perf_counter() - start
    if proc.timed_out:
        raise subprocess.TimeoutExpired(command, timeout)
    if proc.returncode != 0:
        tail = [l for l in proc.stdout.splitlines() if l.strip()][-1:] or ["(no output)"]
        raise R3Error("%s failed with exit code %d: %s" % (command, proc.returncode, short(tail[0])))
    return seconds


def check_app(
    workspace,
    emitted,
    spec,
    run,
    pairs=5,
    user_scopes=(),
    extra_repos=(),
    repo_root=None,
    timeout=600,
    say=None,
    kernel_pairs=3,
):
    """Build ``spec`` +r3 and ~r3 from the tuned repository and time ``run`` in both; then,
    with ``kernel_pairs``, the timed builds for each tuned kernel's time in the run."""
    say = say or (lambda line: None)
    if not run:
        raise R3Error("the check needs a run command to time (--run)")
    site = open_site(workspace, user_scopes, extra_repos, front_repo=emitted_repo_path(repo_root, workspace), say=say)
    prebuild_runtimes(find_clang())  # (the timed builds link record's runtime; confined, they cannot build it)
    base = os.path.join(workspace.spack_dir, "check", emitted.package)
    builds = _builds(site, spec, base, (("+r3", "tuned"), ("~r3", "untuned")), say)
    runs = {flag: [] for flag in builds}
    ratios = []
    guard_log = os.path.join(builds["+r3"].cwd, "guards.log")  # the specialized kernels' guards (apply.py)
    if os.path.exists(guard_log):
        os.unlink(guard_log)
    builds["+r3"].env[LOG_ENV] = guard_log
    for i, order in enumerate(_alternating(pairs, "~r3", "+r3")):
        for flag in order:
            runs[flag].append(_timed(run, builds[flag].cwd, builds[flag].env, timeout))
        ratios.append(runs["~r3"][-1] / runs["+r3"][-1])
        say(
            "pair %d/%d: untuned %.3fs, tuned %.3fs (%.2fx)"
            % (i + 1, pairs, runs["~r3"][-1], runs["+r3"][-1], ratios[-1])
        )
    kernels, kernels_error = [], None
    if kernel_pairs > 0:
        try:
            kernels = check_kernels(site, emitted, spec, run, base, kernel_pairs, timeout, say)
        except R3Error as err:  # the application's check stands without them
            kernels_error = str(err)
            say("kernel times inside the application not measured: %s" % err)
    recorded = emitted.plan.predicted_app_speedup()
    if kernels:
        predicted, shares_from = amdahl((k.outer_share, k.replay_speedup) for k in kernels), "timed untuned build"
    else:
        predicted, shares_from = recorded, "recorded run"
    measured = statistics.median(ratios)
    guards = guard_counts(emitted.plan, guard_log)
    for g in guards:
        say("%s: its guard matched the recorded arguments in %d of %d calls" % (g["kernel"], g["hits"], g["calls"]))
    return AppCheck(
        emitted.package,
        emitted.target,
        pairs,
        statistics.median(runs["~r3"]),
        statistics.median(runs["+r3"]),
        measured,
        min(ratios),
        max(ratios),
        predicted,
        fidelity(measured, predicted),
        builds["+r3"].prefix,
        builds["~r3"].prefix,
        run,
        kernels,
        kernels_error,
        shares_from,
        recorded,
        guards,
    )


def guard_counts(plan, log):
    """Each specialized kernel of ``plan``: how many calls its guard saw in the runs that
    wrote ``log`` (``$R3_SPEC_LOG``), and how many matched the recorded arguments (ran the
    clone). [{kernel, calls, hits}]; a kernel absent from the log was not called."""
    counts = {}
    for name, (calls, hits) in read_counts(log).items():
        c = counts.setdefault(planned_symbol(name), [0, 0])
        c[0] += calls
        c[1] += hits
    return [
        {"kernel": k.symbol, "calls": counts.get(k.symbol, [0, 0])[0], "hits": counts.get(k.symbol, [0, 0])[1]}
        for u in plan.units
        for k in u.kernels
        if k.pipeline.specialize
    ]


@dataclass
class _Build:
    prefix: str
    env: dict
    cwd: str


def _builds(site, spec, base, flags, say):
    out = {}
    for flag, label in flags:
        say("building %s %s through Spack (%s)" % (spec, flag, label))
        # no spaces: a dev_path spec names its private copy under this directory
        name = label.replace(" ", "-")
        prefix = install(site, with_clang(spec, flag), os.path.join(base, name), "the %s build" % flag).prefix
        cwd = os.path.join(base, "run-" + name)
        os.makedirs(cwd, exist_ok=True)
        out[flag] = _Build(
            prefix, dict(os.environ, PATH=os.path.join(prefix, "bin") + os.pathsep + os.environ.get("PATH", "")), cwd
        )
    return out


def _alternating(pairs, first, second):
    """Pair orders, alternating, so neither build always runs first (warm caches, clocks)."""
    return [(first, second) if i % 2 == 0 else (second, first) for i in range(pairs)]


def check_kernels(site, emitted, spec, run, base, pairs, timeout, say):
    """Each planned kernel's time in the run, timed builds untuned against tuned, paired."""
    builds = _builds(site, spec, base, (("+r3+r3probes", "timed tuned"), ("~r3+r3probes", "timed untuned")), say)
    times = {flag: [] for flag in builds}  # per run: {kernel: (total seconds, calls, share)}
    for i, order in enumerate(_alternating(pairs, "~r3+r3probes", "+r3+r3probes")):
        for flag in order:
            out = os.path.join(builds[flag].cwd, "profile-%d" % i)
            shutil.rmtree(out, ignore_errors=True)
            _timed(run, builds[flag].cwd, dict(builds[flag].env, R3_RECORD_DIR=out, R3_CAPTURE="none"), timeout)
            times[flag].append(_kernel_times(out))
        say("kernel times %d/%d" % (i + 1, pairs))
    out = []
    for unit in emitted.plan.units:
        for k in unit.kernels:
            key = planned_symbol(k.symbol)  # (an offload region: its function and line)
            pairs_seen = [
                (u[key], t[key])
                for u, t in zip(times["~r3+r3probes"], times["+r3+r3probes"])
                if key in u and key in t and t[key].seconds > 0
            ]
            if not pairs_seen:
                called = any(key in u for u in times["~r3+r3probes"])
                say(
                    "%s: %s"
                    % (
                        k.symbol,
                        "called only by other tuned kernels (as their own copies)"
                        if called
                        else "not called in the timed runs",
                    )
                )
                continue
            ratios = [u.seconds / t.seconds for u, t in pairs_seen]
            measured = statistics.median(ratios)
            out.append(
                KernelCheck(
                    k.symbol,
                    pairs_seen[0][1].calls,
                    statistics.median(u.seconds for u, _ in pairs_seen),
                    statistics.median(t.seconds for _, t in pairs_seen),
                    measured,
                    min(ratios),
                    max(ratios),
                    k.speedup,
                    fidelity(measured, k.speedup),
                    statistics.median(u.share for u, _ in pairs_seen),
                    statistics.median(u.outer_share for u, _ in pairs_seen),
                )
            )
    return out


@dataclass
class _KernelTime:
    """One kernel in one timed run."""

    seconds: float = 0.0  # inclusive, summed over threads
    calls: int = 0
    share: float = 0.0  # of the run: its own code (record.profiles.share_of)
    outer_share: float = 0.0  # of the run: as the outermost tuned kernel (capture.outer_share_of)


def _kernel_times(record_dir):
    """{kernel: _KernelTime} of one timed run."""
    stats, app_s = load_profiles(record_dir)
    out = {}
    for (_, name), s in stats.items():
        t = out.setdefault(planned_symbol(name), _KernelTime())
        t.seconds += s["total_ns"] / 1e9
        t.calls += s["calls"]
        t.share += share_of(s, app_s) or 0.0
        t.outer_share += outer_share_of(s, app_s) or 0.0
    return out


def emitted_repo_path(repo_root, workspace):
    from ..spack.repos import open_repo

    repo = open_repo(repo_root or default_repo(workspace))
    if repo is None:
        raise R3Error("no tuned repository at %s (spack r3 emit writes it)" % (repo_root or default_repo(workspace)))
    return repo.path

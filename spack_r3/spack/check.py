"""The check after emit: ``<package>+r3`` against ``<package>~r3``, built by Spack, timed in
the application, paired.

Both builds come from the tuned recipe in the workspace's sandbox (``~r3`` is the
original recipe's build); each pair runs them one after the other, in alternating order,
and the pair's ratio (untuned / tuned wall time) is one sample. The prediction is replay's:
each tuned kernel's share of the recorded run shrunk by its confirmed speedup (Amdahl).
"""

import os
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass

from ..errors import R3Error
from .emit import default_repo
from .record import install, open_site, with_clang


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
    predicted_app_speedup: float
    fidelity: float  # (app_speedup - 1) / (predicted - 1); 1.0 is replay's prediction exactly
    tuned_prefix: str
    untuned_prefix: str
    run: str

    def to_json(self):
        return asdict(self)


def fidelity(measured, predicted):
    if abs(predicted - 1.0) < 1e-6:
        return 1.0 if abs(measured - 1.0) < 0.02 else 0.0
    return (measured - 1.0) / (predicted - 1.0)


def _timed(command, cwd, env, timeout):
    start = time.perf_counter()
    proc = subprocess.run(command, shell=True, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace", timeout=timeout)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        tail = [l for l in proc.stdout.splitlines() if l.strip()][-1:] or ["(no output)"]
        raise R3Error("%s failed with exit code %d: %s" % (command, proc.returncode, tail[0]))
    return seconds


def check_app(workspace, emitted, spec, run, pairs=5, user_scopes=(), extra_repos=(), repo_root=None,
              timeout=600, say=None):
    """Build ``spec`` +r3 and ~r3 from the tuned repository and time ``run`` in both."""
    say = say or (lambda line: None)
    if not run:
        raise R3Error("the check needs a run command to time (--run)")
    site = open_site(workspace, user_scopes, extra_repos, front_repo=emitted_repo_path(repo_root, workspace))
    base = os.path.join(workspace.root, "spack", "check", emitted.package)
    prefixes, envs, cwds = {}, {}, {}
    for flag, label in (("+r3", "tuned"), ("~r3", "untuned")):
        say("building %s %s through Spack (%s)" % (spec, flag, "tuned: r3-apply" if flag == "+r3" else "untuned"))
        prefix = install(site, with_clang(spec) + " " + flag, os.path.join(base, label), "the %s build" % flag).prefix
        prefixes[flag] = prefix
        envs[flag] = dict(os.environ, PATH=os.path.join(prefix, "bin") + os.pathsep + os.environ.get("PATH", ""))
        cwds[flag] = os.path.join(base, "run-" + label)
        os.makedirs(cwds[flag], exist_ok=True)
    runs = {flag: [] for flag in prefixes}
    ratios = []
    for i in range(pairs):
        order = ("~r3", "+r3") if i % 2 == 0 else ("+r3", "~r3")
        for flag in order:
            runs[flag].append(_timed(run, cwds[flag], envs[flag], timeout))
        ratios.append(runs["~r3"][-1] / runs["+r3"][-1])
        say("pair %d/%d: untuned %.3fs, tuned %.3fs (%.2fx)" % (i + 1, pairs, runs["~r3"][-1], runs["+r3"][-1],
                                                                ratios[-1]))
    predicted = emitted.plan.predicted_app_speedup()
    measured = statistics.median(ratios)
    return AppCheck(emitted.package, emitted.target, pairs, statistics.median(runs["~r3"]),
                    statistics.median(runs["+r3"]), measured, min(ratios), max(ratios), predicted,
                    fidelity(measured, predicted), prefixes["+r3"], prefixes["~r3"], run)


def emitted_repo_path(repo_root, workspace):
    from .repos import open_repo

    repo = open_repo(repo_root or default_repo(workspace))
    if repo is None:
        raise R3Error("no tuned repository at %s (spack r3 emit writes it)" % (repo_root or default_repo(workspace)))
    return repo.path

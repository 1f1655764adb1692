#!/usr/bin/env python3
"""Operations under faults, measured: what a kill, a full disk, a torn file or a second run
does to a workspace (issue 57; the guarantees of docs/workspace.md).

Each trial runs the real ``r3`` (``python -m spack_r3.cli``, a process of its own, as a
user runs it) on a copy of a workspace made once at the start, with one fault:

  kill -9      the command's own process killed (``kill -9 PID``: its children are left to
               notice) after a delay drawn at random from the command's own measured
               duration (``WINDOW``: a share of it; emit spends most of its time starting
               Python and r3, so its kills are drawn from 0.8 of ``r3 --version``'s time on)
  SIGINT       the same, Ctrl-C as a terminal sends it: to the command's process group
  disk full    the workspace (and the emit's repository) on a real small file system: a
               tmpfs of a few MB mounted in a mount namespace of the trial's own
               (``unshare -m``, as tests/search/test_study_storage_faults.py does), filled
               but for a random number of bytes drawn from what the command writes there
  <file> cut   a workspace file truncated at a random length (emptied in a quarter of
               the trials; the journal's tail cut within its last three lines): the
               studies (``r3.journal``), a ``capture.json``, a capture's data (pre.bin,
               post.bin, module.bc, source.c, headers), a run's ``record.json``, a result
               (``results/*.json``), a report, the rules' files (``remix/*.json``,
               ``patterns.json``), a cached object, an emitted plan (``r3-<uarch>.json``)
               or package file (``package.py``, ``repo.yaml``)
  N concurrent N copies of one ``r3 tune`` of one kernel on one workspace, started at once

The commands: ``r3 record`` (heat, ``./heat 64 4``, on a workspace that holds a record of
dense already), ``r3 tune`` of jacobi_step (``--budget 4 --mutator rules``, one pair; on a
workspace where residual2 was tuned already), ``r3 emit`` (heat's record marked as a Spack
record, as tests/test_stale_inputs_and_emit_txn.py does, into a repository holding an older
package: the emit replaces it), ``r3 kernels`` and ``r3 recipe`` (a recipe generated for
heat's tree, ``--no-install --max-attempts 1``: it drives Spack, ``spack spec``, in the
workspace's own Spack; a minute a run, so few trials).

Per trial: the fault's point (seconds, or bytes), the exit status, whether failure output
is one line (stderr's last line ``r3 <command>: ...``, or ``r3: ...`` when stopped before
it knew its command; no traceback anywhere in it; not judged for exit 0 or kill -9) and names the problem (``interrupted``; ``No space left on
device``; the cut file or its capture), processes the command left running (``orphans``,
found by an environment token; then killed), whether it left Optuna's lock of the journal
(``r3.journal.lock``, a file: the next run waits 30 s for it, then breaks it), and what
was lost: each capture listed before (bar the one whose ``capture.json`` the fault cut)
still listed and whole, each completed trial of the journal that still read after the
fault still there with its parameters and value, each result that loaded still loading,
unchanged unless the command rewrites it (the kernel it tunes), the emitted package the
old one or the new one (never a mix: files compared less the plan's ``emitted`` stamp) and
current in ``r3 status``'s reading (``roundtrip.status``). Then the resume: the same
command again without the fault (after a cut file, the user's next step first where the
command only reads it or cannot mend it: ``r3 record`` again before ``r3 kernels`` and,
after a capture's data was cut, before ``r3 tune``; ``r3 tune`` before ``r3 emit``), which
must exit 0 and be right: ``r3 kernels`` lists every kernel the reference record listed,
whole (the cut capture may stay listed as corrupt beside its kernel's new capture); the
tune's result (of the kernel's capture now listed) is present with its 4 evaluations; the
package is current, nothing left beside it (bar a damaged plan emit set aside,
``.r3-corrupt-*``), and the new one where no tune ran again. N
concurrent runs must each exit 0 and leave one result of 4 evaluations. A failure's
traceback (``r3 ...: internal error ... (traceback in logs/...)``) is kept in the trial's
row (the deepest frame of r3's own, the last lines); the directories of failing trials
are kept (three a cell).

The verdict passes with no loss, no failed or wrong resume, every failure one line naming
its problem, no internal error (exit 3) and nothing hung; processes left running and a
lock left behind are counted beside it.

Writes bench/ops.json (per-trial rows, a summary per (operation, fault), a verdict) and
prints a table; ``--rejudge`` judges the rows of ``--out`` again by these rules (no run).
Usage: scripts/bench_ops.py [--trials 200] [--seed 57] [--only REGEX] [--workdir DIR]
[--keep] [--out bench/ops.json] [--rejudge]
"""

import argparse
import ast
import contextlib
import glob
import hashlib
import io
import json
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from spack_r3 import cli  # noqa: E402
from spack_r3.search.results import load_result  # noqa: E402
from spack_r3.search.store import journal  # noqa: E402
from spack_r3.workspace import Workspace  # noqa: E402

SOURCES = os.path.join(ROOT, "repos", "r3", "sources")
HEAT, DENSE = os.path.join(SOURCES, "heat"), os.path.join(SOURCES, "dense")
R3 = [sys.executable, "-m", "spack_r3.cli"]
TOKEN = "R3_BENCH_OPS_TOKEN"  # in each command's environment: finds what it left running
BUDGET = 4
KERNEL, OTHER_KERNEL = "jacobi_step", "residual2"
PACKAGE = "r3-heat"
RECORD = ["record", "--source", HEAT, "--run", "./heat 64 4"]
OTHER_RECORD = ["record", "--source", DENSE, "--run", "./dense 48 1"]
RECIPE_NAME = "r3opsheat"
RECIPE = ["recipe", RECIPE_NAME, "--source", HEAT, "--no-install", "--max-attempts", "1"]


def tune_argv(kernel):
    quick = "--mutator rules --pairs 1 --confirm-pairs 1 --confirm-rounds 1 --seed 1 --workers 1 --json"
    return ["tune", "--kernel", kernel, "--budget", str(BUDGET)] + quick.split()


# operation -> its argv after ``r3``, given the trial's workspace and repository
OPS = {
    "record": lambda ws, repo: ["--workspace", ws] + RECORD,
    "tune": lambda ws, repo: ["--workspace", ws] + tune_argv(KERNEL),
    "emit": lambda ws, repo: ["--workspace", ws, "emit", PACKAGE, "--repo", repo],
    "kernels": lambda ws, repo: ["--workspace", ws, "kernels", "--json"],
    "recipe": lambda ws, repo: ["--workspace", ws] + RECIPE,
}
# the share of an operation's measured duration its kill is drawn from
# (emit: from 0.8 of the time ``r3 --version`` takes, Python and r3's imports, to its end;
# most of its time is that start)
WINDOW = {"record": (0.02, 1.0), "tune": (0.02, 1.0), "emit": ("start", 1.05), "recipe": (0.02, 1.0)}
# the workspace a trial of each operation starts from (made once: ``setup``)
START = {"record": "dense", "tune": "tune0", "emit": "emit", "kernels": "tuned", "recipe": "dense"}
OP_TIMEOUT = 300
SET_ASIDE = ".r3-corrupt-"  # a damaged file emit keeps aside in ``packages`` (a dot name Spack skips)

# (operation, fault, trials in a run of 200; ``--trials`` scales them) and, where a resume is
# more than the operation again, its commands (the user's next step, then the operation)
CELLS = [
    ("record", "kill -9", 8),
    ("record", "SIGINT", 8),
    ("tune", "kill -9", 5),
    ("tune", "SIGINT", 5),
    ("emit", "kill -9", 24),
    ("emit", "SIGINT", 24),
    ("record", "disk full", 8),
    ("tune", "disk full", 5),
    ("emit", "disk full", 20),
    ("tune", "r3.journal tail cut", 5),
    ("tune", "r3.journal cut", 2),
    ("kernels", "capture.json cut", 19),
    ("kernels", "record.json cut", 12),
    ("tune", "capture data cut", 4),
    ("tune", "results cut", 3),
    ("emit", "results cut", 4),
    ("tune", "reports cut", 2),
    ("tune", "remix/patterns cut", 3),
    ("tune", "cache cut", 3),
    ("emit", "plan cut", 18),
    ("emit", "package.py/repo.yaml cut", 12),
    ("tune", "2 concurrent", 3),
    ("tune", "4 concurrent", 3),
    ("recipe", "kill -9", 4),
    ("recipe", "SIGINT", 4),
]
RESUME = {
    "kernels": ["record", "kernels"],
    ("tune", "capture data cut"): ["record", "tune"],
    ("emit", "results cut"): ["tune", "emit"],
}


def resume_ops(op, fault):
    return RESUME.get((op, fault)) or RESUME.get(op) or [op]


# --------------------------------------------------------------------------------------
# Running a command


class Trial:
    """One trial's directory, workspace and repository."""

    def __init__(self, directory, ws, repo=None):
        self.dir, self.ws, self.repo = directory, ws, repo
        self.runs = 0


def _tokened():
    """{pid: token} of every process carrying a bench token."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read()
        except OSError:
            continue
        at = env.find(TOKEN.encode() + b"=")
        if at >= 0:
            found[int(pid)] = env[at:].split(b"\0", 1)[0].split(b"=", 1)[1].decode()
    return found


def _reap(token, grace):
    """The processes still running with ``token`` after ``grace`` seconds (their names),
    each then killed, by its id."""
    deadline = time.monotonic() + grace
    while True:
        left = [pid for pid, t in _tokened().items() if t == token and pid != os.getpid()]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    names = []
    for pid in left:
        try:
            with open("/proc/%d/comm" % pid) as f:
                names.append(f.read().strip())
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    end = time.monotonic() + 10
    while left and time.monotonic() < end and [p for p in left if os.path.exists("/proc/%d" % p)]:
        time.sleep(0.05)
        for p in left:  # (our own children: collect them)
            try:
                os.waitpid(p, os.WNOHANG)
            except OSError:
                pass
    return names


def start(trial, op):
    trial.runs += 1
    token = "%s-%d-%d" % (os.path.basename(trial.dir), os.getpid(), trial.runs)
    env = dict(os.environ, **{TOKEN: token})
    env.pop("R3_WORKSPACE", None)
    base = os.path.join(trial.dir, "%02d-%s" % (trial.runs, op))
    out, err = open(base + ".out", "w"), open(base + ".err", "w")
    proc = subprocess.Popen(
        R3 + OPS[op](trial.ws, trial.repo), stdout=out, stderr=err, cwd=ROOT, env=env, start_new_session=True
    )
    out.close()
    err.close()
    return proc, token, base, time.monotonic()


def finish(op, proc, token, base, began, timeout=OP_TIMEOUT, signalled=None):
    """Waits for ``proc``; its row: rc, wall time, stderr's last line, one-line verdict,
    what it left running, the traceback's tail where one was written."""
    row = {"rc": None}
    try:
        proc.wait(timeout=max(1, timeout - (time.monotonic() - began)))
    except subprocess.TimeoutExpired:
        row["hung"] = True
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    row["rc"] = proc.returncode
    row["wall_s"] = round(time.monotonic() - began, 3)
    orphans = _reap(token, 1.0 if signalled else 0.2)
    if orphans:
        row["orphans"] = orphans
    with open(base + ".err", errors="replace") as f:
        err = f.read()
    row.update(judge(op, row["rc"], err, signalled))
    return row


def one_line(op, last, traceback_seen):
    """A failure told in one line: no traceback, the last line r3's own (``r3 <command>:``,
    or ``r3:`` where it was stopped before it knew its command)."""
    return not traceback_seen and last.startswith(("r3 %s: " % op, "r3: "))


def judge(op, rc, err, signalled=None):
    lines = [line for line in err.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    row = {"line": last[:400]}
    if rc == 0 or (signalled == signal.SIGKILL and rc == -signal.SIGKILL):
        row["one_line"] = None  # nothing failed in words (or nothing could say it: kill -9)
    else:
        row["one_line"] = one_line(op, last, "Traceback" in err)
    if "Traceback" in err:
        at = err.rfind("Traceback")
        row["stderr_traceback"] = err[at:].strip().splitlines()[-8:]
    m = re.search(r"traceback in (\S+?)\)", last)
    if m:
        try:
            with open(m.group(1), errors="replace") as f:
                lines = f.read().strip().splitlines()
            row["log"] = m.group(1)
            ours = [i for i, line in enumerate(lines) if "/spack_r3/" in line and line.lstrip().startswith("File ")]
            if ours:  # the deepest frame of ours, and its line
                row["log_where"] = [x.strip() for x in lines[ours[-1] : ours[-1] + 2]]
            row["log_tail"] = lines[-6:]
        except OSError as e:
            row["log"] = "%s (%s)" % (m.group(1), e.strerror)
    return row


def run(trial, op, timeout=OP_TIMEOUT):
    proc, token, base, began = start(trial, op)
    return finish(op, proc, token, base, began, timeout)


def run_killed(trial, op, sig, delay):
    """``op`` with ``sig`` sent after ``delay`` seconds: to its process (kill -9) or to its
    process group (SIGINT)."""
    proc, token, base, began = start(trial, op)
    try:
        proc.wait(timeout=delay)
        landed = False
    except subprocess.TimeoutExpired:
        landed = True
        with contextlib.suppress(OSError):
            if sig == signal.SIGKILL:
                os.kill(proc.pid, sig)
            else:
                os.killpg(proc.pid, sig)
    row = finish(op, proc, token, base, began, signalled=sig if landed else None)
    row["landed"] = landed  # (False: the command had ended before the signal)
    if sig == signal.SIGINT and row["rc"] != 0:
        row["names_problem"] = "interrupted" in row["line"]
    return row


# --------------------------------------------------------------------------------------
# What a workspace holds


def _digest(data):
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def journal_trials(ws):
    """({"study#n": [params, value]} of its completed trials, error): read from a copy
    (reading may set a torn tail aside beside the file)."""
    path = os.path.join(ws, "r3.journal")
    if not os.path.exists(path):
        return {}, None
    tmp = tempfile.mkdtemp(prefix="r3-ops-journal-")
    try:
        copy = os.path.join(tmp, "r3.journal")
        shutil.copyfile(path, copy)
        with contextlib.redirect_stderr(io.StringIO()):  # (its warning of a torn tail set aside)
            store = journal(copy)
        found = {}
        for s in store.get_all_studies():
            for t in store.get_all_trials(s._study_id):
                if t.state.name == "COMPLETE":
                    found["%s#%d" % (s.study_name, t.number)] = [
                        _digest(t.params or t.system_attrs.get("fixed_params")),
                        t.value,
                    ]
        return found, None
    except Exception as err:  # noqa: BLE001 (what it says is the finding)
        return {}, "%s: %s" % (type(err).__name__, str(err).splitlines()[0][:300] if str(err) else "")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def package_state(repo):
    """{file: digest} of the package as a reader sees it (a plan less its ``emitted``), the
    other entries of ``packages``, and status's stale lines."""
    from spack_r3.roundtrip.status import status

    directory = os.path.join(repo, "packages", PACKAGE)
    files = {}
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        if name.endswith(".json"):
            try:
                plan = json.loads(data)
                plan["facts"].pop("emitted", None)
                data = json.dumps(plan, sort_keys=True).encode()
            except (ValueError, KeyError, TypeError):
                pass
        files[name] = hashlib.sha256(data).hexdigest()[:16]
    packages = os.path.join(repo, "packages")
    others = sorted(n for n in os.listdir(packages) if n != PACKAGE) if os.path.isdir(packages) else []
    try:
        stale = [line for row in status(repo) for line in row.stale]
    except Exception as err:  # noqa: BLE001
        stale = ["status: %s: %s" % (type(err).__name__, err)]
    return {"files": files, "others": others, "stale": stale}


def snapshot(trial):
    """What the workspace (and repository) holds, read in this process."""
    snap = {}
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(["--workspace", trial.ws, "kernels", "--json"])
        except SystemExit as e:
            rc = e.code
    snap["kernels_rc"] = rc
    try:
        entries = json.loads(out.getvalue()) if rc == 0 else []
    except ValueError:
        entries = []
    if rc != 0:
        snap["kernels_error"] = (err.getvalue().strip().splitlines() or [""])[-1][:300]
    snap["captures"] = {e["id"]: e["kernel"] for e in entries if not e.get("corrupt")}
    snap["corrupt"] = {e["id"]: e["corrupt"] for e in entries if e.get("corrupt")}
    snap["trials"], snap["journal_error"] = journal_trials(trial.ws)
    # Optuna's lock of the journal: a file that exists while a process holds it (a dead
    # one's stays, and the next run waits for it, then breaks it)
    snap["journal_lock"] = os.path.exists(os.path.join(trial.ws, "r3.journal.lock"))
    results = {}
    directory = os.path.join(trial.ws, "results")
    ws = Workspace(trial.ws)
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        if name.endswith(".json"):
            try:
                r = load_result(ws, name[:-5])
            except Exception:  # noqa: BLE001
                r = None
            results[name[:-5]] = (
                None
                if r is None
                else {"kernel": r.kernel, "evaluations": r.evaluations, "won": r.won, "digest": _digest(r.to_json())}
            )
    snap["results"] = results
    if trial.repo:
        snap["package"] = package_state(trial.repo)
    return snap


def losses(before, after, ctx, rewritten=(), damaged_captures=(), damaged_results=()):
    """What ``before`` held that ``after`` lacks: lines."""
    lost = []
    for cid, kernel in sorted(before["captures"].items()):
        if cid in damaged_captures:
            continue
        if cid in after["corrupt"]:
            lost.append("capture %s (%s) now corrupt: %s" % (cid, kernel, after["corrupt"][cid]))
        elif cid not in after["captures"]:
            lost.append(
                "capture %s (%s) no longer listed%s"
                % (cid, kernel, " (r3 kernels: %s)" % after.get("kernels_error") if after["kernels_rc"] else "")
            )
    if after["journal_error"] and not before["journal_error"]:
        lost.append("the journal no longer reads: %s" % after["journal_error"])
    else:
        gone = [k for k, v in before["trials"].items() if after["trials"].get(k) != v]
        if gone:
            lost.append("%d completed trial(s) of the journal lost or changed: %s" % (len(gone), ", ".join(gone[:4])))
    for cid, r in sorted(before["results"].items()):
        if r is None or cid in damaged_results:
            continue
        now = after["results"].get(cid)
        if now is None:
            lost.append("result %s (%s) no longer loads" % (cid, r["kernel"]))
        elif r["kernel"] not in rewritten and now != r:
            lost.append("result %s (%s) changed" % (cid, r["kernel"]))
    if "package" in before:
        state = after["package"]
        if state["files"] not in (ctx["package_old"], ctx["package_new"]):
            lost.append("the package is neither the old one nor the new one: %s" % sorted(state["files"]))
        if state["stale"]:
            lost.append("status: %s" % "; ".join(state["stale"])[:300])
    return lost


def correct(op, trial, ctx, snap, damaged=()):
    """Why the workspace after a resume of ``op`` is not right: lines (none: right).
    ``damaged``: captures the fault cut, which may stay listed as corrupt (as
    docs/workspace.md says) once their kernels are listed whole again."""
    wrong = []
    if op in ("record", "kernels"):
        names = set(snap["captures"].values())
        missing = sorted(set(ctx["kernels"]) - names)
        if missing:
            wrong.append("r3 kernels does not list %s" % ", ".join(missing))
        corrupt = {c: why for c, why in snap["corrupt"].items() if c not in damaged}
        if corrupt:
            wrong.append("r3 kernels lists corrupt captures: %s" % corrupt)
    elif op == "tune":  # (the result of the kernel's capture now listed: a record again may make another)
        ids = sorted(c for c, k in snap["captures"].items() if k == KERNEL)
        r = next((snap["results"][c] for c in ids if snap["results"].get(c)), None)
        if r is None:
            wrong.append("no result for %s" % KERNEL)
        elif r["evaluations"] != BUDGET:
            wrong.append("%s's result has %d evaluations, not %d" % (KERNEL, r["evaluations"], BUDGET))
    elif op == "recipe":
        summary = os.path.join(trial.ws, "recipes", RECIPE_NAME, "summary.json")
        try:
            with open(summary) as f:
                status = json.load(f).get("status")
        except (OSError, ValueError) as err:
            status = "unreadable (%s)" % err
        if status != "concretized":
            wrong.append("the recipe's summary says %s, not concretized" % status)
        if not os.path.isfile(os.path.join(trial.ws, "repo", "packages", RECIPE_NAME, "package.py")):
            wrong.append("no package.py in the workspace's repository")
    elif op == "emit":
        state = snap["package"]
        if state["stale"]:
            wrong.append("status: %s" % "; ".join(state["stale"])[:300])
        others = [o for o in state["others"] if not o.startswith(SET_ASIDE)]
        if others:
            wrong.append("left beside the package: %s" % others)
        if not state["files"]:
            wrong.append("no package")
    return wrong


def resume(trial, ctx, op, fault, row, damaged=()):
    """The resume: the operation (after the user's next step) again, without the fault."""
    steps = []
    for name in resume_ops(op, fault):
        done = run(trial, name)
        steps.append(
            {"op": name, "rc": done["rc"], "wall_s": done["wall_s"], "line": done["line"], "one_line": done["one_line"]}
        )
        for key in ("log_tail", "stderr_traceback", "orphans", "hung"):
            if key in done:
                steps[-1][key] = done[key]
        if done["rc"] != 0:
            break
    row["resume"] = steps
    row["resume_rc"] = steps[-1]["rc"]
    final = resume_ops(op, fault)[-1]
    snap = snapshot(trial)
    wrong = correct(final, trial, ctx, snap, damaged) if row["resume_rc"] == 0 else ["exit %s" % row["resume_rc"]]
    still = sorted(set(damaged) & set(snap["corrupt"]))
    if still and row["resume_rc"] == 0:
        row["resume_note"] = "the cut capture %s stays listed as corrupt beside its kernel's new capture" % still[0]
    result = snap["results"].get(ctx["capture"])
    if final == "emit" and steps[-1]["op"] == "emit" and row["resume_rc"] == 2 and result and not result["won"]:
        if "nothing beat the baseline" in steps[-1]["line"]:  # (tuned again, no winner: nothing to emit, rightly)
            wrong = []
            row["resume_note"] = "the tune again found no winner; emit said so"
    if final == "emit" and row["resume_rc"] == 0 and fault not in ("results cut",):
        if snap["package"]["files"] != ctx["package_new"]:
            wrong.append("the package is not the new one")
    row["resume_ok"] = not wrong
    if wrong:
        row["resume_wrong"] = wrong
    return snap


# --------------------------------------------------------------------------------------
# Trials


def new_trial(ctx, name, op, repo="repo_old"):
    """A trial's directory with a copy of the workspace its operation starts from (and for
    emit, of a repository: ``repo_old``, the package the emit replaces, or ``repo_new``)."""
    directory = os.path.join(ctx["work"], name)
    os.makedirs(directory)
    ws = copy(ctx["bases"][START[op]], os.path.join(directory, "ws"))
    return Trial(directory, ws, copy(ctx[repo], os.path.join(directory, "repo")) if op == "emit" else None)


def rewritten_by(op):
    return {KERNEL} if op == "tune" else set()


def kill_trial(ctx, name, op, fault, rng):
    trial = new_trial(ctx, name, op)
    lo, hi = WINDOW[op]
    whole = ctx["durations"][op]
    lo = 0.8 * ctx["durations"]["start"] / whole if lo == "start" else lo
    delay = rng.uniform(lo, hi) * whole
    before = snapshot(trial)
    sig = signal.SIGKILL if fault == "kill -9" else signal.SIGINT
    row = {"point": {"seconds": round(delay, 3), "of_s": round(ctx["durations"][op], 3)}}
    row.update(run_killed(trial, op, sig, delay))
    after = snapshot(trial)
    row["left_lock"] = after["journal_lock"]
    row["lost"] = losses(before, after, ctx, rewritten=rewritten_by(op))
    if trial.repo:
        row["package_after"] = which_package(ctx, after)
    done = resume(trial, ctx, op, fault, row)
    row["lost"] += ["after the resume: " + x for x in losses(after, done, ctx, rewritten=rewritten_by(op))]
    return row, trial


def which_package(ctx, snap):
    files = snap["package"]["files"]
    return "old" if files == ctx["package_old"] else "new" if files == ctx["package_new"] else "other"


def _fill(disk, room):
    s = os.statvfs(disk)
    with open(os.path.join(disk, "filler"), "wb") as f:
        f.write(bytes(max(0, s.f_bavail * s.f_frsize - room)))


def disk_full_inside(spec):
    """In the trial's own mount namespace: a tmpfs under the workspace, filled but for
    ``room`` bytes; the operation; the filler gone; the resume."""
    ctx, op, fault, room = spec["ctx"], spec["op"], spec["fault"], spec["room"]
    disk = os.path.join(spec["dir"], "disk")
    os.makedirs(disk, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=%dk" % spec["size_kb"], "tmpfs", disk], capture_output=True, text=True
    )
    if proc.returncode:
        return {"skipped": "no tmpfs may be mounted: " + proc.stderr.strip()}
    trial = Trial(spec["dir"], os.path.join(disk, "ws"), os.path.join(disk, "repo") if op == "emit" else None)
    subprocess.run(["cp", "-a", ctx["bases"][START[op]], trial.ws], check=True)
    if trial.repo:
        subprocess.run(["cp", "-a", ctx["repo_old"], trial.repo], check=True)
    before = snapshot(trial)
    _fill(disk, room)
    row = {"point": {"bytes": room, "tmpfs_kb": spec["size_kb"]}}
    row.update(run(trial, op))
    if row["rc"] != 0:
        row["names_problem"] = any(
            w in row["line"] for w in ("No space left on device", "Disk quota", "File too large")
        )
    s = os.statvfs(disk)
    row["free_after"] = s.f_bavail * s.f_frsize
    after = snapshot(trial)
    row["left_lock"] = after["journal_lock"]
    row["lost"] = losses(before, after, ctx, rewritten=rewritten_by(op))
    if trial.repo:
        row["package_after"] = which_package(ctx, after)
    os.unlink(os.path.join(disk, "filler"))
    done = resume(trial, ctx, op, fault, row)
    row["lost"] += ["after the resume: " + x for x in losses(after, done, ctx, rewritten=rewritten_by(op))]
    logs = sorted(glob.glob(os.path.join(trial.ws, "logs", "*.log")))
    if logs:
        row["logs"] = [os.path.basename(p) for p in logs]
    return row


def disk_full_trial(ctx, name, op, fault, rng):
    directory = os.path.join(ctx["work"], name)
    os.makedirs(directory)
    need = ctx["writes_kb"][op]
    room = int(rng.uniform(0, 1.5) * need * 1024)
    size_kb = ctx["base_kb"][START[op]] + ctx["base_kb"].get("repo", 0) + 2 * need + 1024
    size_kb = (size_kb + 1023) // 1024 * 1024
    spec = {"ctx": ctx, "op": op, "fault": fault, "room": room, "size_kb": size_kb, "dir": directory}
    path = os.path.join(directory, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    proc = subprocess.run(
        ctx["unshare"] + [sys.executable, os.path.abspath(__file__), "--inside", path],
        capture_output=True,
        text=True,
        timeout=3 * OP_TIMEOUT,
    )
    try:
        with open(os.path.join(directory, "row.json")) as f:
            row = json.load(f)
    except (OSError, ValueError):
        row = {
            "skipped": "the trial's namespace gave no row (exit %d): %s" % (proc.returncode, proc.stderr.strip()[-400:])
        }
    return row, Trial(directory, None)


def cut_file(path, rng, tail_lines=0):
    """Truncates ``path``: within its last ``tail_lines`` lines, or anywhere (emptied a
    quarter of the time). Its point: {file size, bytes kept}."""
    with open(path, "rb") as f:
        data = f.read()
    size = len(data)
    if tail_lines:
        starts = [i + 1 for i, c in enumerate(data[:-1]) if c == 0x0A]
        first = starts[-tail_lines] if len(starts) >= tail_lines else 0
        kept = rng.randint(first, max(first, size - 1))
    elif size <= 1 or rng.random() < 0.25:
        kept = 0
    else:
        kept = rng.randint(1, size - 1)
    with open(path, "r+b") as f:
        f.truncate(kept)
    return {"size": size, "kept": kept}


def files_of(trial, ctx, fault, rng):
    """The files a cut of ``fault`` may fall on (paths relative to the workspace or repo)."""
    ws = trial.ws
    caps = os.path.join(ws, "captures")
    if fault.startswith("r3.journal"):
        return [os.path.join(ws, "r3.journal")]
    if fault == "capture.json cut":  # (heat's: the record the resume makes again)
        return [os.path.join(caps, c, "capture.json") for c in ctx["heat_captures"]]
    if fault == "capture data cut":
        d = os.path.join(caps, ctx["capture"])
        return sorted(
            p
            for p in glob.glob(os.path.join(d, "**", "*"), recursive=True)
            if os.path.isfile(p) and os.path.basename(p) != "capture.json"
        )
    if fault == "record.json cut":
        return [os.path.join(ws, "runs", ctx["heat_run"], "record.json")]
    if fault == "results cut":
        if trial.repo:  # (what emit reads: the tuned kernel's)
            return [os.path.join(ws, "results", ctx["capture"] + ".json")]
        return sorted(glob.glob(os.path.join(ws, "results", "*.json")))
    if fault == "reports cut":
        return sorted(glob.glob(os.path.join(ws, "reports", "*")))
    if fault == "remix/patterns cut":
        return sorted(glob.glob(os.path.join(ws, "remix", "*.json")) + glob.glob(os.path.join(ws, "patterns.json")))
    if fault == "cache cut":
        return sorted(p for p in glob.glob(os.path.join(ws, "cache", "**", "*"), recursive=True) if os.path.isfile(p))
    if fault == "plan cut":
        return sorted(glob.glob(os.path.join(trial.repo, "packages", PACKAGE, "r3-*.json")))
    if fault == "package.py/repo.yaml cut":
        return [os.path.join(trial.repo, "packages", PACKAGE, "package.py"), os.path.join(trial.repo, "repo.yaml")]
    raise ValueError(fault)


def cut_trial(ctx, name, op, fault, rng):
    trial = new_trial(ctx, name, op, repo="repo_new")
    before = snapshot(trial)
    candidates = files_of(trial, ctx, fault, rng)
    path = rng.choice(candidates)
    point = cut_file(path, rng, tail_lines=3 if "tail" in fault else 0)
    point["file"] = os.path.relpath(path, os.path.dirname(trial.ws))
    damaged = snapshot(trial)
    row = {"point": point}
    damaged_captures = {os.path.basename(os.path.dirname(path))} if path.endswith("capture.json") else set()
    damaged_results = {os.path.basename(path)[:-5]} if "/results/" in path else set()
    if fault.startswith("r3.journal"):
        before = dict(before, trials=damaged["trials"], journal_error=damaged["journal_error"])
        row["point"]["trials_left"] = len(damaged["trials"])
    if "package" in before:  # (a cut plan: the old package is no version a reader may meet)
        ctx = dict(ctx, package_old=ctx["package_new"])
    row.update(run(trial, op))
    if row["rc"] not in (0, None):  # does its line say which file is damaged?
        names = {os.path.basename(path), os.path.basename(os.path.dirname(path))} - {"ws", "repo", "packages"}
        row["names_problem"] = any(n in row["line"] for n in names)
    after = snapshot(trial)
    row["left_lock"] = after["journal_lock"]
    rewritten = rewritten_by(op)
    row["lost"] = losses(
        before, after, ctx, rewritten=rewritten, damaged_captures=damaged_captures, damaged_results=damaged_results
    )
    if "package" in before and fault in ("plan cut", "package.py/repo.yaml cut"):
        # the cut package itself is the damage: what emit made of it is judged by the resume
        row["lost"] = [x for x in row["lost"] if not x.startswith(("the package is neither", "status:"))]
    done = resume(trial, ctx, op, fault, row, damaged=damaged_captures)
    after_resume = losses(
        after,
        done,
        ctx,
        rewritten=rewritten | ({KERNEL} if "tune" in resume_ops(op, fault) else set()),
        damaged_captures=damaged_captures | set(after["corrupt"]),
    )
    if "package" in after and fault in ("results cut", "plan cut", "package.py/repo.yaml cut"):
        # tuned again, a new winner may be a third package; a cut package is the fault's
        # damage, not a loss: the resume's verdict says what emit made of it
        after_resume = [x for x in after_resume if not x.startswith(("the package is neither", "status:"))]
    row["lost"] += ["after the resume: " + x for x in after_resume]
    return row, trial


def concurrent_trial(ctx, name, op, fault, rng):
    n = int(fault.split()[0])
    trial = new_trial(ctx, name, op)
    before = snapshot(trial)
    started = [start(trial, op) for _ in range(n)]
    runs = [finish(op, *s) for s in started]
    row = {"point": {"runs": n}, "runs": runs}
    rcs = [r["rc"] for r in runs]
    row["rc"] = max(rcs, key=lambda rc: (rc != 0, abs(rc or 0)))
    row["rcs"] = rcs
    judged = [r["one_line"] for r in runs if r["one_line"] is not None]
    row["one_line"] = all(judged) if judged else None
    row["line"] = next((r["line"] for r in runs if r["rc"] != 0), runs[0]["line"])
    for key in ("orphans", "hung", "log_tail", "stderr_traceback"):
        found = [r[key] for r in runs if key in r]
        if found:
            row[key] = found[0]
    after = snapshot(trial)
    row["left_lock"] = after["journal_lock"]
    row["lost"] = losses(before, after, ctx, rewritten=rewritten_by(op))
    wrong = ["a run exited %s: %s" % (r["rc"], r["line"][:200]) for r in runs if r["rc"] != 0]
    wrong += correct(op, trial, ctx, after)
    row["trials_in_study"] = len([k for k in after["trials"] if k.startswith(KERNEL + "@")])
    if wrong:
        row["runs_wrong"] = wrong
    done = resume(trial, ctx, op, fault, row)
    row["lost"] += ["after the resume: " + x for x in losses(after, done, ctx, rewritten=rewritten_by(op))]
    return row, trial


def trial_kind(fault):
    if fault in ("kill -9", "SIGINT"):
        return kill_trial
    if fault == "disk full":
        return disk_full_trial
    if fault.endswith("concurrent"):
        return concurrent_trial
    return cut_trial


# --------------------------------------------------------------------------------------
# The workspaces every trial starts from


def r3_run(argv, what):
    began = time.monotonic()
    proc = subprocess.run(R3 + argv, capture_output=True, text=True, cwd=ROOT, timeout=900)
    took = time.monotonic() - began
    if proc.returncode:
        sys.exit("setup: %s failed (exit %d): %s" % (what, proc.returncode, proc.stderr.strip()[-800:]))
    return proc, took


def copy(src, dst):
    subprocess.run(["cp", "-a", src, dst], check=True)
    return dst


def du_kb(path):
    return int(subprocess.run(["du", "-sk", path], capture_output=True, text=True, check=True).stdout.split()[0])


def setup(work):
    """Records dense, then heat (the reference record), tunes residual2, then jacobi_step
    (the reference tune), marks heat's record as a Spack record and emits it twice (an old
    package, with another pipeline, then the new one: the reference emit)."""
    bases, durations = {}, {}
    print("==> setup in %s" % work, flush=True)
    bases["dense"] = os.path.join(work, "base-dense")
    r3_run(["--workspace", bases["dense"]] + OTHER_RECORD, "r3 record dense")
    bases["rec"] = copy(bases["dense"], os.path.join(work, "base-rec"))
    _, durations["record"] = r3_run(["--workspace", bases["rec"]] + RECORD, "r3 record heat")
    listed = json.loads(r3_run(["--workspace", bases["rec"], "kernels", "--json"], "r3 kernels")[0].stdout)
    kernels = sorted({e["kernel"] for e in listed})
    capture = next(e["id"] for e in listed if e["kernel"] == KERNEL)
    heat_run = next(e["run"] for e in listed if e["kernel"] == KERNEL)
    heat_captures = sorted(e["id"] for e in listed if e["run"] == heat_run)
    bases["tune0"] = copy(bases["rec"], os.path.join(work, "base-tune0"))
    r3_run(["--workspace", bases["tune0"]] + tune_argv(OTHER_KERNEL), "r3 tune residual2")
    bases["tuned"] = copy(bases["tune0"], os.path.join(work, "base-tuned"))
    _, durations["tune"] = r3_run(["--workspace", bases["tuned"]] + tune_argv(KERNEL), "r3 tune jacobi_step")
    # heat's record as a Spack record of r3-heat (the emit reads only these facts)
    bases["emit"] = copy(bases["tuned"], os.path.join(work, "base-emit"))
    with open(os.path.join(bases["emit"], "captures", capture, "capture.json")) as f:
        source_root = os.path.dirname(json.load(f)["source_file"])
    for path in glob.glob(os.path.join(bases["emit"], "runs", "*", "record.json")):
        with open(path) as f:
            data = json.load(f)
        if capture in data.get("captures", []):
            data["spack"] = {
                "package": PACKAGE,
                "namespace": "r3",
                "spec": PACKAGE,
                "target": "zen3",
                "version": "1.0",
                "source_root": source_root,
                "layout": "v1",
            }
            with open(path, "w") as f:
                json.dump(data, f, indent=1)
    # its result a winner (a tune of a few ms kernel on a busy machine may find none), and
    # for the old package another pipeline
    result = os.path.join(bases["emit"], "results", capture + ".json")
    with open(result) as f:
        data = json.load(f)
    data["won"] = True
    pipeline = data["variant"]["pipeline"]
    for opt in ("1", "2") if pipeline["opt"] != "1" else ("2",):
        with open(result, "w") as f:
            json.dump(dict(data, variant=dict(data["variant"], pipeline=dict(pipeline, opt=opt))), f, indent=1)
    repo_old, repo_new = os.path.join(work, "repo-old"), os.path.join(work, "repo-new")
    r3_run(["--workspace", bases["emit"], "emit", PACKAGE, "--repo", repo_old], "r3 emit (the old package)")
    with open(result, "w") as f:
        json.dump(data, f, indent=1)
    copy(repo_old, repo_new)
    _, durations["emit"] = r3_run(["--workspace", bases["emit"], "emit", PACKAGE, "--repo", repo_new], "r3 emit")
    _, durations["start"] = r3_run(["--version"], "r3 --version")
    probe = copy(bases["dense"], os.path.join(work, "recipe-probe"))
    _, durations["recipe"] = r3_run(["--workspace", probe] + RECIPE, "r3 recipe heat")
    shutil.rmtree(probe, ignore_errors=True)
    old, new = package_state(repo_old), package_state(repo_new)
    if old["files"] == new["files"] or old["stale"] or new["stale"]:
        sys.exit("setup: the old and new packages are not two current versions: %s %s" % (old, new))
    base_kb = {k: du_kb(v) for k, v in bases.items()}
    base_kb["repo"] = du_kb(repo_old)
    writes_kb = {
        "record": max(64, base_kb["rec"] - base_kb["dense"]),
        "tune": max(64, base_kb["tuned"] - base_kb["tune0"]),
        "emit": max(16, 2 * du_kb(repo_new)),
    }
    return {
        "work": work,
        "bases": bases,
        "repo_old": repo_old,
        "repo_new": repo_new,
        "durations": {k: round(v, 3) for k, v in durations.items()},
        "kernels": kernels,
        "capture": capture,
        "heat_run": heat_run,
        "heat_captures": heat_captures,
        "package_old": old["files"],
        "package_new": new["files"],
        "base_kb": base_kb,
        "writes_kb": writes_kb,
    }


def namespace():
    """``unshare`` arguments of a mount namespace of our own, or None (as in
    tests/search/test_study_storage_faults.py)."""
    for argv in (["unshare", "-m", "--propagation", "private"], ["unshare", "-Urm"]):
        try:
            if subprocess.run(argv + ["true"], capture_output=True, timeout=30).returncode == 0:
                return argv
        except (OSError, subprocess.TimeoutExpired):
            pass
    return None


# --------------------------------------------------------------------------------------
# Summary


def summarize(rows):
    cells = {}
    for r in rows:
        c = cells.setdefault(
            "%s / %s" % (r["op"], r["fault"]),
            {"operation": r["op"], "fault": r["fault"], "trials": 0, "skipped": 0, "exit_codes": {}},
        )
        if "skipped" in r:
            c["skipped"] += 1
            reasons = c.setdefault("skip_reasons", [])
            if r["skipped"] not in reasons:
                reasons.append(r["skipped"])
            continue
        c["trials"] += 1
        key = str(r["rc"])
        c["exit_codes"][key] = c["exit_codes"].get(key, 0) + 1
        c.setdefault("failures", 0)
        c.setdefault("one_line", 0)
        if r.get("one_line") is not None:
            c["failures"] += 1
            c["one_line"] += bool(r["one_line"])
        for key, test in (
            ("losses", lambda r: bool(r["lost"])),
            ("resume_failures", lambda r: not r["resume_ok"]),
            ("internal_errors", lambda r: r["rc"] == 3 or any(s["rc"] == 3 for s in r["resume"])),
            ("orphans", lambda r: bool(r.get("orphans"))),
            ("hung", lambda r: bool(r.get("hung"))),
            ("left_lock", lambda r: bool(r.get("left_lock"))),
            ("wrong_after", lambda r: bool(r.get("runs_wrong"))),
            ("landed", lambda r: r.get("landed", True)),
        ):
            c[key] = c.get(key, 0) + int(bool(test(r)))
        c["one_line_share"] = round(c["one_line"] / c["failures"], 3) if c["failures"] else None
        if r.get("names_problem") is not None:
            c["named"] = c.get("named", 0) + 1
            c["names_problem"] = c.get("names_problem", 0) + int(r["names_problem"])
    return list(cells.values())


def verdict(summary):
    total = {
        k: sum(c.get(k, 0) for c in summary)
        for k in (
            "trials",
            "losses",
            "resume_failures",
            "wrong_after",
            "internal_errors",
            "hung",
            "orphans",
            "left_lock",
            "skipped",
        )
    }
    total["not_one_line"] = sum(c.get("failures", 0) - c.get("one_line", 0) for c in summary)
    total["problem_unnamed"] = sum(c.get("named", 0) - c.get("names_problem", 0) for c in summary)
    total["zero_losses"] = total["losses"] == 0
    bad = ("losses", "resume_failures", "wrong_after", "internal_errors", "hung", "not_one_line", "problem_unnamed")
    total["passed"] = not any(total[k] for k in bad)
    return total


def print_table(result):
    head = ["operation", "fault", "trials", "exit codes", "one-line", "names it", "losses", "resume fails", "bugs(3)"]
    head += ["orphans", "hung", "lock left"]
    rows = []
    for c in result["summary"]:
        codes = sorted(c["exit_codes"].items(), key=lambda kv: int(kv[0]) if kv[0].lstrip("-").isdigit() else 999)
        share = "-" if not c.get("failures") else "%d/%d" % (c["one_line"], c["failures"])
        named = "-" if not c.get("named") else "%d/%d" % (c["names_problem"], c["named"])
        trials = "%d%s" % (c["trials"], " (+%d skipped)" % c["skipped"] if c["skipped"] else "")
        rows.append(
            [c["operation"], c["fault"], trials, ", ".join("%s:%d" % kv for kv in codes) or "-", share, named]
            + [
                str(c.get(k, 0))
                for k in ("losses", "resume_failures", "internal_errors", "orphans", "hung", "left_lock")
            ]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    for line in [head, ["-" * w for w in widths]] + rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip())
    v = result["verdict"]
    print(
        "verdict: %d trials, %d losses, %d resume failures, %d failures not in one line, %d whose line does not "
        "name the problem, %d internal errors, %d hung, %d left processes running, %d left the journal's lock -> %s"
        % (
            v["trials"],
            v["losses"],
            v["resume_failures"],
            v["not_one_line"],
            v["problem_unnamed"],
            v["internal_errors"],
            v["hung"],
            v["orphans"],
            v["left_lock"],
            "PASS" if v["passed"] else "FAIL",
        )
    )
    for s in result["settings"].get("skipped_operations", []):
        print("skipped: %s" % s)


def failures(rows):
    """One line per trial that lost something, failed its resume, spoke in more than one
    line or in a line that does not name the problem, or hung."""
    out = []
    for r in rows:
        if "skipped" in r:
            continue
        why = []
        if r["lost"]:
            why.append("lost: " + "; ".join(r["lost"]))
        if r.get("one_line") is False:
            why.append("not one line: %r" % r["line"])
        if r.get("names_problem") is False:
            why.append("its line does not name the problem: %r" % r["line"])
        if r["rc"] == 3:
            why.append("internal error: %r" % r["line"])
        if not r["resume_ok"]:
            why.append("resume: %s (%s)" % ("; ".join(r.get("resume_wrong", [])), r["resume"][-1]["line"][:200]))
        if r.get("orphans"):
            why.append("left running after it ended: %s" % ", ".join(r["orphans"]))
        if r.get("runs_wrong"):
            why.append("after the concurrent runs: " + "; ".join(r["runs_wrong"]))
        if r.get("hung"):
            why.append("hung")
        if r.get("left_lock"):
            waited = r["resume"][0].get("wall_s")
            why.append("left r3.journal.lock behind (the resume took %s s)" % waited)
        if why:
            out.append(
                "#%d %s / %s at %s: %s" % (r["trial"], r["op"], r["fault"], json.dumps(r["point"]), " | ".join(why))
            )
    return out


def slug(fault):
    return re.sub(r"[^a-z0-9]+", "-", fault.lower()).strip("-")


def plan_counts(trials, only):
    cells = [c for c in CELLS if not only or re.search(only, "%s / %s" % (c[0], c[1]))]
    total = sum(c[2] for c in cells)
    return [(op, fault, max(1, int(round(trials * n / total)))) for op, fault, n in cells]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200, help="trials in all, shared among the cells as CELLS says")
    ap.add_argument("--seed", type=int, default=57)
    ap.add_argument("--only", default=None, metavar="REGEX", help="cells whose 'operation / fault' matches")
    ap.add_argument("--workdir", default=None, help="where the workspaces go (default: a new temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep every trial's directory (default: the failing ones)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "ops.json"))
    ap.add_argument("--rejudge", action="store_true", help="the verdicts of --out again, from its rows")
    ap.add_argument("--inside", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rejudge:
        with open(args.out) as f:
            result = json.load(f)
        rejudge(result)
        write(result, args.out)
        return 0
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:  # (started in the background: r3 would inherit it)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.inside:  # a disk-full trial, in its own mount namespace
        with open(args.inside) as f:
            spec = json.load(f)
        row = disk_full_inside(spec)
        with open(os.path.join(spec["dir"], "row.json"), "w") as f:
            json.dump(row, f)
        return 0

    began = time.time()
    load_before = os.getloadavg()
    work = args.workdir or tempfile.mkdtemp(prefix="r3-bench-ops-")
    os.makedirs(work, exist_ok=True)
    made = os.path.join(work, "setup.json")
    if os.path.exists(made):  # (--workdir of an earlier run: its workspaces again)
        print("==> reusing the workspaces of %s" % made, flush=True)
        with open(made) as f:
            ctx = json.load(f)
    else:
        ctx = setup(work)
        with open(made, "w") as f:
            json.dump(ctx, f, indent=1)
    ctx["unshare"] = namespace()
    skipped_ops = []
    plan = plan_counts(args.trials, args.only)
    print("==> %d trials: %s" % (sum(n for _, _, n in plan), ", ".join("%s/%s %d" % c for c in plan)), flush=True)
    rows, kept = [], []
    number = 0
    for op, fault, n in plan:
        for i in range(n):
            number += 1
            rng = random.Random("%d/%s/%s/%d" % (args.seed, op, fault, i))
            name = "t%03d-%s-%s" % (number, op, slug(fault))
            if fault == "disk full" and not ctx["unshare"]:
                row = {"skipped": "no mount namespace may be made here"}
            else:
                t0 = time.monotonic()
                try:
                    row = trial_kind(fault)(ctx, name, op, fault, rng)[0]
                except Exception:  # noqa: BLE001 (a bug of the bench's own: the trial is no trial)
                    row = {"skipped": "bench error: " + traceback.format_exc()[-1500:]}
                row["trial_s"] = round(time.monotonic() - t0, 2)
            row = dict({"trial": number, "op": op, "fault": fault}, **row)
            rows.append(row)
            bad = bool(failures([row]))
            status = "skipped" if "skipped" in row else ("FAIL " + failures([row])[0][:300]) if bad else "ok"
            print(
                "  #%d %s / %s: rc %s, %s (%.1fs)" % (number, op, fault, row.get("rc"), status, row.get("trial_s", 0)),
                flush=True,
            )
            directory = os.path.join(work, name)
            if (bad and sum(op in k and slug(fault) in k for k in kept) < 3) or args.keep:  # (3 a cell)
                kept.append(directory)
            else:
                shutil.rmtree(directory, ignore_errors=True)
    summary = summarize(rows)
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(began)),
        "wall_s": round(time.time() - began, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "cpu": _cpu_model(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        },
        "settings": {
            "trials": args.trials,
            "seed": args.seed,
            "only": args.only,
            "record": "r3 record --source heat --run './heat 64 4' (on a workspace holding dense's record: "
            "--source dense --run './dense 48 1')",
            "tune": "r3 "
            + " ".join(tune_argv(KERNEL))
            + " (on a workspace where %s was tuned the same way)" % OTHER_KERNEL,
            "emit": "r3 emit %s --repo REPO (heat's record marked a Spack record; REPO holds an older package)"
            % PACKAGE,
            "recipe": "r3 " + " ".join(RECIPE).replace(HEAT, "heat") + " (on the workspace holding dense's record)",
            "kill_window": {k: list(v) for k, v in WINDOW.items()},
            "measured_s": ctx["durations"],
            "writes_kb": ctx["writes_kb"],
            "workspace_kb": ctx["base_kb"],
            "resume": {"%s / %s" % (op, f): resume_ops(op, f) for op, f, _ in plan},
            "namespace": ctx["unshare"],
            "skipped_operations": skipped_ops,
            "kept_trial_dirs": kept,
            "workdir": work,
        },
        "summary": summary,
        "failures": failures(rows),
        "trials": rows,
    }
    result["verdict"] = verdict(summary)
    write(result, args.out)
    if not args.keep and not kept and not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def rejudge(result):
    """The rows' verdicts by this script's rules (one line, a set-aside plan), the summary
    and verdict again: what a run judged by an older rule would have said."""
    for r in result["trials"]:
        if "skipped" in r:
            continue
        for step in [r] + r.get("runs", []) + r.get("resume", []):
            op = step.get("op", r["op"])
            if step.get("one_line") is not None:
                step["one_line"] = one_line(op, step["line"], "stderr_traceback" in step)
        wrong = []
        for w in r.get("resume_wrong", []):
            m = re.match(r"left beside the package: (\[.*\])$", w)
            if m and all(o.startswith(SET_ASIDE) for o in ast.literal_eval(m.group(1))):
                r["resume_note"] = "emit set the cut plan aside: %s" % m.group(1)
                continue
            wrong.append(w)
        if "resume_wrong" in r:
            r["resume_wrong"] = wrong
            r["resume_ok"] = not wrong
            if not wrong:
                del r["resume_wrong"]
    result["summary"] = summarize(result["trials"])
    result["failures"] = failures(result["trials"])
    result["verdict"] = verdict(result["summary"])
    result["rejudged"] = time.strftime("%Y-%m-%dT%H:%M:%S")


def write(result, out):
    out = os.path.abspath(out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print()
    print_table(result)
    for line in result["failures"]:
        print("- " + line[:600])
    print("wrote %s (%.0f s)" % (out, result["wall_s"]))


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    sys.exit(main())

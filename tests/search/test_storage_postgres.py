"""``r3 tune --storage postgresql://...``: studies kept in a real PostgreSQL server (one the
user runs; here ``pgserver``: initdb'd in a temporary directory, on loopback, as an
unprivileged user), shared by several ``r3 tune`` processes as the journal file is.

Examples of use: two runs at once on one study share its budget exactly; a run killed
while it evaluates leaves a RUNNING trial that the next run fails and asks again; a trial
held on another host lives while its process writes its heartbeat.
"""

import json
import os
import signal
import subprocess
import time

import optuna
import pytest
from optuna.trial import TrialState

from spack_r3.search.trials import INTERRUPTED, counted
from spack_r3.search.store import STALE_S, Heartbeat, held, owner, storage

from pgserver import PostgresServer, binaries
from test_workspace_concurrency import fresh_copy, recorded, tree, tune_argv  # noqa: F401


@pytest.fixture(scope="module")
def pg():
    missing = "PostgreSQL's initdb/pg_ctl (Debian: apt-get install postgresql)" if not binaries() else None
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        missing = "psycopg2 (pip install psycopg2-binary)"
    if missing:
        if os.environ.get("R3_REQUIRE_SPACK"):
            pytest.fail("no %s, and R3_REQUIRE_SPACK is set (scripts/setup.sh installs it)" % missing)
        pytest.skip("no %s" % missing)
    with PostgresServer() as server:
        yield server


def studies(url):
    store = storage(None, url)
    return {s.study_name: store.get_all_trials(s._study_id) for s in store.get_all_studies()}


def test_two_runs_share_a_study_in_postgresql_and_its_budget_holds(recorded, tmp_path, pg):
    """Two r3 tune at once on one study kept in the server: the study holds the budget's
    evaluations (not twice as many), and both report the one confirmed result."""
    ws = fresh_copy(recorded, tmp_path)
    url = pg.url
    argv = tune_argv(ws, "--budget", 6, "--storage", url)
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    [first], [second] = (json.loads(out)["kernels"] for out, _ in outs)
    assert first["study"] == second["study"] and first["evaluations"] == second["evaluations"] == 6
    assert first["winner"] == second["winner"] and first["speedup"] == second["speedup"]
    trials = studies(url)[first["study"]]
    assert sum(counted(t) for t in trials) == 6
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert not os.path.exists(os.path.join(ws, "r3.journal"))  # nothing went to the workspace's journal


def test_a_killed_runs_running_trial_is_reclaimed(recorded, tmp_path, pg):
    """Kill a run while the server holds a trial of it RUNNING: the next run fails that trial
    (never counted), asks its point again, and completes the budget."""
    ws = fresh_copy(recorded, tmp_path)
    url = pg.url
    argv = tune_argv(ws, "--budget", 5, "--storage", url)
    for name in list(studies(url)):  # a study of its own: this workspace's copy of the kernel
        optuna.delete_study(study_name=name, storage=storage(None, url))
    first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    running = []
    while not running and first.poll() is None:  # (waits on what the server holds, not on a clock)
        if not any(t.state == TrialState.RUNNING for ts in studies(url).values() for t in ts):
            time.sleep(0.05)
            continue
        # Freeze the run, then look again: a trial still RUNNING now is held at the kill
        # (a stopped process finishes nothing); one that ended in between lets the run go on.
        os.kill(first.pid, signal.SIGSTOP)
        running = [t for ts in studies(url).values() for t in ts if t.state == TrialState.RUNNING]
        if not running:
            os.kill(first.pid, signal.SIGCONT)
    assert running, "the first run ended before a trial of it was seen held"
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    again = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    [kernel] = json.loads(again.stdout)["kernels"]
    assert kernel["evaluations"] == 5
    trials = studies(url)[kernel["study"]]
    killed = next(t for t in trials if t.number == running[0].number)
    assert killed.state == TrialState.FAIL and killed.user_attrs["status"] == INTERRUPTED and not counted(killed)
    assert sum(counted(t) for t in trials) == 5
    assert not [t for t in trials if t.state == TrialState.RUNNING]


def test_a_trial_held_on_another_host_lives_while_its_heartbeat_does(pg):
    """On another node a pid says nothing: a RUNNING trial held there lives while its process
    writes the time into it (``Heartbeat``), and is taken for dead once its last beat is
    older than STALE_S."""
    store = storage(None, pg.url)
    study = optuna.create_study(study_name="beats", storage=store)
    elsewhere = dict(owner(), host="node-elsewhere", pid=1)
    trial_id = store.create_new_trial(
        study._study_id,
        template_trial=optuna.trial.create_trial(
            state=TrialState.RUNNING, user_attrs={"owner": elsewhere, "beat": 1000.0}
        ),
    )
    trial = store.get_trial(trial_id)
    assert held(trial, now=1000.0 + STALE_S / 2) and not held(trial, now=1000.0 + STALE_S + 1)

    heart = Heartbeat(interval=0.05)
    heart.hold(store, trial_id)
    while store.get_trial(trial_id).user_attrs["beat"] == 1000.0:  # (until its first beat)
        time.sleep(0.05)
    assert held(store.get_trial(trial_id))
    heart.release(store, trial_id)

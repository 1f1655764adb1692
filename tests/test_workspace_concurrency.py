"""Several `r3 tune` on one workspace: studies kept in Optuna's journal storage (made for
several writers), the budget counted across processes, one confirmed result per kernel.

Examples of use: two runs started at once on a fresh workspace; a run resumed with other
--workers; an older workspace's SQLite studies carried over; options out of range.
"""

import json
import os
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from spack_r3.search.bayes import Study, Target
from spack_r3.search.trials import INTERRUPTED, counted
from spack_r3.search.space import KernelFacts, Space
from spack_r3.search.store import held, owner, storage
from spack_r3.workspace import Workspace

from test_record_replay import r3, r3_subprocess, source_tree

SCALE_C = r"""
void scale(int n, double *x, double a) {
  #pragma omp parallel for schedule(static)
  for (int i = 0; i < n; i++)
    x[i] = a * x[i] + 1.0;
}
"""

MAIN_C = r"""
#include <stdio.h>
#include <stdlib.h>
void scale(int n, double *x, double a);
int main(void) {
  int n = 20000;
  double *x = malloc(n * sizeof(double));
  for (int i = 0; i < n; i++) x[i] = i % 17;
  scale(n, x, 0.5);
  printf("%g %g\n", x[0], x[n - 1]);
  free(x);
  return 0;
}
"""

MAKEFILE = (
    "scale: main.o scale.o\n\t$(CC) -fopenmp -O2 -o $@ main.o scale.o\n%.o: %.c\n\t$(CC) -fopenmp -O2 -c -o $@ $<\n"
)
# A small search: seconds per run.
QUICK = ["--kernel", "scale", "--pairs", "3", "--confirm-pairs", "3", "--confirm-rounds", "1", "--seed", "3", "--json"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory, clang):
    """The source tree of a program with one OpenMP kernel."""
    return source_tree(tmp_path_factory, "scale", {"scale.c": SCALE_C, "main.c": MAIN_C, "Makefile": MAKEFILE})


@pytest.fixture(scope="module")
def recorded(tree, tmp_path_factory):
    """A workspace holding the capture of the kernel, never tuned."""
    ws = str(tmp_path_factory.mktemp("scale-ws"))
    assert r3("--workspace", ws, "record", "--source", tree, "--run", "./scale", "--kernel", "scale") == 0
    return ws


def fresh_copy(recorded, tmp_path):
    """A copy of the recorded workspace (its captures; no study yet)."""
    ws = str(tmp_path / "ws")
    subprocess.run(["cp", "-a", recorded, ws], check=True)
    return ws


def tune_argv(ws, *argv, mutator="none"):
    return (
        [sys.executable, "-m", "spack_r3.cli", "--workspace", ws, "tune", "--mutator", mutator]
        + QUICK
        + [str(a) for a in argv]
    )


def stored_trials(ws, name):
    return optuna.load_study(study_name=name, storage=storage(Workspace(ws))).get_trials()


@pytest.mark.parametrize("mutator", ["none", "rules"])
def test_two_runs_at_once_share_the_study_and_report_one_winner(tree, tmp_path, mutator):
    """Started together on a fresh workspace: one records while the other waits and reuses
    its captures, both finish, the kernel's studies hold the budget's evaluations (not
    twice as many), and both report the one confirmed result. With source rewrites
    (rules), one run at a time takes the outer loop; the other resumes it, spent."""
    ws = str(tmp_path / "ws")
    argv = tune_argv(ws, "--source", tree, "--run", "./scale", "--budget", 6, mutator=mutator)
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "Traceback" not in err
    assert len(os.listdir(os.path.join(ws, "runs"))) == 1  # recorded once
    first, second = ([k for k in json.loads(out)["kernels"]] for out, _ in outs)
    assert len(first) == len(second) == 1
    assert first[0]["study"] == second[0]["study"]
    assert first[0]["evaluations"] == second[0]["evaluations"] == 6
    for key in ("winner", "variant", "speedup", "speedup_min", "speedup_max", "baseline_s", "best_s"):
        assert first[0][key] == second[0][key], key
    store = storage(Workspace(ws))
    trials = [t for s in store.get_all_studies() for t in store.get_all_trials(s._study_id)]
    assert sum(counted(t) for t in trials) == 6  # the original's and its source variants'
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    # What both wrote is the one result: the saved result and the report agree with them.
    with open(os.path.join(ws, "reports", "tune.json")) as f:
        assert json.load(f)["kernels"][0]["winner"] == first[0]["winner"]
    assert os.path.exists(Workspace(ws).journal_file) and not os.path.exists(Workspace(ws).legacy_journal_file)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a second worker needs a second CPU")
def test_a_run_resumed_with_other_workers_goes_on_with_its_study(recorded, tmp_path):
    """The number of workers is no part of the search: with 2 workers each has half the
    CPUs (the kernel's threads setting spans fewer), and the study is the same one."""
    ws = fresh_copy(recorded, tmp_path)
    one = subprocess.run(tune_argv(ws, "--budget", 3, "--workers", 1), capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr
    two = subprocess.run(tune_argv(ws, "--budget", 5, "--workers", 2), capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr
    [a], [b] = json.loads(one.stdout)["kernels"], json.loads(two.stdout)["kernels"]
    assert a["study"] == b["study"]
    assert (a["evaluations"], b["evaluations"]) == (3, 5)
    assert sum(counted(t) for t in stored_trials(ws, b["study"])) == 5


def test_the_threads_range_is_no_part_of_a_studys_identity():
    """(The same on any machine:) a parallel kernel's space with 1, 2 or 64 CPUs per worker
    names one study; anything else that changes the space names another."""
    spaces = [Space(KernelFacts("k", parallel=True, cores=c)) for c in (1, 2, 64)]
    assert [p.name for p in spaces[1].params if p.name == "threads"] == ["threads"]
    assert len({s.fingerprint() for s in spaces}) == 1
    # Polly's parallel code is offered with more than one CPU: no part of the identity either.
    with_polly = [Space(KernelFacts("k", parallel=True, cores=c, polly=True)) for c in (1, 2)]
    assert "polly_parallel" in [p.name for p in with_polly[1].params]
    assert with_polly[0].fingerprint() == with_polly[1].fingerprint()
    assert Space(KernelFacts("k", parallel=True, cores=2, tolerance=0.01)).fingerprint() != spaces[0].fingerprint()


def test_a_trial_whose_process_died_is_failed_and_asked_again(recorded, tmp_path):
    """A trial kept RUNNING by a process that is gone counts for nobody: the next study
    opened on the storage fails it (never counted) and asks its point again first. One
    held by a process that lives is left alone."""
    ws = fresh_copy(recorded, tmp_path)
    store = storage(Workspace(ws))
    target = Target(
        "scale",
        [os.path.join(ws, "captures", c) for c in os.listdir(os.path.join(ws, "captures")) if not c.startswith(".")][
            :1
        ],
    )
    space = Space(KernelFacts("scale"))
    study = Study(store, target, space, sampler="random", seed=0)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    values = dict(space.defaults(), codegen=1)
    scratch = optuna.create_study()
    scratch.enqueue_trial(values)
    asked = scratch.ask()
    space.suggest(asked)
    for who in (dict(owner(), pid=dead.pid), owner()):
        frozen = create_trial(
            state=TrialState.RUNNING, params=asked.params, distributions=asked.distributions, user_attrs={"owner": who}
        )
        store.create_new_trial(study.study._study_id, template_trial=frozen)
    left, alive = study.study.get_trials()
    assert not held(left) and held(alive)

    again = Study(storage(Workspace(ws)), target, space, sampler="random", seed=0)
    left, alive = again.study.get_trials()
    assert left.state == TrialState.FAIL and left.user_attrs["status"] == INTERRUPTED and not counted(left)
    assert alive.state == TrialState.RUNNING
    assert again.pending() == [values]


def test_an_older_workspaces_sqlite_studies_are_carried_over(tmp_path):
    """r3 before the journal kept studies in r3.db (SQLite): the first run that finds no
    journal copies them in, trials and attributes, and leaves r3.db as it was."""
    ws = Workspace(str(tmp_path / "old")).ensure()
    db = ws.legacy_journal_file
    old = optuna.create_study(study_name="k@cap/original/tpe/abc", storage="sqlite:///" + db, direction="maximize")
    old.set_user_attr("confirmed", {"key": [2], "result": {"winner": "O3"}})
    old.enqueue_trial({"x": 1})
    for x in (1, 2):
        old.add_trial(
            create_trial(
                value=1.0 + x,
                params={"x": x},
                user_attrs={"status": "ok"},
                distributions={"x": optuna.distributions.IntDistribution(0, 3)},
            )
        )
    size = os.path.getsize(db)
    kept = optuna.load_study(study_name="k@cap/original/tpe/abc", storage=storage(ws))
    assert kept.user_attrs["confirmed"]["result"] == {"winner": "O3"}
    assert [(t.params, t.value, t.state) for t in kept.get_trials() if t.state == TrialState.COMPLETE] == [
        ({"x": 1}, 2.0, TrialState.COMPLETE),
        ({"x": 2}, 3.0, TrialState.COMPLETE),
    ]
    assert os.path.getsize(db) == size and os.path.exists(ws.journal_file)
    # Once: a study added to the journal since is not lost to a second copy.
    optuna.create_study(study_name="new", storage=storage(ws))
    assert {s.study_name for s in storage(ws).get_all_studies()} == {"k@cap/original/tpe/abc", "new"}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--workers", "100000"], "--workers 100000: this process may use %d CPU(s)" % len(os.sched_getaffinity(0))),
        (["--timeout", "-1"], "--timeout must be above 0 seconds"),
        (["--tolerance", "-1"], "--tolerance must be at least 0"),
        (["--min-share", "2"], "--min-share must be in [0, 1]"),
        (["--storage", "/nonexistent/studies.journal"], "--storage /nonexistent/studies.journal: no directory"),
    ],
)
def test_options_out_of_range_are_one_line(tmp_path, argv, message):
    proc = r3_subprocess("--workspace", str(tmp_path / "empty"), "tune", *argv)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and message in proc.stderr, proc.stderr

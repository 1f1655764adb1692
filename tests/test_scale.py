"""r3 tune on a Dask cluster (``--cluster``): a real LocalCluster of separate worker
processes, each hosting one persistent replay server.

Examples of use: a tune over ``--cluster local:2`` gives confirmed winners as the local
pool does; a worker process killed mid-study costs nothing finished and the study
completes; a batch cluster's description becomes the job script it would submit.
"""

import json
import os
import signal
import subprocess
import threading
import time
from types import SimpleNamespace

import pytest
from optuna.trial import TrialState

from spack_r3.search.bayes import Study, Target, counted
from spack_r3.search.lanes import Lane, lane_count, search_in_lanes
from spack_r3.search.space import KernelFacts, Space
from spack_r3.search.store import storage
from spack_r3.workspace import Workspace

from test_record_replay import r3_subprocess
from test_tune import program  # noqa: F401
from test_workspace_concurrency import fresh_copy, recorded, stored_trials, tree, tune_argv  # noqa: F401

try:
    import distributed  # noqa: F401
except ImportError:
    if os.environ.get("R3_REQUIRE_SPACK"):  # CI installs it (setup.sh): never skipped there
        raise
    pytest.skip("the scale-out needs Dask's distributed (scripts/setup.sh installs it)", allow_module_level=True)

from spack_r3.scale.cluster import connect  # noqa: E402
from spack_r3.scale.pool import DaskPool  # noqa: E402


def test_a_tune_on_a_local_dask_cluster_gives_confirmed_winners(recorded, tmp_path):
    """The same command as on the local pool, with --cluster local:2: the study holds its
    budget and the kernel gets a confirmed, verified result."""
    ws = fresh_copy(recorded, tmp_path)
    run = subprocess.run(
        tune_argv(ws, "--budget", 6, "--cluster", "local:2"), capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr
    [kernel] = json.loads(run.stdout)["kernels"]
    assert kernel["evaluations"] == 6
    assert kernel["speedup"] > 0 and kernel["speedup_min"] <= kernel["speedup"] <= kernel["speedup_max"]
    trials = stored_trials(ws, kernel["study"])
    assert sum(counted(t) for t in trials) == 6
    assert not [t for t in trials if t.state == TrialState.RUNNING]


def _target(ws):
    captures = os.path.join(ws, "captures")
    return Target(
        "scale",
        [os.path.join(captures, c) for c in sorted(os.listdir(captures)) if not c.startswith(".")][:1],
        parallel=True,
    )


def test_a_worker_killed_mid_evaluation_costs_that_evaluation_only(recorded, tmp_path):
    """Kill one worker process while it evaluates a candidate: Dask runs that task again on
    a worker that lives, the server binds there, every trial finished before the kill is
    still there, and the study completes its budget."""
    ws = fresh_copy(recorded, tmp_path)
    client, cluster, pins = connect("local:2", Workspace(ws))
    lines = []
    with DaskPool(
        client, timeout=60, cache_dir=Workspace(ws).cache_dir, pins=pins, say=lines.append, owned=cluster
    ) as pool:
        assert len(pool.servers) == 2 and "dashboard http" in pool.describe()
        victim = pool.servers[1].address
        pid = client.run(os.getpid)[victim]
        target = _target(ws)
        study = Study(
            storage(Workspace(ws)),
            target,
            Space(KernelFacts("scale", parallel=True, cores=pool.cores_per_worker)),
            sampler="random",
            seed=0,
            pairs=3,
        )
        before = []

        def kill_mid_evaluation():  # (waits on what the scheduler says, not on a clock)
            while len(study.trials()) < 2 or not client.processing([victim])[victim]:
                time.sleep(0.05)
            before.extend(t.number for t in study.trials() if t.state == TrialState.COMPLETE)
            os.kill(pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_mid_evaluation, daemon=True)
        killer.start()
        study.run(pool.servers, 8)
        killer.join(timeout=60)
        # Cluster-wide progress: every worker's evaluations (a new best is measured twice).
        evaluated = int(pool.throughput().split()[1])
        assert evaluated >= 8 and "worker(s) alive" in pool.throughput()  # (the nanny restarts the killed one)
    assert before, "the worker was killed once two trials had finished"
    assert any("is gone, its evaluation ran again elsewhere" in line for line in lines), lines
    trials = stored_trials(ws, study.name)
    assert sum(counted(t) for t in trials) == 8
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    complete = {t.number for t in trials if t.state == TrialState.COMPLETE}
    assert set(before) <= complete


@pytest.mark.parametrize(
    "kind, walltime, lines",
    [
        (
            "slurm",
            "02:00:00",
            [
                "#SBATCH -J r3-tune",
                "#SBATCH -p regular",
                "#SBATCH -A m1234",
                "#SBATCH -t 02:00:00",
                "#SBATCH --cpus-per-task=32",
                "#SBATCH --mem=60G",
            ],
        ),
        (
            "pbs",
            "02:00:00",
            ["#PBS -q regular", "#PBS -A m1234", "#PBS -l walltime=02:00:00", "#PBS -l select=1:ncpus=32:mem=60GB"],
        ),
        ("lsf", "02:00", ["#BSUB -q regular", '#BSUB -P "m1234"', "#BSUB -W 02:00", "#BSUB -n 32"]),
    ],
)
def test_a_batch_clusters_description_becomes_the_job_script_it_submits(tmp_path, kind, walltime, lines):
    """The workspace's cluster.json for a batch system: each job is one Dask worker (one
    replay server on the job's cores) whose script carries the options given. No batch
    system is needed to see what would be submitted."""
    from spack_r3.scale.cluster import jobqueue_cluster, read_config

    ws = Workspace(str(tmp_path / "ws"))
    ws.ensure()
    with open(ws.cluster_config_file, "w") as f:
        json.dump(
            {
                "kind": kind,
                "queue": "regular",
                "account": "m1234",
                "walltime": walltime,
                "cores": 32,
                "memory": "64GB",
                "jobs": 4,
                "adapt": {"minimum_jobs": 1, "maximum_jobs": 16},
            },
            f,
        )
    cluster, jobs, adapt = jobqueue_cluster(read_config("config", ws))
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    assert (jobs, adapt) == (4, {"minimum_jobs": 1, "maximum_jobs": 16})
    for line in lines:
        assert line in script.splitlines(), script
    assert "distributed.cli.dask_worker" in script and "--nthreads 32" in script


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--cluster", "local:0"], "--cluster local:0: local:N takes a number of workers, at least 1"),
        (
            ["--cluster", "yarn://x"],
            "--cluster yarn://x: give local:N, tcp://HOST:PORT, a cluster's JSON file or 'config'",
        ),
        (["--cluster", "/nonexistent/cluster.json"], "--cluster /nonexistent/cluster.json: cannot read"),
        (["--cluster", "local:1", "--workers", "2"], "--workers is for the local pool"),
    ],
)
def test_a_cluster_that_cannot_be_is_one_line(tmp_path, argv, message):
    proc = r3_subprocess("--workspace", str(tmp_path / "empty"), "tune", *argv)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and message in proc.stderr, proc.stderr


def test_a_running_scheduler_is_reached_by_its_address(recorded, tmp_path):
    """--cluster tcp://HOST:PORT: the workers of a scheduler started elsewhere (here, a
    LocalCluster this test runs) each get a replay server, on every CPU the worker may use,
    and evaluate the kernel as recorded; closing the pool leaves that cluster running."""
    from spack_r3.scale.cluster import open_pool
    from spack_r3.data import OK
    from spack_r3.search.tune import _baseline_problem

    ws = Workspace(fresh_copy(recorded, tmp_path))
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0"
    ) as running:
        with open_pool(running.scheduler_address, ws, timeout=60) as pool:
            assert len(pool.servers) == 1
            assert pool.cores_per_worker == len(os.sched_getaffinity(0))
            target = _target(ws.root)
            assert _baseline_problem(pool, target, 60) is None  # the baseline verifies there
            assert target.submit(pool.servers[0], None, pairs=2).status == OK
        with distributed.Client(running) as client:
            assert len(client.scheduler_info(n_workers=-1)["workers"]) == 1


def test_kernels_searched_at_once_each_have_workers_of_their_own():
    """Lanes deal the workers out: lane i takes every n-th, no worker is in two lanes, and
    the lanes search their kernels at the same time (the barrier holds until both arrive)."""
    pool = SimpleNamespace(servers=["w0", "w1", "w2", "w3", "w4"], cores_per_worker=1)
    lanes = [Lane(pool, i, 2) for i in range(2)]
    assert [lane.servers for lane in lanes] == [["w0", "w2", "w4"], ["w1", "w3"]]
    both = threading.Barrier(2, timeout=60)
    seen = []

    def search(lane, kernel):
        both.wait()  # never passed if the kernels were searched one after the other
        seen.append((kernel, tuple(lane.servers)))
        return kernel.upper()

    assert search_in_lanes(pool, ["a", "b"], 2, search) == ["A", "B"]  # in the targets' order
    assert {servers for _, servers in seen} == {("w0", "w2", "w4"), ("w1", "w3")}
    # One lane locally unless asked; on a cluster one per two workers; never more than the kernels.
    assert lane_count(None, 8, 32, cluster=None) == 1
    assert lane_count(None, 8, 32, cluster="local:8") == 4
    assert lane_count(None, 64, 3, cluster="tcp://h:8786") == 3
    assert lane_count(5, 2, 3, cluster=None) == 2


def test_a_failing_kernel_stops_the_other_lanes_from_taking_more():
    pool = SimpleNamespace(servers=["w0", "w1"], cores_per_worker=1)
    searched = []

    def search(lane, kernel):
        searched.append(kernel)
        if kernel == "bad":
            raise RuntimeError("the model endpoint is gone")
        return kernel

    with pytest.raises(RuntimeError, match="endpoint"):
        search_in_lanes(pool, ["bad", "x", "y", "z", "w"], 2, search)
    assert len(searched) < 5


def test_two_kernels_tuned_side_by_side_keep_their_budgets(program, tmp_path):
    """`r3 tune --kernels-at-once 2` on two workers: matmul and dot searched at once, one
    worker each; each study holds exactly its budget and each kernel is confirmed."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("two kernels at once need two workers, and this process may use one CPU")
    ws = str(tmp_path / "ws")
    proc = r3_subprocess(
        "--workspace",
        ws,
        "tune",
        "--source",
        program,
        "--run",
        "./prog",
        "--kernel",
        "matmul",
        "--kernel",
        "dot",
        "--budget",
        4,
        "--workers",
        2,
        "--kernels-at-once",
        2,
        "--pairs",
        3,
        "--confirm-pairs",
        3,
        "--confirm-rounds",
        1,
        "--seed",
        1,
        "--mutator",
        "none",
        "--json",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    kernels = {k["kernel"]: k for k in json.loads(proc.stdout)["kernels"]}
    assert set(kernels) == {"matmul", "dot"}
    for k in kernels.values():
        trials = stored_trials(ws, k["study"])
        assert sum(counted(t) for t in trials) == 4
        assert not [t for t in trials if t.state == TrialState.RUNNING]
        assert k["speedup_min"] <= k["speedup"] <= k["speedup_max"]

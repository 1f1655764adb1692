"""r3 tune on a Dask cluster (``--cluster``): a real LocalCluster of separate worker
processes, each hosting one persistent replay server.

Examples of use: a tune over ``--cluster local:2`` gives confirmed winners as the local
pool does; workers that do not see the workspace are sent each capture once; a worker
process killed mid-study costs nothing finished and the study completes; an adaptive
cluster grows and shrinks under a study; a batch cluster's description becomes the job
script it would submit.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from optuna.trial import TrialState

from spack_r3.replay.server import Pool, ReplayPool
from spack_r3.search.bayes import Study, Target
from spack_r3.search.trials import counted
from spack_r3.search.lanes import Lane, lane_count, search_in_lanes
from spack_r3.search.space import KernelFacts, Space
from spack_r3.search.store import storage
from spack_r3.workspace import Workspace

from test_record_replay import r3, r3_subprocess
from test_tune import program  # noqa: F401
from test_workspace_concurrency import MAIN_C, MAKEFILE, fresh_copy, recorded, stored_trials, tree, tune_argv  # noqa: F401

try:
    import distributed  # noqa: F401
except ImportError:
    if os.environ.get("R3_REQUIRE_SPACK"):  # CI installs it (setup.sh): never skipped there
        raise
    pytest.skip("the scale-out needs Dask's distributed (scripts/setup.sh installs it)", allow_module_level=True)

from spack_r3.scale import ship  # noqa: E402
from spack_r3.scale.cluster import connect, open_pool  # noqa: E402
from spack_r3.scale.pool import DaskPool, received, server_env  # noqa: E402


def test_a_tune_on_a_local_dask_cluster_gives_confirmed_winners(recorded, tmp_path):
    """The same command as on the local pool, with --cluster local:2: the study holds its
    budget and the kernel gets a confirmed, verified result. With R3_SHIP_CAPTURES=1 the
    workers replay their own copy of the capture, sent to each once (as to workers that do
    not see the workspace), kept by content in R3_WORKER_CAPTURES."""
    ws = fresh_copy(recorded, tmp_path)
    store = str(tmp_path / "worker-captures")
    env = dict(os.environ, R3_SHIP_CAPTURES="1", R3_WORKER_CAPTURES=store)
    run = subprocess.run(
        tune_argv(ws, "--budget", 6, "--cluster", "local:2"), capture_output=True, text=True, timeout=600, env=env
    )
    assert run.returncode == 0, run.stderr
    # One copy on the node's disk (the workers' stage cache beside it), named by its content.
    [key] = [k for k in os.listdir(store) if k != "stages"]
    capture = os.path.join(ws, "captures", os.listdir(os.path.join(ws, "captures"))[0])
    assert ship.manifest_of(capture)[0] == key
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
        assert isinstance(pool, Pool) and len(pool.servers) == 2 and "dashboard http" in pool.describe()
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
    from spack_r3.scale.cluster import jobqueue_cluster, most_workers, read_config

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
    assert most_workers(read_config("config", ws)) == 16  # the servers the search is offered: one a job
    for line in lines:
        assert line in script.splitlines(), script
    # One thread per worker (it evaluates one candidate at a time, on all the job's cores), so
    # that Dask's Adaptive, which counts threads, asks for jobs while tasks wait.
    assert "distributed.cli.dask_worker" in script and "--nthreads 1 " in script


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
    from spack_r3.data import OK
    from spack_r3.search.tune import _baseline_problem

    ws = Workspace(fresh_copy(recorded, tmp_path))
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0"
    ) as running:
        omp = {"OMP_WAIT_POLICY": "passive", "OMP_PROC_BIND": "close"}  # the application's, as recorded
        with open_pool(running.scheduler_address, ws, timeout=60, env=omp) as pool:
            assert len(pool.servers) == 1
            assert pool.cores_per_worker == len(os.sched_getaffinity(0))
            assert list(pool.client.run(server_env).values()) == [omp]  # its replay workers run OpenMP so
            target = _target(ws.root)
            assert _baseline_problem(pool, target, 60) is None  # the baseline verifies there
            assert target.submit(pool.servers[0], None, pairs=2).status == OK
            # It sees the workspace (the pool's marker there): nothing was sent.
            assert list(pool.client.run(received).values()) == [None] and not pool.sent
        with distributed.Client(running) as client:
            assert len(client.scheduler_info(n_workers=-1)["workers"]) == 1


def listed(servers):
    """A ReplayPool of the servers named (no worker started): its lanes, as the search deals them."""
    pool = ReplayPool.__new__(ReplayPool)
    pool.servers, pool.cores_per_worker = servers, 1
    assert isinstance(pool, Pool)
    return pool


def test_kernels_searched_at_once_each_have_workers_of_their_own():
    """Lanes deal the workers out: lane i takes every n-th, no worker is in two lanes, and
    the lanes search their kernels at the same time (the barrier holds until both arrive)."""
    pool = listed(["w0", "w1", "w2", "w3", "w4"])
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
    lines = []
    assert lane_count(5, 2, 3, cluster=None, say=lines.append) == 2
    assert lines == [
        "--kernels-at-once 5: 2 kernel(s) at once, as there are 2 worker(s) and each kernel searched at once "
        "needs one of its own"
    ]
    assert lane_count(5, 8, 3, cluster=None, say=lines.append) == 3 and len(lines) == 1  # (3 kernels: no shortage)


def test_a_lane_left_without_a_worker_of_its_own_takes_no_kernel():
    """Lanes dealt over two servers, and the pool has one left: the second lane has none,
    so it takes no kernel (it never borrows the first lane's worker); the first searches
    them all."""
    pool = listed(["w0"])
    assert Lane(pool, 1, 2).servers == []
    seen = []

    def search(lane, kernel):
        seen.append(tuple(lane.servers))
        return kernel

    assert search_in_lanes(pool, ["a", "b", "c"], 2, search) == ["a", "b", "c"]
    assert seen == [("w0",)] * 3


def test_a_failing_kernel_stops_the_other_lanes_from_taking_more():
    pool = listed(["w0", "w1"])
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


def test_a_worker_takes_the_cpus_of_a_share_no_live_worker_holds():
    """The plugin as each worker process gets it: the first two take a share each, a third
    finds none free (it runs unpinned); once the first is gone, a worker that starts (one
    Adaptive added, a restart) takes its share, whatever its name."""
    import pickle

    from spack_r3.scale.pool import ReplayWorker

    plugin = ReplayWorker(pins={0: [0], 1: [1]})
    a, b, c, d = (pickle.loads(pickle.dumps(plugin)) for _ in range(4))
    try:
        assert (a.claim(), b.claim(), c.claim()) == ([0], [1], None)
        a.teardown(None)
        assert d.claim() == [0]
    finally:
        for worker in (b, d):
            worker.teardown(None)
        for slot in (0, 1):
            os.unlink(plugin.slots + str(slot))


def _can_hide():
    """Whether this machine lets an unprivileged process mount over a folder for itself
    alone (user and mount namespaces): how a test hides the workspace from workers."""
    try:
        return subprocess.run(["unshare", "-Urm", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


HEADER_SCALE_C = r"""
#include "scale.h"
void scale(int n, double *x, double a) {
  #pragma omp parallel for schedule(static)
  for (int i = 0; i < n; i++)
    x[i] = a * x[i] + SCALE_ONE;
}
"""


def test_workers_that_do_not_see_the_workspace_are_sent_each_capture_once(recorded, tmp_path, tmp_path_factory):
    """Two Dask workers started where the workspace's folder is an empty one of their own
    (as on a node that does not mount it): the pool finds they do not read its marker,
    sends the capture's files once to the node's disk, and both replay it. A second
    evaluation sends nothing; a later run finds the copy on the node's disk, checks it and
    sends nothing; a copy that no longer matches its digests is sent again.

    A source variant of a unit that includes a header of its own tree (which the workers
    do not see either) compiles there from the header kept with the capture, and
    verifies; a capture recorded before headers were kept fails in one clear line."""
    from spack_r3.data import COMPILE_ERROR, OK, Variant
    from spack_r3.sourcepatch import make_patch

    if not _can_hide():
        pytest.skip("hiding the workspace from the workers needs user and mount namespaces (unshare -Urm)")
    ws = Workspace(fresh_copy(recorded, tmp_path))
    tree = tmp_path / "tree"
    tree.mkdir()
    for name, text in (("scale.c", HEADER_SCALE_C), ("scale.h", "#define SCALE_ONE 1.0\n"), ("main.c", MAIN_C)):
        (tree / name).write_text(text)
    (tree / "Makefile").write_text(MAKEFILE)
    hws = str(tmp_path / "hws")
    assert r3("--workspace", hws, "record", "--source", str(tree), "--run", "./scale", "--kernel", "scale") == 0
    [hcap] = _target(hws).captures
    with open(os.path.join(hcap, "capture.json")) as f:
        meta = json.load(f)
    assert [os.path.basename(p) for p in meta["headers"]] == ["scale.h"]
    with open(os.path.join(hcap, "source.c")) as f:
        text = f.read()
    rewrite = text.replace("x[i] = a * x[i] + SCALE_ONE;", "{ const double one = SCALE_ONE; x[i] = a * x[i] + one; }")
    variant = Variant(source_patch=make_patch(text, rewrite, "scale.c"))
    old = os.path.join(hws, "captures", "old")  # (as recorded before headers were kept)
    shutil.copytree(hcap, old)
    shutil.rmtree(os.path.join(old, "headers"))
    with open(os.path.join(old, "capture.json"), "w") as f:
        json.dump(dict(meta, headers=None), f)
    store = str(tmp_path_factory.mktemp("node-disk"))
    with distributed.LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address="127.0.0.1:0") as cluster:
        hidden = subprocess.Popen(
            ["unshare", "-Urm", "sh", "-c", 'mount -t tmpfs tmpfs "$0" && exec "$@"', str(tmp_path)]
            + [sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address]
            + ["--nworkers", "2", "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"],
            env=dict(os.environ, R3_WORKER_CAPTURES=store),
            cwd=store,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            with distributed.Client(cluster) as client:
                client.wait_for_workers(2, timeout=120)
            target = _target(ws.root)
            lines = []
            with open_pool(cluster.scheduler_address, ws, timeout=60, say=lines.append) as pool:
                assert len(pool.servers) == 2
                for server in pool.servers:
                    assert target.submit(server, None, pairs=2).status == OK
                files = len(ship.manifest_of(target.captures[0])[1])
                # To the node once: the worker first asked got the files, its neighbour found them there.
                assert sorted(pool.client.run(received).values()) == [0, files]
                assert len(pool.sent) == 1 and len(lines) == 1, lines
                for server in pool.servers:
                    assert target.submit(server, None, pairs=2).status == OK
                assert len(pool.sent) == 1 and sorted(pool.client.run(received).values()) == [0, files]
            [key] = [k for k in os.listdir(store) if not k.startswith((".", "stages"))]
            with open_pool(cluster.scheduler_address, ws, timeout=60) as again:
                assert target.submit(again.servers[0], None, pairs=2).status == OK
                assert not again.sent  # (the copy on the node's disk, checked)
            with open(os.path.join(store, key, "pre.bin"), "r+b") as f:
                f.write(b"\xff")
            with open_pool(cluster.scheduler_address, ws, timeout=60) as fixed:
                assert target.submit(fixed.servers[0], None, pairs=2).status == OK
                assert len(fixed.sent) == 1
            assert ship.manifest_of(os.path.join(store, key))[0] == key
            with open_pool(cluster.scheduler_address, ws, timeout=60) as pool:
                ev = Target("scale", [hcap], parallel=True).submit(pool.servers[0], variant, pairs=2)
                assert ev.status == OK, ev.diagnostics
                ev = Target("scale", [old], parallel=True).submit(pool.servers[0], variant, pairs=2)
                assert ev.status == COMPILE_ERROR and "keeps none of its headers" in ev.diagnostics
        finally:
            os.killpg(hidden.pid, signal.SIGTERM)
            hidden.wait(timeout=60)


def test_an_adaptive_cluster_grows_and_shrinks_under_a_study(recorded, tmp_path):
    """A cluster.json of kind local with Dask's adapt: it starts with one worker, and the
    pool offers the study as many servers as the cluster's most workers; their tasks wait
    on that worker, Dask's Adaptive starts another, the pool binds a server to it. Its
    limit lowered in the middle of a study, the cluster shrinks back to one worker; the
    study holds its budget and nothing finished is lost."""
    ws = Workspace(fresh_copy(recorded, tmp_path))
    config = str(tmp_path / "cluster.json")
    adapt = {"minimum": 1, "maximum": 2, "interval": "50ms", "target_duration": "1ms", "wait_count": 10**6}
    with open(config, "w") as f:
        json.dump({"kind": "local", "adapt": adapt}, f)
    lines = []
    with open_pool(config, ws, timeout=60, say=lines.append) as pool:
        cluster = pool.owned
        # Two servers (its most workers) on its one worker: the second's tasks wait there.
        assert len(pool.alive()) == 1 and len({s.address for s in pool.servers}) == 1
        target = _target(ws.root)
        study = Study(
            storage(ws),
            target,
            Space(KernelFacts("scale", parallel=True, cores=pool.cores_per_worker)),
            sampler="random",
            seed=0,
            pairs=3,
        )
        while len(pool.alive()) < 2 and len(study.trials()) < 40:  # busy: Dask asks for another worker
            study.run(pool.servers, len(study.trials()) + 4)
        assert len(pool.alive()) == 2, "the adaptive cluster did not grow under %d trials" % len(study.trials())
        assert len({s.address for s in pool.servers}) == 2, "the newcomer took a server"
        assert any("1 worker(s) joined" in line for line in lines), lines
        if len(os.sched_getaffinity(0)) >= 2:  # each pinned to a share of its own
            first, second = pool.client.run(lambda dask_worker: dask_worker.plugins["r3-replay"].server.cpus).values()
            assert first and second and not set(first) & set(second)
        grown = len(study.trials())
        shrink = threading.Thread(
            target=lambda: (
                _until(lambda: len(study.trials()) >= grown + 2),
                cluster.adapt(**dict(adapt, maximum=1, wait_count=1)),
            ),
            daemon=True,
        )
        shrink.start()
        study.run(pool.servers, grown + 10)
        shrink.join(timeout=60)
        _until(lambda: len(pool.alive()) == 1)
        assert len({s.address for s in pool.servers}) == 1
        study.run(pool.servers, grown + 12)  # on the one worker left
    trials = stored_trials(ws.root, study.name)
    assert sum(counted(t) for t in trials) == grown + 12
    assert not [t for t in trials if t.state == TrialState.RUNNING]


def _until(condition, limit=300):
    """Wait for ``condition`` (a cluster's state changing); fails only past a generous limit."""
    for _ in range(limit * 20):
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("the cluster did not get there")


def test_markers_of_dead_runs_are_removed_and_a_live_runs_kept(tmp_path):
    """Each run's marker names that run only. The next run to write one removes those of
    runs that are dead (on this host: their process is gone; from another host, or
    unreadable: untouched for an hour) and leaves those of runs that live."""
    folder = str(tmp_path / "cache")
    script = "import sys; from spack_r3.scale import ship; print(ship.Marker.write(sys.argv[1]).path)"
    dead = subprocess.run([sys.executable, "-c", script, folder], capture_output=True, text=True, check=True)
    dead = dead.stdout.strip()
    elsewhere = os.path.join(folder, ship.MARKER_PREFIX + "elsewhere")
    with open(elsewhere, "w") as f:
        json.dump({"host": "another-node", "pid": 1, "nonce": "elsewhere"}, f)
    older = os.path.join(folder, ship.MARKER_PREFIX + "older-r3")
    with open(older, "w") as f:
        f.write("0123abcd")  # (an older r3's marker: its nonce only)
    hour_ago = time.time() - ship.MARKER_STALE_S - 60
    os.utime(older, (hour_ago, hour_ago))
    assert os.path.exists(dead)
    live = ship.Marker.write(folder)  # (this process's: it lives)
    assert sorted(os.listdir(folder)) == sorted(os.path.basename(p) for p in (live.path, elsewhere))
    assert live.seen() and ship.sweep(folder) == []
    # The other host's run, its marker untouched for an hour since: dead too.
    os.utime(elsewhere, (hour_ago, hour_ago))
    assert ship.sweep(folder) == [elsewhere] and live.seen()
    live.remove()
    assert not os.listdir(folder)


def test_a_killed_run_leaves_nothing_that_confuses_the_next(recorded, tmp_path):
    """`r3 tune --cluster local:1` killed with SIGKILL, whole (the run and its workers, as
    a batch system ends a job), once its marker is in the workspace: the next run on the
    workspace removes that marker, its worker sees the workspace (no capture is sent), the
    study holds its budget exactly, and the run leaves no marker behind."""
    ws = fresh_copy(recorded, tmp_path)
    cache = Workspace(ws).cache_dir
    markers = lambda: sorted(n for n in os.listdir(cache) if n.startswith(ship.MARKER_PREFIX))  # noqa: E731
    killed = subprocess.Popen(
        tune_argv(ws, "--budget", 50, "--cluster", "local:1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _until(lambda: os.path.isdir(cache) and markers())
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=60)
    [stale] = markers()
    store = storage(Workspace(ws))
    before = sum(counted(t) for s in store.get_all_studies() for t in store.get_all_trials(s._study_id))
    run = subprocess.run(
        tune_argv(ws, "--budget", 3, "--cluster", "local:1"), capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr
    assert "does not see the workspace" not in run.stderr, run.stderr
    assert markers() == [], "the killed run's marker (%s) and the run's own are gone" % stale
    [kernel] = json.loads(run.stdout)["kernels"]
    trials = stored_trials(ws, kernel["study"])
    assert sum(counted(t) for t in trials) == max(3, before)  # (what the killed run finished is kept)
    assert not [t for t in trials if t.state == TrialState.RUNNING]


class Busy(distributed.WorkerPlugin):
    """(For the test below) when a worker's replay server evaluates: (start, end) of each
    candidate on the worker's clock, kept on the worker."""

    name = "test-busy"

    def setup(self, worker):
        self.spans = []
        server = worker.plugins["r3-replay"].server
        submit = server.submit

        def timed(*args, **kw):
            start = time.monotonic()
            try:
                return submit(*args, **kw)
            finally:
                self.spans.append((start, time.monotonic()))

        server.submit = timed


def test_lanes_on_an_adaptive_cluster_take_turns_then_get_workers_of_their_own(recorded, tmp_path):
    """Two kernels searched at once (two lanes of two servers) on an adaptive cluster of at
    most two workers that starts with one, of two threads (as a worker started by hand
    may have): every server is bound to it, and the lanes take turns there: its replay
    server never evaluates two candidates at once. That waiting work makes Dask start a
    second worker, and from then on each lane has a worker of its own. Each study holds
    its budget exactly."""
    ws = Workspace(fresh_copy(recorded, tmp_path))
    captures = _target(ws.root).captures
    adapt = {"minimum": 1, "maximum": 2, "interval": "50ms", "target_duration": "1ms", "wait_count": 10**6}
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0"
    ) as cluster:
        cluster.adapt(**adapt)
        client = distributed.Client(cluster)
        client.wait_for_workers(1)
        with DaskPool(client, timeout=60, cache_dir=ws.cache_dir, size=4) as pool:
            client.register_plugin(Busy())
            [first] = pool.alive()
            assert [s.address for s in pool.lane(0, 2)] == [s.address for s in pool.lane(1, 2)] == [first] * 2

            def search(lane, kernel):
                target = Target(kernel, captures, parallel=True)
                space = Space(KernelFacts(kernel, parallel=True, cores=lane.cores_per_worker))
                study = Study(storage(ws), target, space, sampler="random", seed=0, pairs=3)
                while len(pool.alive()) < 2 and len(study.trials()) < 40:  # busy: Dask starts another worker
                    study.run(lane.servers, len(study.trials()) + 2)
                budget = len(study.trials()) + 4
                study.run(lane.servers, budget)  # each lane on its own worker
                return study, budget, [s.address for s in lane.servers]

            (left, left_budget, on_left), (right, right_budget, on_right) = search_in_lanes(
                pool, ["left", "right"], 2, search
            )
            assert len(pool.alive()) == 2, "the adaptive cluster did not grow"
            assert on_left == [first] * 2 and len(set(on_right)) == 1 and first not in on_right
            spans = pool.client.run(lambda dask_worker: sorted(dask_worker.plugins["test-busy"].spans))
        assert len(spans) == 2 and all(spans.values()), "both workers evaluated"
        for worker, busy in spans.items():
            for (_, end), (start, _) in zip(busy, busy[1:]):
                assert start >= end, "two candidates evaluated at once on %s" % worker
    for study, budget in ((left, left_budget), (right, right_budget)):
        trials = stored_trials(ws.root, study.name)
        assert sum(counted(t) for t in trials) == budget
        assert not [t for t in trials if t.state == TrialState.RUNNING]


def test_a_journal_on_a_shared_file_is_written_under_its_lock_file(tmp_path):
    """`--storage PATH` for runs on several nodes: every process appends to the journal under
    Optuna's JournalFileOpenLock, a file beside it created with O_CREAT|O_EXCL (atomic on
    NFSv3 and later; this test runs on a local file system, not NFS). While another process
    holds it, a run's write waits (Optuna says so after 10 s) and nothing is written; once
    it is released the write goes on."""
    import optuna
    from optuna.storages.journal import JournalFileOpenLock

    path = str(tmp_path / "shared" / "studies.journal")
    os.makedirs(os.path.dirname(path))
    lock = JournalFileOpenLock(path)
    lock.acquire()
    assert os.path.isfile(path + ".lock") and not os.path.islink(path + ".lock")
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, optuna; from spack_r3.search.store import storage; "
            "optuna.create_study(study_name='shared', storage=storage(None, sys.argv[1]))",
            path,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Optuna's line after 10 s of waiting (it would force the lock open after 30 s unchanged).
        waited = next((line for line in writer.stderr if "taking longer than" in line), "")
        assert path + ".lock" in waited
        assert optuna.get_all_study_summaries(storage=storage(None, path)) == []  # (reading takes no lock)
    finally:
        lock.release()
    writer.communicate(timeout=120)
    assert writer.returncode == 0
    assert [s.study_name for s in optuna.get_all_study_summaries(storage=storage(None, path))] == ["shared"]
    assert not os.path.exists(path + ".lock")

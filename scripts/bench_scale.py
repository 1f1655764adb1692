#!/usr/bin/env python3
"""The scale-out, measured: the local replay pool against a Dask LocalCluster with as many
workers, the Dask path's own cost per evaluation, and a model of many workers.

1. Throughput, side by side in one run: rounds alternate the local pool (``ReplayPool``,
   N pinned workers) and ``--cluster local:N`` (``scale.pool.DaskPool``, N Dask worker
   processes each hosting a pinned replay server), each round evaluating the same list of
   distinct variants (drawn from the kernel's search space as the search draws them) over
   all the pool's servers, one thread each as the search drives them. Reported: each
   pool's evaluations per minute, and the paired ratio Dask/local of adjacent rounds
   (median, min, max): the machine's slow phases fall on both sides of a pair.
2. The Dask path's overhead per evaluation: (a) a task that does nothing, submitted and
   waited for as a candidate is (the round trip alone); (b) one candidate evaluated on
   the same pinned CPUs by a local replay server and by a Dask worker's, alternating: the
   difference of their submit-to-result times.
3. The coordinator's costs, for the model: the TPE sampler's time per suggestion over a
   study of n trials (the real space), the storage's time per trial (what a claim and a
   tell write and read: journal file), and the Dask scheduler's capacity in tasks per
   second (many no-op tasks in flight).
4. A model of 8, 64 and 512 workers tuning 32 kernels from those costs (assumptions in
   the json): kernels one after another (every worker on the current kernel's study), in
   lanes of one process (``--kernels-at-once``), and one process per kernel: where each
   stops scaling. ``--remodel`` recomputes it from the stored runs' measured inputs.

5. ``--ship``: a capture sent to a worker that does not see the workspace (``scale.ship``),
   for captures of 1, 32 and 256 MB (random bytes): the digests of its files where it is
   sent from, the sending (pieces of 4 MiB through ``client.run`` on loopback) and the
   check a worker makes of a copy it already has, once per process, before it reuses it.
   Kept under "ship" in the json, beside the runs.

Writes bench/scale.json (one entry per ``--label``). Usage: scripts/bench_scale.py
[--workers 2] [--rounds 4] [--variants 6] [--workspace DIR --kernel NAME (a kernel
recorded there, e.g. a proxy app's; default: the tests' OpenMP demo, recorded afresh)]
[--label demo] [--out bench/scale.json] | --ship
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests", "replay"))  # (the demo's module imports test_record_replay's helpers)

import optuna  # noqa: E402
from optuna.trial import TrialState, create_trial  # noqa: E402

from spack_r3.capture import list_captures  # noqa: E402
from spack_r3.data import OK, Variant  # noqa: E402
from spack_r3.replay.server import ReplayPool, ReplayServer  # noqa: E402
from spack_r3.scale import ship  # noqa: E402
from spack_r3.scale.cluster import connect  # noqa: E402
from spack_r3.scale.pool import PLUGIN, DaskPool  # noqa: E402
from spack_r3.scale.pool import commit as pool_commit  # noqa: E402
from spack_r3.scale.pool import put as pool_put  # noqa: E402
from spack_r3.search.confirm import run_jobs  # noqa: E402
from spack_r3.search.samplers import make_sampler  # noqa: E402
from spack_r3.search.space import Space  # noqa: E402
from spack_r3.search.store import journal  # noqa: E402
from spack_r3.search.tune import kernel_facts, plan_targets  # noqa: E402
from spack_r3.workspace import Workspace  # noqa: E402

PAIRS = 3


def spread(values):
    values = sorted(values)
    if not values:
        return None
    q = lambda p: values[min(len(values) - 1, int(p * len(values)))]  # noqa: E731
    return {
        "median": statistics.median(values),
        "min": values[0],
        "max": values[-1],
        "p10": q(0.1),
        "p90": q(0.9),
        "n": len(values),
    }


def record(workspace):
    """The tests' OpenMP demo (scale.c), recorded into ``workspace``."""
    import test_workspace_concurrency as demo

    tree = tempfile.mkdtemp(prefix="r3-bench-scale-")
    for name, text in {"scale.c": demo.SCALE_C, "main.c": demo.MAIN_C, "Makefile": demo.MAKEFILE}.items():
        with open(os.path.join(tree, name), "w") as f:
            f.write(text)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "spack_r3.cli",
            "--workspace",
            workspace,
            "record",
            "--source",
            tree,
            "--run",
            "./scale",
            "--kernel",
            "scale",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return "scale"


def variants(space, n, seed=0):
    """``n`` distinct points of the kernel's space, drawn at random as the search draws some."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    out, seen = [], set()
    while len(out) < n:
        trial = study.ask()
        values = space.suggest(trial)
        key = json.dumps(values, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(space.variant(values, Variant()))
        study.tell(trial, 0.0)
    return out


def one_round(servers, target, chosen):
    jobs = [lambda server, v=v: target.submit(server, v, pairs=PAIRS) for v in chosen]
    t0 = time.monotonic()
    evs = run_jobs(servers, jobs)
    wall = time.monotonic() - t0
    return 60.0 * len(evs) / wall, sum(ev.status == OK for ev in evs), [ev.compile_s or 0.0 for ev in evs]


def noop():
    from distributed import get_worker

    return None, get_worker().address


def scheduler_capacity(client, n=500):
    """No-op tasks per second with ``n`` in flight at once."""
    t0 = time.monotonic()
    futures = [client.submit(noop, pure=False) for _ in range(n)]
    client.gather(futures)
    return n / (time.monotonic() - t0)


def sampler_seconds(space, trials, asks=5):
    """Seconds per suggestion of the search's TPE sampler over a study of ``trials`` finished trials."""
    study = optuna.create_study(direction="maximize", sampler=make_sampler("tpe", 0))
    random_study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for i in range(trials):
        t = random_study.ask()
        space.suggest(t)
        study.add_trial(create_trial(params=t.params, distributions=t.distributions, value=1.0 + (i % 7) / 10))
        random_study.tell(t, 0.0)
    times = []
    for _ in range(asks):
        t0 = time.monotonic()
        t = study.ask()
        space.suggest(t)
        times.append(time.monotonic() - t0)
        study.tell(t, state=TrialState.FAIL)
    return statistics.median(times)


def storage_seconds(path, space, trials):
    """Seconds per trial of a journal file's share of a claim and a tell, over ``trials`` trials."""
    store = journal(path)
    study = optuna.create_study(storage=store, study_name="bench-%d" % trials, direction="maximize")
    draw = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2))
    times = []
    for _ in range(trials):
        t = draw.ask()
        space.suggest(t)
        t0 = time.monotonic()
        sid = store.create_new_trial(
            study._study_id,
            template_trial=create_trial(
                state=TrialState.RUNNING, params=t.params, distributions=t.distributions, user_attrs={"owner": {}}
            ),
        )
        store.get_all_trials(study._study_id, deepcopy=False)
        store.set_trial_user_attr(sid, "status", OK)
        store.set_trial_user_attr(sid, "evaluation", {"ratios": [1.0] * 5})
        store.set_trial_state_values(sid, TrialState.COMPLETE, [1.0])
        times.append(time.monotonic() - t0)
        draw.tell(t, 0.0)
    return statistics.median(times[-max(1, trials // 4) :])


def model(eval_s, overhead_s, sampler_s, storage_s, scheduler_tps, kernels=32, budget=60):
    """Evaluations per minute of W workers, and what binds (see ASSUMPTIONS)."""
    out = {}
    coord_s = sampler_s + storage_s  # one suggestion + its claim and tell, under the study's lock
    for w in (8, 64, 512):
        limits = {"workers": w / (eval_s + overhead_s), "scheduler": scheduler_tps}
        # As it is: one kernel at a time; at most `budget` of its trials in flight, and
        # every suggestion serialized by the study (and the coordinator's GIL).
        seq = dict(limits, study_in_flight=min(w, budget) / (eval_s + overhead_s), sampler_and_storage=1 / coord_s)
        # Every kernel's study at once, W/K workers each (``--kernels-at-once``: lanes). In one
        # r3 tune process the lanes' suggestions are serialized by its GIL, as one study's are;
        # with one process per kernel (``r3 tune --kernel K`` each, one shared storage) they
        # overlap, and one journal file's lock serializes every write of every study.
        lanes = dict(limits, sampler_and_storage=1 / coord_s)
        par = dict(limits, sampler=kernels / sampler_s, storage_journal=1 / storage_s)
        rows = {"one_kernel_at_a_time": seq, "lanes_in_one_process": lanes, "one_process_per_kernel": par}
        out[str(w)] = {
            name: {
                "evals_per_min": 60 * min(r.values()),
                "bound_by": min(r, key=r.get),
                "kernels_32x%d_hours" % budget: kernels * budget / min(r.values()) / 3600,
            }
            for name, r in rows.items()
        }
    return out


ASSUMPTIONS = [
    "an evaluation costs eval_s on its worker (compile + verify + paired replay), measured here on the demo kernel; "
    "real kernels cost more (XSBench's: seconds), which only moves the knee to more workers",
    "the Dask path adds overhead_s per evaluation (measured (b)); workers never wait on each other",
    "the coordinator spends sampler_s (TPE ask at budget/2 trials) + storage_s (claim and tell) per trial under the "
    "study's lock, serialized by one Python process's GIL",
    "the Dask scheduler handles scheduler_tps tasks per second (measured with no-op tasks on this machine; "
    "Dask's docs say about 1 ms of scheduler time per task)",
    "one journal file's lock serializes every write of every process; a PostgreSQL server does not (rows, not one "
    "file) and is the storage to use beyond that point",
    "one kernel at a time: a study has at most `budget` trials in flight (the design counts running trials against "
    "the budget), so workers beyond the budget idle",
    "no model proposals (their latency overlaps evaluation) and no confirmation (a few percent of a run)",
    "lanes (--kernels-at-once) in one process: every lane's suggestions share its GIL; one process per kernel: "
    "suggestions overlap, the journal file's lock does not",
]


def _head():
    """The checkout's commit, None outside git."""
    git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return git.stdout.strip() or None


def remodel(path):
    """The model of each run in ``path`` again, from the inputs that run measured."""
    with open(path) as f:
        data = json.load(f)
    for run in data["runs"].values():
        if "model" in run:
            i = run["model"]["inputs"]
            costs = (i["overhead_s"], i["sampler_s"], i["storage_s"], i["scheduler_tps"])
            run["model"].update(
                assumptions=ASSUMPTIONS, this_kernel=model(i["eval_s"], *costs), kernel_of_2s=model(2.0, *costs)
            )
    with open(path, "w") as f:
        json.dump(data, f, indent=2)


def _check_copy(key, dask_worker):
    """(On a worker) seconds a fresh process takes to check its copy of capture ``key``."""
    store = ship.Store(dask_worker.plugins[PLUGIN].store.root)
    t0 = time.monotonic()
    assert store.path(key)
    return time.monotonic() - t0


def ship_cost(sizes_mb=(1, 32, 256), repeats=3):
    """Section 5: a capture of each size sent to one worker (its store on this disk)."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="r3-bench-ship-") as tmp:
        os.environ[ship.STORE_ENV] = os.path.join(tmp, "store")  # (the workers inherit it)
        client, cluster, _ = connect("local:1", Workspace(tmp))
        with DaskPool(client, cache_dir=os.path.join(tmp, "cache"), owned=cluster, ship_all=True) as pool:
            [address] = pool.alive()
            for size in sizes_mb:
                capture = os.path.join(tmp, "capture-%d" % size)
                os.makedirs(capture)
                with open(os.path.join(capture, "pre.bin"), "wb") as f:
                    f.write(os.urandom(size << 20))
                digest_s, send_s, check_s = [], [], []
                for r in range(repeats):
                    with open(os.path.join(capture, "capture.json"), "w") as f:
                        json.dump({"round": r}, f)  # (another capture each round: sent again)
                    t0 = time.monotonic()
                    key, manifest = ship.manifest_of(capture)
                    digest_s.append(time.monotonic() - t0)
                    t0 = time.monotonic()
                    ship.send(client, address, capture, key, manifest, pool_put, pool_commit)
                    send_s.append(time.monotonic() - t0)
                    check_s.append(client.run(_check_copy, key)[address])
                out["%d_MB" % size] = {
                    "digests_s": spread(digest_s),
                    "send_s": spread(send_s),
                    "send_MB_per_s": size / statistics.median(send_s),
                    "check_copy_s": spread(check_s),
                }
                print(
                    "%d MB: send %.2f s, check %.2f s" % (size, statistics.median(send_s), statistics.median(check_s))
                )
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--variants", type=int, default=6)
    ap.add_argument("--workspace", default=None)
    ap.add_argument("--kernel", default=None)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "scale.json"))
    ap.add_argument("--label", default="demo", help="the run's key in the json (runs under other keys are kept)")
    ap.add_argument(
        "--remodel", action="store_true", help="only compute the model again from each stored run's measured inputs"
    )
    ap.add_argument("--ship", action="store_true", help="only measure sending captures to workers (section 5)")
    args = ap.parse_args()
    if args.remodel:
        return remodel(args.out)
    if args.ship:
        with open(args.out) as f:
            data = json.load(f)
        load = os.getloadavg()[0]
        sizes = ship_cost()
        data["ship"] = {
            "machine": {"cpus": len(os.sched_getaffinity(0)), "python": platform.python_version()},
            "load_average_start_end": [load, os.getloadavg()[0]],
            "chunk_bytes": ship.CHUNK,
            "sizes": sizes,
            "note": "a LocalCluster worker on loopback, its store on this machine's disk; 3 captures a size",
        }
        with open(args.out, "w") as f:
            json.dump(data, f, indent=2)
        return

    ws_root = args.workspace or tempfile.mkdtemp(prefix="r3-bench-scale-ws-")
    kernel = args.kernel or (None if args.workspace else record(ws_root))
    ws = Workspace(ws_root)
    plan = plan_targets(ws, list_captures(ws), [kernel] if kernel else [])
    target = plan.targets[0]
    result = {
        "machine": {"cpus": len(os.sched_getaffinity(0)), "python": platform.python_version(), "host": platform.node()},
        "commit": _head(),  # (the code measured)
        "load_average_start": os.getloadavg()[0],  # (a shared machine: what else ran)
        "kernel": target.kernel,
        "workers": args.workers,
        "pairs_per_evaluation": PAIRS,
    }

    client, cluster, pins = connect("local:%d" % args.workers, ws)
    with (
        ReplayPool(args.workers, cache_dir=ws.cache_dir) as local,
        DaskPool(client, cache_dir=ws.cache_dir, pins=pins, owned=cluster) as dask,
    ):
        space = Space(kernel_facts(target, local.cores_per_worker))
        chosen = variants(space, args.variants)
        for pool in (local, dask):  # warm: every worker loads the capture
            one_round(pool.servers, target, chosen[: args.workers])
        rates = {"local": [], "dask": []}
        compile_s = []
        for r in range(args.rounds):
            order = (("local", local), ("dask", dask)) if r % 2 == 0 else (("dask", dask), ("local", local))
            for name, pool in order:
                rate, ok, compiles = one_round(pool.servers, target, chosen)
                rates[name].append(rate)
                compile_s += compiles
            print(
                "round %d: local %.1f, dask %.1f evals/min" % (r + 1, rates["local"][-1], rates["dask"][-1]), flush=True
            )
        ratios = [d / loc for d, loc in zip(rates["dask"], rates["local"])]
        result["throughput"] = {
            "local_evals_per_min": spread(rates["local"]),
            "dask_evals_per_min": spread(rates["dask"]),
            "dask_over_local_paired": spread(ratios),
            "variants_per_round": len(chosen),
            "note": "each round: the same distinct variants over all the pool's servers, rounds alternating",
        }

        # 2a. the round trip of a task that does nothing
        roundtrip = []
        for _ in range(100):
            t0 = time.monotonic()
            client.submit(noop, pure=False).result()
            roundtrip.append(time.monotonic() - t0)
        # 2b. one candidate on the same CPUs: a local server's against a Dask worker's
        remote = dask.servers[0]
        worker_cpus = pins.get(0) if pins else None
        diffs, local_s, dask_s = [], [], []
        with ReplayServer(cpus=worker_cpus, cache_dir=ws.cache_dir) as alone:
            target.submit(alone, chosen[0], pairs=PAIRS)
            for i in range(10):
                pair = []
                for server in (alone, remote) if i % 2 == 0 else (remote, alone):
                    t0 = time.monotonic()
                    target.submit(server, chosen[0], pairs=PAIRS)
                    pair.append((server is remote, time.monotonic() - t0))
                d = dict(pair)
                local_s.append(d[False])
                dask_s.append(d[True])
                diffs.append(d[True] - d[False])
        result["dask_overhead_per_evaluation_s"] = {
            "noop_task_roundtrip": spread(roundtrip),
            "same_candidate_dask_minus_local": spread(diffs),
            "candidate_local_s": spread(local_s),
            "candidate_dask_s": spread(dask_s),
        }
        tps = scheduler_capacity(client)

    # 3. coordinator costs
    sampler = {n: sampler_seconds(space, n) for n in (10, 30, 100, 300)}
    with tempfile.TemporaryDirectory() as tmp:
        storage = {n: storage_seconds(os.path.join(tmp, "s%d.journal" % n), space, n) for n in (30, 100, 300)}
    eval_s = statistics.median(local_s)
    result["coordinator"] = {
        "sampler_s_per_suggestion_by_trials": sampler,
        "journal_storage_s_per_trial_by_trials": storage,
        "scheduler_tasks_per_s": tps,
        "evaluation_s": eval_s,
        "compile_s": spread(compile_s),
    }
    overhead = max(0.0, statistics.median(diffs))
    result["model"] = {
        "assumptions": ASSUMPTIONS,
        "inputs": {
            "eval_s": eval_s,
            "overhead_s": overhead,
            "sampler_s": sampler[30],
            "storage_s": storage[30],
            "scheduler_tps": tps,
            "kernels": 32,
            "budget": 60,
        },
        "this_kernel": model(eval_s, overhead, sampler[30], storage[30], tps),
        "kernel_of_2s": model(2.0, overhead, sampler[30], storage[30], tps),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    try:
        with open(args.out) as f:
            data = json.load(f)  # (other runs, and "ship", kept)
    except (OSError, ValueError):
        data = {}
    data["script"] = "scripts/bench_scale.py"
    data.setdefault("runs", {})[args.label] = result
    with open(args.out, "w") as f:
        json.dump(data, f, indent=2)
    print(json.dumps({k: result[k] for k in ("throughput", "dask_overhead_per_evaluation_s")}, indent=1))


if __name__ == "__main__":
    main()

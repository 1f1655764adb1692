"""The replay server: the API the search calls, ``submit(capture, variant) -> Evaluation``.

It drives one persistent worker process (``worker``); if the worker dies or
stops answering it is restarted and the evaluation in flight is reported as
failed, so the caller always gets an Evaluation back and goes on.
"""

import concurrent.futures
import json
import os
import select
import subprocess
import sys
import threading
import time
from typing import List, Protocol, runtime_checkable

from ..data import CRASH, TIMEOUT, WARM, Evaluation, Variant
from ..errors import R3Error, RewriteUncheckable
from . import confine
from ..compile.stages import STAGE_CACHE_ENV

HOST_WORKER = "spack_r3.replay.worker"
TIMEOUT_S = 60.0  # seconds before a candidate's run counts as hung (r3 replay's and r3 tune's --timeout)


class ReplayServer:
    """Usage::

    with ReplayServer() as server:
        ev = server.submit(capture_dir, Variant(pipeline=parse("O2")), repeat=10)
    """

    def __init__(self, timeout=TIMEOUT_S, load_timeout=300.0, cpus=None, cache_dir=None, env=None):
        self.timeout = timeout
        # the OpenMP runtime's settings the application ran with (affinity, wait policy:
        # ``omp_environment``), which libomp reads once as the worker loads it
        self.env = dict(env or {})
        self.load_timeout = load_timeout
        self.cpus = cpus  # pin the worker (and the candidates it forks) to these CPUs
        self.cache_dir = cache_dir  # where compile stages keep what they built (see compile.stages)
        self.proc = None
        self._buf = b""
        # a capture's backend names the worker module that replays it (backends.worker_of):
        # the host one runs, another backend's waits here while the other one runs
        self.module = HOST_WORKER
        self._parked = {}  # module -> (proc, buffer)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def start(self):
        """Start the worker now, with the environment as it is (a request starts one
        where none runs)."""
        env = dict(os.environ, **self.env)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        env["R3_WORKER_PARENT"] = str(os.getpid())  # (replay.worker: it goes when this process does)
        if self.cache_dir:
            env[STAGE_CACHE_ENV] = self.cache_dir
        self.proc = _popen(
            [sys.executable, "-m", self.module],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        if self.cpus:
            os.sched_setaffinity(self.proc.pid, self.cpus)
        self._buf = b""

    def _use(self, capture_dir):
        """Talk to the worker of ``capture_dir``'s backend from now on."""
        from ..backends import worker_of

        module = worker_of(capture_dir)
        if module != self.module:
            self._parked[self.module] = (self.proc, self._buf)
            self.proc, self._buf = self._parked.pop(module, (None, b""))
            self.module = module

    def close(self):
        parked, self._parked = list(self._parked.values()), {}
        self._close_one()
        for self.proc, self._buf in parked:  # the other backends' workers
            self._close_one()

    def _close_one(self):
        if self.proc and self.proc.poll() is None:
            try:
                self.proc.stdin.write(b'{"op": "quit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def _restart(self):
        if self.proc:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def _request(self, req, timeout):
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self._restart()
                return None, "the replay worker did not answer within %.0fs" % timeout
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    self._restart()
                    return None, "the replay worker died"
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        reply = json.loads(line)
        _say_unconfined(reply.get("unconfined"))
        return reply, None

    def load(self, capture_dir, sequence=None):
        """Parse a capture in the worker ahead of time (R3Error if it is unusable), and
        merge the ``sequence`` of recorded calls it starts (R3Error if they cannot be)."""
        self._use(capture_dir)
        req = {"op": "load", "dir": os.path.abspath(capture_dir)}
        if sequence:
            req["sequence"] = [os.path.abspath(d) for d in sequence]
        reply, err = self._request(req, self.load_timeout)
        if err or not reply.get("ok"):
            raise R3Error(err or reply.get("error"))

    def submit(
        self,
        capture_dir,
        variant=None,
        repeat=5,
        pairs=0,
        tolerance=None,
        timeout=None,
        verify_runs=1,
        cache=WARM,
        sequence=None,
        race=False,
    ):
        """Replay one variant; never raises for a bad candidate, only for a bad capture.
        ``cache``: WARM, each timed run finding the caches as the previous run left them,
        SHARED or COLD, emptied before each (see ``engine.CacheFlush``). ``sequence``:
        capture directories of the kernel's recorded calls in order (``capture_dir`` first),
        each timed run a pass over them all (``replay.sequence``). ``race``: the pairs stop
        after the first few where the candidate is clearly slower (``raced_out``, ``worker.RACE_AFTER``)
        than the build (True) or than the speedup given (a search's best so far)."""
        variant = variant or Variant()
        timeout = timeout or self.timeout
        self._use(capture_dir)
        req = {
            "op": "evaluate",
            "dir": os.path.abspath(capture_dir),
            "variant": variant.to_json(),
            "repeat": repeat,
            "pairs": pairs,
            "timeout": timeout,
            "verify_runs": verify_runs,
            "cache": cache,
        }
        if sequence:
            req["sequence"] = [os.path.abspath(d) for d in sequence]
        if tolerance is not None:
            req["tolerance"] = tolerance
        if race:
            req["race"] = float(race)
        t0 = time.perf_counter()
        reply, err = self._request(req, self.load_timeout + timeout + 10)
        if err:
            status = TIMEOUT if "answer" in err else CRASH
            return Evaluation(
                capture=os.path.basename(capture_dir), variant=variant.to_json(), status=status, diagnostics=err
            )
        if not reply.get("ok"):
            raise (RewriteUncheckable if reply.get("uncheckable") else R3Error)(reply.get("error"))
        ev = Evaluation.from_json(reply["evaluation"])
        # the request's way to the worker and back
        ev.stages["ipc"] = max(0.0, time.perf_counter() - t0 - sum(ev.stages.values()))
        return ev


# The OpenMP runtime's settings that decide how a threaded kernel's fork and join cost:
# where threads run and how they wait between regions. Record keeps those the application
# ran with (``Capture.launch["omp_env"]``); replay's workers start with them.
OMP_SETTINGS = (
    "OMP_PROC_BIND",
    "OMP_PLACES",
    "OMP_WAIT_POLICY",
    "OMP_DYNAMIC",
    "OMP_MAX_ACTIVE_LEVELS",
    "KMP_BLOCKTIME",
    "KMP_AFFINITY",
    "KMP_LIBRARY",
    "GOMP_SPINCOUNT",
)


def omp_environment(captures):
    """The OpenMP settings the application of ``captures`` (data.Capture) ran with: those of
    its first capture that names them; {} where none does."""
    for c in captures:
        env = (c.launch or {}).get("omp_env")
        if env:
            return {k: v for k, v in env.items() if k in OMP_SETTINGS}
    return {}


_said = set()


def _say_unconfined(missing):
    """Once per process: what the worker's kernel would not let it confine candidates by
    (``replay.confine``); they still run in a process group that is killed and under a
    memory limit."""
    if not missing or not confine.seccomp_missing(missing) or "seccomp" in _said:
        return
    _said.add("seccomp")
    landlock = not any(m.startswith(("no Landlock", "Landlock")) for m in missing)
    sys.stderr.write(
        "r3: warning: candidates run without a seccomp filter here (%s): a candidate's "
        "process group is killed when it ends and its memory is limited, but it may start "
        "processes while it runs%s\n" % ("; ".join(missing), "" if landlock else " and write files")
    )
    sys.stderr.flush()


_spawner_lock = threading.Lock()
_spawner = None  # a thread at normal priority that starts workers for SCHED_IDLE threads


def _idle():
    return hasattr(os, "SCHED_IDLE") and os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK == os.SCHED_IDLE


def _popen(*args, **kwargs):
    """subprocess.Popen, at normal priority even when called from a SCHED_IDLE thread (whose
    children would inherit its policy, and an unprivileged process cannot leave it)."""
    if _idle() and _spawner is not None:
        return _spawner.submit(subprocess.Popen, *args, **kwargs).result()
    return subprocess.Popen(*args, **kwargs)


def defer_to_workers(servers):
    """Called on a thread that drives ``servers``: when their pinned workers hold every CPU
    this process may use, the thread runs at SCHED_IDLE from then on, so that it gets a
    CPU only while that CPU's worker waits for it and never preempts a timed run (on 2
    CPUs with 2 workers the coordinator took about a tenth of the throughput of 2 workers,
    by preempting them). Workers it restarts still run at normal priority."""
    global _spawner
    pinned = set()
    for server in servers:
        pinned.update(server.cpus or ())
    if not (pinned and pinned >= set(os.sched_getaffinity(0)) and hasattr(os, "SCHED_IDLE")) or _idle():
        return
    with _spawner_lock:
        if _spawner is None:  # created from this thread while it still runs at normal priority
            _spawner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="r3-spawner")
            _spawner.submit(lambda: None).result()
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except OSError:  # not allowed here: the thread stays as it was
        pass


@runtime_checkable
class Pool(Protocol):
    """What the search uses of a pool of replay servers: this machine's (``ReplayPool``) or
    a Dask cluster's (``scale.pool.DaskPool``). A server is what ``ReplayServer`` offers
    (``evaluate``, ``confirm``, ...)."""

    cores_per_worker: int  # the most threads a candidate runs on one server

    @property
    def servers(self) -> List["ReplayServer"]: ...

    @property
    def confirm_servers(self) -> List["ReplayServer"]:
        """Where winners are confirmed (a cluster: one worker, so its rounds pool one node's times)."""
        ...

    def lane(self, index: int, count: int) -> List["ReplayServer"]:
        """The servers of lane ``index`` of ``count`` (``search.lanes.Lane``)."""
        ...

    def describe(self) -> str: ...

    def close(self) -> None: ...


class ReplayPool:
    """Several persistent replay workers, for evaluating candidates in parallel.

    Each worker gets its own share of this process's CPUs and is pinned there, so
    that the paired timings of one worker do not fight with another's; a parallel
    kernel then runs at most ``cores_per_worker`` threads. With more workers than
    CPUs nothing is pinned.

        with ReplayPool(2) as pool:
            for server in pool.servers: ...   # one driving thread per server
    """

    def __init__(self, workers=1, timeout=TIMEOUT_S, pin=True, cache_dir=None, env=None):
        if workers < 1:
            raise R3Error("--workers must be at least 1")
        cpus = sorted(os.sched_getaffinity(0))
        share = len(cpus) // workers
        pinned = pin and share >= 1
        self.cores_per_worker = max(1, share)
        self.servers = [
            ReplayServer(
                timeout, cpus=cpus[i * share : (i + 1) * share] if pinned else None, cache_dir=cache_dir, env=env
            )
            for i in range(workers)
        ]

    @property
    def confirm_servers(self):
        return self.servers

    def lane(self, index, count):
        return self.servers[index::count]

    def describe(self):
        return "%d replay worker%s on this machine, %d core%s each" % (
            len(self.servers),
            "" if len(self.servers) == 1 else "s",
            self.cores_per_worker,
            "" if self.cores_per_worker == 1 else "s",
        )

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        for server in self.servers:
            server.close()

"""Candidates evaluated on Dask workers, one persistent replay server in each.

    with DaskPool(client, timeout=60.0, cache_dir=ws.cache_dir) as pool:
        ev = pool.servers[0].submit(capture_dir, variant, pairs=5)

Each Dask worker process hosts one ``ReplayServer`` (``ReplayWorker``, a WorkerPlugin)
pinned to its cores: the worker's share in ``pins`` (by worker name: a LocalCluster on
this machine splits its CPUs as the local pool does), else every CPU the worker process
may use (a batch job's allocation). A candidate goes as one task (capture directory,
variant, options) and comes back as its Evaluation. The baseline and the candidate are
timed in pairs inside that task, so a speedup is always a ratio of two times measured
on one worker, never a time from one node against one from another.

Captures are read from the file system at the path given (made absolute here): the
workspace must lie on a file system the workers share (a cluster's home or scratch;
on one machine, trivially). Each worker's replay server parses a capture once and keeps it.

``servers`` holds one ``RemoteServer`` per worker, each bound to one worker (a worker
that joins later, such as a batch job that started, gets one the next time the search
asks for the servers). A worker that dies mid-evaluation costs that evaluation only: its task's
restriction to the bound worker is loose, so Dask runs it again on a worker that lives,
and the server binds to such a worker for what follows. A task that killed
``distributed.scheduler.allowed-failures`` workers comes back as a crash of its candidate.
"""

import collections
import os
import threading
import time

from distributed import WorkerPlugin, get_worker
from distributed.scheduler import KilledWorker

from ..data import CRASH, Evaluation, Variant
from ..replay.server import ReplayServer

PLUGIN = "r3-replay"
REPORT_S = 60.0  # between two lines of cluster-wide progress
QUIET = ("profile", "profile-cycle", "monitor", "tick", "ticks")  # a worker's own periodic wake-ups


class ReplayWorker(WorkerPlugin):
    """Started in every worker process (those that join later, or restart, included)."""

    name = PLUGIN

    def __init__(self, timeout=60.0, cache_dir=None, pins=None):
        self.timeout = timeout
        self.cache_dir = cache_dir
        self.pins = pins or {}  # worker name -> CPUs
        self.server = None
        self.lock = None

    def setup(self, worker):
        pinned = self.pins.get(worker.name)
        cpus = pinned or sorted(os.sched_getaffinity(0))
        self.server = ReplayServer(self.timeout, cpus=cpus, cache_dir=self.cache_dir)
        self.lock = threading.Lock()  # one candidate at a time, whatever the worker's threads
        quiet(worker, pinned)


def quiet(worker, cpus=None):
    """Keep a worker process off the timed runs of others: stop what wakes it up on its
    own (the profiler samples its threads every 10 ms, the system monitor every 500 ms;
    the dashboard loses those plots), and pin every thread of it to ``cpus``, its own
    server's share (where it runs while its server waits, never during another's runs)."""
    for name in QUIET:
        callback = worker.periodic_callbacks.get(name)
        if callback is not None:
            callback.stop()
    if cpus:
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), cpus)
            except OSError:  # a thread that ended meanwhile
                pass

    def teardown(self, worker):
        if self.server:
            self.server.close()


def _replay():
    worker = get_worker()
    return worker, worker.plugins[PLUGIN]


def evaluate(capture_dir, variant, kw):
    """(On a worker) one candidate; returns (Evaluation, the worker's address)."""
    worker, plugin = _replay()
    with plugin.lock:
        return plugin.server.submit(capture_dir, variant, **kw), worker.address


def load(capture_dir, sequence):
    """(On a worker) parse a capture ahead of time; R3Error if it is unusable."""
    worker, plugin = _replay()
    with plugin.lock:
        plugin.server.load(capture_dir, sequence=sequence)
    return None, worker.address


def _cores(dask_worker):
    return len(dask_worker.plugins[PLUGIN].server.cpus)


def _absolute(dirs):
    return [os.path.abspath(d) for d in dirs] if dirs else dirs


class RemoteServer:
    """A replay server on one Dask worker: ``ReplayServer``'s ``submit`` and ``load``."""

    cpus = None  # pinned on its worker, not in this process (``defer_to_workers`` leaves this one be)

    def __init__(self, pool, address):
        self.pool = pool
        self.address = address

    def submit(self, capture_dir, variant=None, **kw):
        variant = variant or Variant()
        if kw.get("sequence"):
            kw["sequence"] = _absolute(kw["sequence"])
        try:
            return self.pool.call(self, evaluate, os.path.abspath(capture_dir), variant, kw)
        except KilledWorker as err:
            return Evaluation(
                capture=os.path.basename(capture_dir),
                variant=variant.to_json(),
                status=CRASH,
                diagnostics="every Dask worker that ran it died (%s)" % err,
            )

    def load(self, capture_dir, sequence=None):
        self.pool.call(self, load, os.path.abspath(capture_dir), _absolute(sequence))


class DaskPool:
    """What the search uses of ``ReplayPool`` (``servers``, ``cores_per_worker``), on the
    workers of a Dask ``client``. ``say``: lines about the cluster (workers lost)."""

    def __init__(self, client, timeout=60.0, cache_dir=None, pins=None, say=None, owned=None):
        self.client = client
        self.owned = owned  # a cluster this pool started, closed with it
        self.say = say or (lambda line: None)
        self._lock = threading.Lock()
        client.register_plugin(ReplayWorker(timeout, cache_dir, pins))
        self._servers = []
        self.cores_per_worker = max(1, min(client.run(_cores).values()))
        self._evaluated = 0
        self._started = self._reported = time.monotonic()

    @property
    def servers(self):
        """One server per worker: a server whose worker is gone takes one that has none (one
        that restarted, say), and workers that joined since (batch jobs that started) get one."""
        with self._lock:
            alive = sorted(self.alive())
            for server in self._servers:
                if server.address not in alive:
                    self._bind(server, alive)
            bound = {s.address for s in self._servers}
            joined = [RemoteServer(self, a) for a in alive if a not in bound]
            if joined and self._servers:
                self.say("dask: %d worker(s) joined; %d alive" % (len(joined), len(alive)))
            self._servers += joined
            return list(self._servers)

    @property
    def confirm_servers(self):
        """Where winners are confirmed: one worker, so that a winner's rounds pool times from one node."""
        return self.servers[:1]

    def alive(self):
        """Addresses of the workers the scheduler knows now."""
        return list(self.client.scheduler_info(n_workers=-1)["workers"])

    def call(self, server, fn, *args):
        """Run task ``fn(*args)`` on ``server``'s worker (or, that worker gone, another);
        returns its first value."""
        future = self.client.submit(fn, *args, workers=[server.address], allow_other_workers=True, pure=False)
        value, where = future.result()
        if where != server.address:  # (it ran elsewhere: its worker died)
            self._rebind(server)
        if fn is evaluate:
            with self._lock:
                self._evaluated += 1
                due = time.monotonic() - self._reported >= REPORT_S
                if due:
                    self._reported = time.monotonic()
            if due:
                self.say(self.throughput())
        return value

    def throughput(self):
        """A line of cluster-wide progress: evaluations done by every worker, per minute, and
        the workers alive (printed every ``REPORT_S`` and when the pool closes)."""
        minutes = max(time.monotonic() - self._started, 1e-6) / 60.0
        return "dask: %d evaluation(s) in %.1f min, %.1f per minute, %d worker(s) alive" % (
            self._evaluated,
            minutes,
            self._evaluated / minutes,
            len(self.alive()),
        )

    def _rebind(self, server):
        """Bind ``server`` to another worker if its own is gone."""
        with self._lock:
            alive = self.alive()
            if server.address not in alive:
                lost = server.address
                self._bind(server, alive)
                self.say(
                    "dask: worker %s is gone, its evaluation ran again elsewhere; %d worker(s) alive"
                    % (lost, len(alive))
                )

    def _bind(self, server, alive):
        """Bind ``server`` to the live worker with the fewest servers (the caller holds the lock)."""
        if alive:
            bound = collections.Counter(s.address for s in self._servers)
            server.address = min(alive, key=lambda a: (bound[a], a))

    def describe(self):
        return "dask: %d worker(s) alive, %d core(s) each, scheduler %s, dashboard %s" % (
            len(self.alive()),
            self.cores_per_worker,
            self.client.scheduler.address,
            self.client.dashboard_link,
        )

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        try:
            if self._evaluated:
                self.say(self.throughput())
        except Exception:  # the scheduler is gone: nothing to count the workers of
            pass
        try:
            self.client.unregister_worker_plugin(PLUGIN)  # closes the replay servers
        except Exception:  # the scheduler is gone already: its workers with it
            pass
        self.client.close()
        if self.owned is not None:
            self.owned.close()

"""Candidates evaluated on Dask workers, one persistent replay server in each.

    with DaskPool(client, timeout=60.0, cache_dir=ws.cache_dir) as pool:
        ev = pool.servers[0].submit(capture_dir, variant, pairs=5)

Each Dask worker process hosts one ``ReplayServer`` (``ReplayWorker``, a WorkerPlugin)
pinned to its cores: a share in ``pins`` that no other live worker holds (a LocalCluster
on this machine splits its CPUs as the local pool does), else every CPU the worker process
may use (a batch job's allocation). A candidate goes as one task (capture directory,
variant, options) and comes back as its Evaluation. The baseline and the candidate are
timed in pairs inside that task, so a speedup is always a ratio of two times measured
on one worker, never a time from one node against one from another.

A worker that sees the workspace (it reads the marker this pool wrote there: ``ship``)
reads captures where they lie, on the file system the nodes share (a cluster's home or
scratch; on one machine, trivially). A worker that does not is sent each capture once, the
first time a task of that capture finds it missing there, into a folder on its local disk
where captures are kept by content (``ship.Store``) and reused, checked, by later runs;
``R3_SHIP_CAPTURES=1`` sends them to every worker. Each worker's replay server parses a
capture once and keeps it.

``servers`` holds one ``RemoteServer`` per worker, each bound to one worker (a worker
that joins later, such as a batch job that started, gets one within ``REFRESH_S``); on an
adaptive cluster, as many as its most workers (``size``), those beyond its workers sharing
one until Dask starts more. With kernels searched at once (``lane``), each lane's servers
are bound to workers of its own once there are as many workers as lanes; until then lanes
share workers, taking turns on each (one candidate at a time per worker). A worker that dies
mid-evaluation costs that evaluation only: its task's
restriction to the bound worker is loose, so Dask runs it again on a worker that lives,
and the server binds to such a worker for what follows. A task that killed
``distributed.scheduler.allowed-failures`` workers comes back as a crash of its candidate.
"""

import collections
import fcntl
import glob
import os
import tempfile
import threading
import time
import uuid

from distributed import WorkerPlugin, get_worker
from distributed.scheduler import KilledWorker

from ..data import CRASH, Evaluation, Variant
from ..errors import R3Error
from ..replay.server import ReplayServer
from . import ship

PLUGIN = "r3-replay"
REPORT_S = 60.0  # between two lines of cluster-wide progress
REFRESH_S = 2.0  # between two looks at which workers are alive, while evaluating
SEND_TRIES = 5  # a task that finds its captures missing, sent them, and is run again
QUIET = ("profile", "profile-cycle", "monitor", "tick", "ticks")  # a worker's own periodic wake-ups


class ReplayWorker(WorkerPlugin):
    """Started in every worker process (those that join later, or restart, included)."""

    name = PLUGIN

    def __init__(self, timeout=60.0, cache_dir=None, pins=None, marker=None, env=None):
        self.timeout = timeout
        self.env = dict(env or {})  # the application's OpenMP settings (``server.omp_environment``)
        self.cache_dir = cache_dir
        self.pins = pins or {}  # slot -> CPUs: a worker takes the first slot no live worker holds
        self.slots = os.path.join(tempfile.gettempdir(), "r3-pins-%s-" % uuid.uuid4().hex)
        self.slot = None  # the open lock file of this worker's slot
        self.marker = marker  # a ship.Marker in the workspace; None: captures are sent here
        self.store = None  # a ship.Store where the workspace is not seen
        self.server = None
        self.lock = None

    def setup(self, worker):
        pinned = self.claim()
        cpus = pinned or sorted(os.sched_getaffinity(0))
        cache_dir = self.cache_dir
        if self.marker is None or not self.marker.seen():
            self.store = ship.Store(ship.Store.default_root())
            cache_dir = os.path.join(self.store.root, "stages")  # (the workspace's is not here)
        self.server = ReplayServer(self.timeout, cpus=cpus, cache_dir=cache_dir, env=self.env)
        self.lock = threading.Lock()  # one candidate at a time, whatever the worker's threads
        quiet(worker, pinned)

    def teardown(self, worker):
        if self.server:
            self.server.close()
        if self.slot is not None:
            os.close(self.slot)

    def claim(self):
        """The CPUs of the first slot of ``pins`` that no live worker holds, held (a lock on
        a file of this machine) while this worker process lives: a worker Adaptive starts
        after another retired, or the nanny's restart of a killed one, takes the slot that
        was freed, where worker names keep counting up."""
        for slot, cpus in sorted(self.pins.items()):
            fd = os.open(self.slots + str(slot), os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.slot = fd
            return cpus
        return None

    def place(self, refs):
        """Local paths of the captures ``refs`` ((workspace path, key) pairs), and the keys
        of those not here yet."""
        if self.store is None:
            return [path for path, _ in refs], []
        paths = [self.store.path(key) for _, key in refs]
        return paths, [key for (_, key), path in zip(refs, paths) if path is None]


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


class Missing(tuple):
    """What a task returns instead of its value: the keys of captures its worker lacks."""


def _replay():
    worker = get_worker()
    return worker, worker.plugins[PLUGIN]


def evaluate(ref, variant, kw):
    """(On a worker) one candidate of capture ``ref`` ((path, key)); ``kw["sequence"]``
    holds refs too. Returns (Evaluation or Missing, the worker's address)."""
    worker, plugin = _replay()
    refs = [ref] + list(kw.get("sequence") or ())
    paths, missing = plugin.place(refs)
    if missing:
        return Missing(missing), worker.address
    if kw.get("sequence"):
        kw = dict(kw, sequence=paths[1:])
    with plugin.lock:
        return plugin.server.submit(paths[0], variant, **kw), worker.address


def load(ref, sequence):
    """(On a worker) parse a capture ahead of time; R3Error if it is unusable."""
    worker, plugin = _replay()
    paths, missing = plugin.place([ref] + list(sequence or ()))
    if missing:
        return Missing(missing), worker.address
    with plugin.lock:
        plugin.server.load(paths[0], sequence=paths[1:] or None)
    return None, worker.address


def put(key, name, offset, data, dask_worker):
    """(On a worker, through ``client.run``) a piece of a capture's file sent to it."""
    dask_worker.plugins[PLUGIN].store.put(key, name, offset, data)


def commit(key, manifest, dask_worker):
    dask_worker.plugins[PLUGIN].store.commit(key, manifest)


def received(dask_worker):
    """(On a worker) how many capture files were sent to it, None where it sees the workspace."""
    store = dask_worker.plugins[PLUGIN].store
    return None if store is None else store.received


def server_env(dask_worker):
    """The settings this worker's replay server starts its workers with, beside the
    worker's own environment (the application's OpenMP settings)."""
    return dict(dask_worker.plugins[PLUGIN].server.env)


def _cores(dask_worker):
    return len(dask_worker.plugins[PLUGIN].server.cpus)


class RemoteServer:
    """A replay server on one Dask worker: ``ReplayServer``'s ``submit`` and ``load``."""

    cpus = None  # pinned on its worker, not in this process (``defer_to_workers`` leaves this one be)

    def __init__(self, pool, address):
        self.pool = pool
        self.address = address

    def submit(self, capture_dir, variant=None, **kw):
        variant = variant or Variant()
        if kw.get("sequence"):
            kw["sequence"] = [self.pool.ref(d) for d in kw["sequence"]]
        try:
            return self.pool.call(self, evaluate, self.pool.ref(capture_dir), variant, kw)
        except KilledWorker as err:
            return Evaluation(
                capture=os.path.basename(capture_dir),
                variant=variant.to_json(),
                status=CRASH,
                diagnostics="every Dask worker that ran it died (%s)" % err,
            )

    def load(self, capture_dir, sequence=None):
        self.pool.call(self, load, self.pool.ref(capture_dir), [self.pool.ref(d) for d in sequence or ()])


class DaskPool:
    """What the search uses of ``ReplayPool`` (``servers``, ``cores_per_worker``), on the
    workers of a Dask ``client``. ``say``: lines about the cluster (workers lost)."""

    def __init__(
        self, client, timeout=60.0, cache_dir=None, pins=None, say=None, owned=None, ship_all=False, size=0, env=None
    ):
        self.client = client
        self.size = size  # servers offered however few workers there are (an adaptive cluster's most)
        self._dealt = False
        self.owned = owned  # a cluster this pool started, closed with it
        self.say = say or (lambda line: None)
        self._lock = threading.Lock()
        # Workers that read this (the workspace's cache folder) read captures where they lie.
        self.marker = None if ship_all or not cache_dir else ship.Marker.write(cache_dir)
        self.plugin = ReplayWorker(timeout, cache_dir, pins, self.marker, env)
        try:
            client.register_plugin(self.plugin)
            self.cores_per_worker = max(1, min(client.run(_cores).values()))
        except BaseException:  # (no pool to close: its marker goes now)
            if self.marker is not None:
                self.marker.remove()
            raise
        self._servers = []
        self._workers = []  # addresses of the workers alive, in the order they joined
        self.lanes = 1  # kernels searched at once (``lane``): servers are dealt to workers by lane
        self._refreshed = 0.0
        self._evaluated = 0
        self._started = self._reported = time.monotonic()
        self._refs = {}  # capture directory -> (its path, its key)
        self._manifests = {}  # key -> (directory, manifest)
        self._sending = collections.defaultdict(threading.Lock)  # (worker, key) -> one sender
        self.sent = {}  # (worker, key) -> bytes sent: each capture once to each worker that lacks it

    @property
    def servers(self):
        """One server per worker, and on an adaptive cluster as many as its most workers
        (``size``), bound to the workers alive as ``_deal`` says: while there are fewer
        workers than servers some share one, their tasks wait there, and that waiting work
        is what makes Dask's ``Adaptive`` start workers. A worker that joins (a batch job
        that started, a worker Adaptive added) takes servers from those that share; the
        servers of a worker that is gone move to the live ones."""
        with self._lock:
            self._refresh()
            return list(self._servers)

    def lane(self, index, count):
        """The servers of lane ``index`` of ``count`` (``search.lanes.Lane``: kernels
        searched at once): every ``count``-th, as on any pool, bound so that no two lanes
        share a worker while there are as many workers as lanes."""
        with self._lock:
            self.lanes = count
            self._refresh()
            return self._servers[index::count]

    def _refresh(self):
        """Follow the workers alive: ``_workers`` in the order they joined, a server for
        each, servers dealt (the caller holds the lock)."""
        alive = set(self.alive())
        self._workers = [a for a in self._workers if a in alive]
        joined = sorted(alive - set(self._workers))
        self._workers += joined
        if joined and self._dealt:
            self.say("dask: %d worker(s) joined; %d alive" % (len(joined), len(alive)))
        while len(self._servers) < max(self.size, len(self._workers)):
            self._servers.append(RemoteServer(self, None))
        self._deal()
        self._dealt = True
        self._refreshed = time.monotonic()

    def _deal(self):
        """Bind the servers to the workers by lanes: lane l (servers l, l+L, ...) takes
        workers l, l+L, ... in the order they joined, its servers bound to them in turn; a
        lane with none of its own (fewer workers than lanes) shares worker l mod W with
        another lane. Servers that share a worker take turns on it (its replay server
        evaluates one candidate at a time: ``ReplayWorker.lock``), so a candidate's pairs
        are never timed beside another's, whatever the lanes."""
        workers, count = self._workers, self.lanes
        if not workers:
            return
        for lane in range(count):
            own = workers[lane::count] or [workers[lane % len(workers)]]
            for i, server in enumerate(self._servers[lane::count]):
                server.address = own[i % len(own)]

    @property
    def confirm_servers(self):
        """Where winners are confirmed: one worker, so that a winner's rounds pool times from one node."""
        return self.servers[:1]

    def alive(self):
        """Addresses of the workers the scheduler knows now."""
        return list(self.client.scheduler_info(n_workers=-1)["workers"])

    def ref(self, capture_dir):
        """(path, key) of a capture: its absolute path, and its content's key (``ship``),
        by which a worker that does not see the workspace keeps it."""
        path = os.path.abspath(capture_dir)
        with self._lock:
            ref = self._refs.get(path)
        if ref is None:
            key, manifest = ship.manifest_of(path)
            ref = (path, key)
            with self._lock:
                self._refs[path] = ref
                self._manifests[key] = (path, manifest)
        return ref

    def call(self, server, fn, *args):
        """Run task ``fn(*args)`` on ``server``'s worker (or, that worker gone, another);
        returns its first value. A worker that lacks a capture of the task is sent it, and
        runs the task again."""
        if time.monotonic() - self._refreshed > REFRESH_S:  # (workers that joined mid-study take part)
            with self._lock:
                self._refresh()
        for _ in range(SEND_TRIES):
            future = self.client.submit(fn, *args, workers=[server.address], allow_other_workers=True, pure=False)
            value, where = future.result()
            if where != server.address:  # (it ran elsewhere: its worker died)
                self._rebind(server)
            if not isinstance(value, Missing):
                break
            self._send(where, value)
        else:
            raise R3Error("dask: the captures could not be sent to a worker (%d tries)" % SEND_TRIES)
        if fn is evaluate:
            with self._lock:
                self._evaluated += 1
                due = time.monotonic() - self._reported >= REPORT_S
                if due:
                    self._reported = time.monotonic()
            if due:
                if self.marker is not None:
                    self.marker.touch()  # (runs on other hosts take a marker left untouched for dead)
                self.say(self.throughput())
        return value

    def _send(self, address, keys):
        """Send the worker at ``address`` the captures ``keys`` it lacks, one sender at a
        time per worker and capture (a worker gone meanwhile: the task goes elsewhere)."""
        for key in keys:
            with self._sending[(address, key)]:
                if (address, key) in self.sent:
                    continue
                directory, manifest = self._manifests[key]
                try:
                    size = ship.send(self.client, address, directory, key, manifest, put, commit)
                except Exception as err:  # (its worker died while receiving)
                    if address in self.alive():
                        raise R3Error("dask: sending capture %s to %s failed: %s" % (directory, address, err))
                    return
                with self._lock:
                    first = not any(a == address for a, _ in self.sent)
                    self.sent[(address, key)] = size
                if first:
                    self.say("dask: worker %s does not see the workspace: captures are sent to it once" % address)

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
        """Deal the servers again if ``server``'s worker is gone."""
        with self._lock:
            lost = server.address
            if lost not in self.alive():
                self._refresh()
                self.say(
                    "dask: worker %s is gone, its evaluation ran again elsewhere; %d worker(s) alive"
                    % (lost, len(self._workers))
                )

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
        if self.marker is not None:
            self.marker.remove()
        for path in glob.glob(self.plugin.slots + "*"):
            os.unlink(path)

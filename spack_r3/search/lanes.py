"""Several kernels searched at once, each on its own share of the replay workers.

A kernel's search keeps its workers busy only while it has trials to ask: its sampler
wants the results of the last ones before the next, its outer loop waits for the model.
With more workers than one study uses well (a cluster), the kernels of an application
are searched side by side: the workers are dealt into ``lanes`` (lane i takes every
n-th server), and each lane searches one kernel after another from a shared queue. A
lane's servers are never shared with another lane, so a candidate and its baseline
still pair on one worker, and each study sees only its own evaluations (a cluster with
fewer workers than lanes binds two lanes' servers to one worker, where they take turns:
``scale.pool.DaskPool.lane``). There are never
more lanes than servers (asked for more, ``lane_count`` says how many there are), and a
lane left without a server of its own (a pool that has fewer than when the lanes were
dealt) takes no more kernels: it never borrows another lane's.

    for outcome in search_in_lanes(pool, targets, lanes=4, search=lambda lane, t: ...):
        ...
"""

import queue
import sys
import threading

SERVERS_PER_LANE = 2  # a study's sampler learns from its results: more than a few at once mostly waits


class Lane:
    """A share of a pool (``replay.server.Pool``) that offers what the search uses of one:
    ``servers``, ``cores_per_worker``. Read again at each use, so a
    cluster's workers that join later take part from the next kernel on."""

    def __init__(self, pool, index, count):
        self.pool, self.index, self.count = pool, index, count

    @property
    def servers(self):
        return self.pool.lane(self.index, self.count)  # (a cluster's pool deals its workers to lanes)

    @property
    def cores_per_worker(self):
        return self.pool.cores_per_worker


def lane_count(asked, servers, kernels, cluster, say=None):
    """How many kernels are searched at once: ``asked`` (None: one on the local pool, as
    it always was; on a cluster as many as give each at least ``SERVERS_PER_LANE``
    workers), never more than there are kernels or servers: each lane has a worker of its
    own. Fewer than asked for want of workers is said in one line (``say``, else stderr)."""
    if asked is None:
        asked = max(1, servers // SERVERS_PER_LANE) if cluster else 1
    lanes = max(1, min(asked, servers, kernels))
    if min(asked, kernels) > lanes:
        (say or _stderr)(
            "--kernels-at-once %d: %d kernel(s) at once, as there are %d worker(s) and each kernel searched "
            "at once needs one of its own" % (asked, lanes, servers)
        )
    return lanes


def _stderr(line):
    sys.stderr.write("r3: %s\n" % line)
    sys.stderr.flush()


def search_in_lanes(pool, targets, lanes, search):
    """``search(lane_pool, target)`` for every target, ``lanes`` at a time; the results in
    the targets' order. One lane runs in the calling thread, as a plain loop. The first
    exception stops every lane from taking another kernel and is raised once the kernels
    being searched have finished."""
    if lanes <= 1:
        return [search(pool, t) for t in targets]
    todo = queue.Queue()
    for i, target in enumerate(targets):
        todo.put((i, target))
    results = [None] * len(targets)
    errors = []

    def drive(lane):
        while not errors and (lane.index == 0 or lane.servers):  # (lane 0 has the first server, if any)
            try:
                i, target = todo.get_nowait()
            except queue.Empty:
                return
            try:
                results[i] = search(lane, target)
            except BaseException as err:  # (raised in the caller's thread below)
                errors.append(err)
                return

    threads = [threading.Thread(target=drive, args=(Lane(pool, i, lanes),), daemon=True) for i in range(lanes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results

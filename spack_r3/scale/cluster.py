"""Which Dask cluster ``r3 tune --cluster SPEC`` runs on.

local:N            a LocalCluster of N worker processes on this machine, one thread each,
                   each worker's replay server pinned to its share of this process's CPUs
tcp://HOST:PORT    the workers of a Dask scheduler that runs already (``dask scheduler``;
                   start ``dask worker tcp://HOST:PORT --nthreads 1`` on each node with
                   spack-r3 installed and the workspace's file system mounted)
PATH.json | config a batch system's cluster (dask-jobqueue) described in a JSON file;
                   ``config`` is the workspace's own ``cluster.json``:

    {"kind": "slurm", "queue": "regular", "account": "m1234", "walltime": "02:00:00",
     "cores": 32, "memory": "64GB", "jobs": 4, "adapt": {"minimum": 1, "maximum": 16}}

``kind``: slurm, pbs or lsf; every batch job is one Dask worker (one replay server
pinned to the job's cores); ``jobs`` are started at once, ``adapt`` lets the count
follow the work between its limits; other keys go to the jobqueue class as they are
(``job_extra_directives``, ``interface``, ``local_directory``...). ``kind`` local is a
LocalCluster of ``jobs`` workers on this machine, or an adaptive one (``adapt``: Dask's
``Adaptive`` options, ``minimum``, ``maximum``, ``interval``, ``target_duration``...).

Every kind takes ``"ship_captures": true``: captures are sent to every worker, as to one
that does not see the workspace (``R3_SHIP_CAPTURES=1`` does the same for any --cluster).
"""

import json
import logging
import os
import socket
import urllib.parse

from ..errors import R3Error
from . import ship

KINDS = ("slurm", "pbs", "lsf", "local")
START_TIMEOUT_S = 60  # a scheduler that does not answer in this long is not there
CONNECT_TIMEOUT_S = 5  # nor one that nothing listens for: its port refuses, or is silent this long


def _dask():
    try:
        import distributed
    except ImportError:
        raise R3Error("--cluster needs Dask's distributed: pip install 'spack-r3[scale]'")
    return distributed


def local_pins(n):
    """Slot -> CPUs for ``n`` workers on this machine: each its own share (as the local
    pool's; a worker takes a slot no live worker holds), none when there are fewer CPUs
    than workers."""
    cpus = sorted(os.sched_getaffinity(0))
    share = len(cpus) // n
    return {i: cpus[i * share : (i + 1) * share] for i in range(n)} if share else {}


def read_config(spec, workspace):
    """The cluster description ``spec`` names (a JSON file, or ``config``: the workspace's)."""
    path = workspace.cluster_config_file if spec == "config" else spec
    try:
        with open(path) as f:
            config = json.load(f)
    except (OSError, ValueError) as err:
        raise R3Error("--cluster %s: cannot read %s: %s" % (spec, path, err))
    if not isinstance(config, dict) or config.get("kind") not in KINDS:
        raise R3Error('--cluster %s: %s needs "kind": one of %s' % (spec, path, ", ".join(KINDS)))
    return config


def jobqueue_cluster(config):
    """The dask-jobqueue cluster ``config`` describes, not started (``job_script()`` shows
    what it would submit); returns (cluster, jobs, adapt limits or None)."""
    try:
        import dask_jobqueue
    except ImportError:
        raise R3Error("a batch cluster needs dask-jobqueue: pip install 'spack-r3[scale]'")
    config = dict(config)
    config.pop("ship_captures", None)  # (the pool's, not the batch system's)
    kind = config.pop("kind")
    jobs = int(config.pop("jobs", 1))
    adapt = config.pop("adapt", None)
    cls = {"slurm": dask_jobqueue.SLURMCluster, "pbs": dask_jobqueue.PBSCluster, "lsf": dask_jobqueue.LSFCluster}[kind]
    if kind == "lsf" and "account" in config:  # LSF calls it a project
        config["project"] = config.pop("account")
    config.setdefault("processes", 1)  # one worker, one replay server, per job: its cores
    config.setdefault("job_name", "r3-tune")
    _book(kind, config)
    try:
        cluster = cls(**config)
    except (TypeError, ValueError) as err:
        raise R3Error("--cluster: %s: %s" % (kind, err))
    return cluster, jobs, adapt


def _book(kind, config):
    """Each job books ``cores`` from the batch system, and its worker runs one Dask thread
    per process (as local:N's do): a worker evaluates one candidate at a time on all of
    them, and Dask's ``Adaptive`` counts threads, so with a thread per core it would ask
    for a job only once a job's worth of tasks waited per worker."""
    from dask.utils import parse_bytes

    cores = int(config.get("cores", 1))
    if kind == "slurm":
        config.setdefault("job_cpu", cores)
    elif kind == "lsf":
        config.setdefault("ncpus", cores)
    elif "resource_spec" not in config:  # pbs: what dask-jobqueue writes from cores and memory
        from dask_jobqueue.pbs import pbs_format_bytes_ceil

        config["resource_spec"] = "select=1:ncpus=%d" % cores
        if config.get("memory"):
            config["resource_spec"] += ":mem=" + pbs_format_bytes_ceil(parse_bytes(config["memory"]))
    config["cores"] = int(config["processes"])


def local_workers(spec):
    """N of ``local:N``; R3Error unless a number of workers, at least 1."""
    try:
        n = int(spec[len("local:") :])
    except ValueError:
        n = 0
    if n < 1:
        raise R3Error("--cluster %s: local:N takes a number of workers, at least 1" % spec)
    return n


def check(spec, workspace):
    """R3Error, before anything is recorded or started, where ``spec`` names no cluster."""
    _dask()
    if spec.startswith("local:"):
        local_workers(spec)
    elif spec == "config" or spec.endswith(".json"):
        read_config(spec, workspace)
    elif spec.startswith("tcp://"):
        reach_scheduler(spec)
    else:
        raise R3Error("--cluster %s: give local:N, tcp://HOST:PORT, a cluster's JSON file or 'config'" % spec)


def reach_scheduler(spec, timeout=CONNECT_TIMEOUT_S):
    """R3Error at once where nothing listens at ``tcp://HOST:PORT`` (refused, no such host,
    or no answer within ``timeout`` seconds); Dask's own client would ask again for
    START_TIMEOUT_S before it gave up."""
    try:
        where = urllib.parse.urlsplit(spec)
        host, port = where.hostname, where.port
    except ValueError as err:
        raise R3Error("--cluster %s: %s" % (spec, err))
    if not host or port is None:
        raise R3Error("--cluster %s: give the scheduler as tcp://HOST:PORT" % spec)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except socket.timeout:
        raise R3Error("--cluster %s: no Dask scheduler answers there (no answer in %gs)" % (spec, timeout))
    except OSError as err:
        raise R3Error("--cluster %s: no Dask scheduler answers there (%s)" % (spec, err.strerror or err))


def local_cluster(n):
    """A LocalCluster of ``n`` single-threaded worker processes on loopback."""
    return _dask().LocalCluster(
        n_workers=n,
        threads_per_worker=1,
        processes=True,
        memory_limit=0,
        dashboard_address="127.0.0.1:0",
        host="127.0.0.1",
        silence_logs=logging.ERROR,
    )


def connect(spec, workspace):
    """Open the cluster ``spec`` names; returns (Client, the cluster started here or None,
    pins by worker name or None)."""
    distributed = _dask()
    check(spec, workspace)
    # Dask's own lines in this process (a worker's connection closed as Adaptive retires
    # it...) only repeat what the pool says in its own; its errors still show.
    logging.getLogger("distributed").setLevel(logging.ERROR)
    if spec.startswith("local:"):
        n = local_workers(spec)
        cluster = local_cluster(n)
        return distributed.Client(cluster), cluster, local_pins(n)
    if spec.startswith("tcp://"):
        try:  # (a scheduler that refuses is asked again until the timeout)
            client = distributed.Client(spec, timeout=START_TIMEOUT_S)
        except (OSError, TimeoutError) as err:
            raise R3Error("--cluster %s: no Dask scheduler answers there (%s)" % (spec, err))
        try:
            client.wait_for_workers(1, timeout=START_TIMEOUT_S)
        except TimeoutError:
            client.close()
            raise R3Error(
                "--cluster %s: no worker joined its scheduler within %ds (start them with: dask worker "
                "%s --nthreads 1)" % (spec, START_TIMEOUT_S, spec)
            )
        return client, None, None
    if spec == "config" or spec.endswith(".json"):
        config = read_config(spec, workspace)
        if config["kind"] == "local":
            return _adaptive_local(config)
        cluster, jobs, adapt = jobqueue_cluster(config)
        if adapt:
            cluster.adapt(**adapt)
        else:
            cluster.scale(jobs=jobs)
        client = distributed.Client(cluster)
        client.wait_for_workers(1)  # the first batch job to start
        return client, cluster, None


def _adaptive_local(config):
    """The ``kind: local`` cluster of a configuration: ``jobs`` workers, or as many as
    ``adapt`` lets the work ask for; pinned as local:N's, to the most workers it may have."""
    distributed = _dask()
    adapt = config.get("adapt")
    jobs = int(config.get("jobs", 1))
    if adapt is not None and not isinstance(adapt, dict):
        raise R3Error('--cluster: "adapt" takes Dask\'s Adaptive options, such as {"minimum": 1, "maximum": 4}')
    most = most_workers(config) or jobs
    cluster = local_cluster(0 if adapt else jobs)
    if adapt:
        try:  # (at least one worker: the pool asks the workers their cores as it starts)
            cluster.adapt(**dict(adapt, minimum=max(1, int(adapt.get("minimum", 1)))))
        except TypeError as err:
            cluster.close()
            raise R3Error("--cluster: adapt: %s" % err)
    client = distributed.Client(cluster)
    client.wait_for_workers(1)
    return client, cluster, local_pins(most)


def most_workers(config):
    """The most workers an adaptive cluster's ``adapt`` lets it have (one a batch job), else 0."""
    adapt = config.get("adapt") or {}
    try:
        return int(adapt.get("maximum", adapt.get("maximum_jobs", 0)))
    except (TypeError, ValueError, AttributeError):
        raise R3Error('--cluster: "adapt" takes a dict whose "maximum" is a number of workers')


def open_pool(spec, workspace, timeout, say=None, env=None):
    """The DaskPool over the cluster ``spec`` names; ``env``: the settings its replay
    servers start their workers with (the application's OpenMP settings)."""
    from .pool import DaskPool

    ship_all, size = ship.forced(), 0
    if spec == "config" or spec.endswith(".json"):
        config = read_config(spec, workspace)
        ship_all = ship_all or bool(config.get("ship_captures"))
        size = most_workers(config)
    client, cluster, pins = connect(spec, workspace)
    try:
        return DaskPool(
            client,
            timeout=timeout,
            cache_dir=workspace.cache_dir,
            pins=pins,
            say=say,
            owned=cluster,
            ship_all=ship_all,
            size=size,
            env=env,
        )
    except Exception:
        client.close()
        if cluster is not None:
            cluster.close()
        raise

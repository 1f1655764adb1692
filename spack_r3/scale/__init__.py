"""Scale-out: ``r3 tune --cluster`` evaluates candidates on a Dask cluster.

``cluster.connect(spec)`` opens the cluster (``local:N``, ``tcp://HOST:PORT``, or a batch
system's cluster described in a JSON file, see ``cluster``); ``pool.DaskPool`` offers what
the search uses of the local ``replay.server.ReplayPool`` (``servers``, each with
``submit`` and ``load``; ``cores_per_worker``), so the search never asks which it has.
Dask is imported only here, and only with ``--cluster``.
"""

"""``hip``: a HIP kernel, as a CUDA one (``backends/cuda.py``) but through AMD's runtime:
recorded by ``record/runtime/r3hip.c``, replayed through HIP's module API
(``device/hip.py``) where an AMD GPU and hip-python are (the same worker: its child
replays on a HipDevice), built into a fat binary (``emit/hip.py``)."""

from .cuda import Cuda


class Hip(Cuda):
    runs_on = "an AMD GPU, through HIP's module API (device/hip.py)"


BACKEND = Hip("hip")

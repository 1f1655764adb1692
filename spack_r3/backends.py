"""Backends: what records, replays and tunes a kernel of one kind of device.

A capture names its backend (``capture.launch["backend"]``; none: ``host``), and so does a
unit's compile line for the record launcher. The stages ask this module, never the name:

- ``host``: a CPU function, recorded by the instrumented unit and r3rt.c, replayed by the
  host engine (llvmlite JIT in a forked, confined child).
- ``offload``: an OpenMP ``target`` region's device function, recorded by
  ``record/offload.py`` (device IR at the unit's device compile) and
  ``record/runtime/r3offload.c`` (the launch, through libomptarget and OpenMP's device memory
  interface). On libomptarget's host plugin the device function is x86 code calling libomp,
  so replay runs it with the host engine: the region's device memory mapped at its device
  addresses, the device function JIT-compiled and called as libomptarget's host plugin calls
  it. Its launch geometry (teams, threads per team) is a launch setting written into the
  device function (``compile.module.apply_geometry``), as the region's own ``num_teams`` / ``thread_limit``
  clauses are.

- ``cuda`` / ``hip``: a ``__global__`` kernel of a unit compiled by clang, recorded by
  ``record/cuda.py`` (device IR per GPU arch at the unit's compile) and
  ``record/runtime/r3cuda.c`` / ``r3hip.c`` (the launch and the device allocations, through
  the CUDA or HIP runtime it interposes: one recorder, ``runtime/gpurec.h``). Its code is the GPU's:
  the host engine never runs it (``replay.engine.host_engine_runs`` refuses it); a replay server runs
  its backend's ``worker`` for it, ``device/cudaworker.py``, which replays it through the
  driver API (``device/cudareplay.py``) where a CUDA device exists (a HIP kernel through
  HIP's module API, ``device/hip.py``, where an AMD GPU and hip-python are), and ``r3 retarget`` /
  ``tune`` screen it statically anywhere. Its launch geometry: ``num_teams`` is the
  grid's x, ``thread_limit`` the block's x (CUDA's blocks are OpenMP's teams).
"""

import json
import os
from dataclasses import dataclass
from typing import Tuple

from .errors import R3Error


@dataclass(frozen=True)
class Backend:
    name: str
    runs_on: str  # what runs a replayed kernel, as reports say it
    geometry: Tuple[str, ...] = ()  # data.Launch fields it adds to the search space
    worker: str = "spack_r3.replay.worker"  # the module a replay server runs for its captures


HOST = Backend("host", "this CPU (llvmlite JIT)")
OFFLOAD = Backend(
    "offload",
    "this CPU: the device function as libomptarget's host plugin runs it (llvmlite JIT)",
    ("num_teams", "thread_limit"),
)
CUDA = Backend(
    "cuda",
    "a CUDA GPU, through the driver API (device/cudareplay.py)",
    ("num_teams", "thread_limit"),
    "spack_r3.device.cudaworker",
)
HIP = Backend(
    "hip",
    "an AMD GPU, through HIP's module API (device/hip.py)",
    ("num_teams", "thread_limit"),
    "spack_r3.device.cudaworker",  # the same worker: its child replays on a HipDevice
)
BACKENDS = {b.name: b for b in (HOST, OFFLOAD, CUDA, HIP)}
HOST_ENGINE = (HOST, OFFLOAD)  # what the host engine (replay/engine.py) runs


def of_capture(capture):
    """The backend of a capture (a data.Capture)."""
    name = (capture.launch or {}).get("backend", "host")
    if name not in BACKENDS:
        raise R3Error(
            "capture %s names backend '%s', which this r3 does not have (%s)"
            % (capture.id, name, ", ".join(sorted(BACKENDS)))
        )
    return BACKENDS[name]


def worker_of(capture_dir):
    """The worker module a replay server runs for the capture in ``capture_dir`` (its
    backend's); the host one where capture.json cannot say (it reports what is wrong)."""
    try:
        with open(os.path.join(capture_dir, "capture.json")) as f:
            name = (json.load(f).get("launch") or {}).get("backend", "host")
    except (OSError, ValueError, AttributeError):
        return HOST.worker
    return BACKENDS[name].worker if name in BACKENDS else HOST.worker


# What a compile line's GPU sources are: ``-x cuda`` / ``-x hip`` or the extension.
GPU_EXTS = {".cu": CUDA.name, ".hip": HIP.name}


def unit_kind(args):
    """cuda, hip or None: what a compile line's sources are, by ``-x`` or their extension."""
    for i, a in enumerate(args):
        if a == "-x" and i + 1 < len(args) and args[i + 1] in (CUDA.name, HIP.name):
            return args[i + 1]
        if a in ("-xcuda", "-xhip"):
            return a[2:]
    for a in args:
        if not a.startswith("-") and os.path.splitext(a)[1] in GPU_EXTS:
            return GPU_EXTS[os.path.splitext(a)[1]]
    return None


def of_compile(args):
    """The backend a unit compiled with ``args`` records its kernels with."""
    kind = unit_kind(args)
    if kind:
        return BACKENDS[kind]
    return OFFLOAD if any(a.startswith("-fopenmp-targets=") for a in args) else HOST

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
  device function (``apply_geometry``), as the region's own ``num_teams`` / ``thread_limit``
  clauses are.

- ``cuda`` / ``hip``: a ``__global__`` kernel of a unit compiled by clang, recorded by
  ``record/cuda.py`` (device IR per GPU arch at the unit's compile) and
  ``record/runtime/r3cuda.c`` / ``r3hip.c`` (the launch and the device allocations, through
  the CUDA or HIP runtime it interposes: one recorder, ``runtime/gpurec.h``). Its code is the GPU's:
  the host engine never runs it (``host_engine_runs`` refuses it); a replay server runs
  its backend's ``worker`` for it, ``device/cudaworker.py``, which replays it through the
  driver API (``device/cudareplay.py``) where a CUDA device exists (a HIP kernel through
  HIP's module API, ``device/hip.py``, where an AMD GPU and hip-python are), and ``r3 retarget`` /
  ``tune`` screen it statically anywhere. Its launch geometry: ``num_teams`` is the
  grid's x, ``thread_limit`` the block's x (CUDA's blocks are OpenMP's teams).
"""

import json
import os
import re
from dataclasses import dataclass
from typing import Tuple

from .errors import R3Error
from .iredit import ensure_declared, function_span, push_before_forks


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


def of_compile(args):
    """The backend a unit compiled with ``args`` records its kernels with."""
    from .record.cuda import unit_kind

    kind = unit_kind(args)
    if kind:
        return BACKENDS[kind]
    return OFFLOAD if any(a.startswith("-fopenmp-targets=") for a in args) else HOST


def host_engine_runs(capture):
    """The capture's backend, where the host engine runs its kernels; else R3Error with one
    line: a CUDA kernel's replay needs a CUDA device (``no CUDA device: ...`` where none is)."""
    backend = of_capture(capture)
    if backend in HOST_ENGINE:
        return backend
    from .device.cudareplay import driver_of

    driver_of(capture)  # no device: one line, "no CUDA device: <why>" ("no HIP device: <why>")
    raise R3Error(
        "capture %s: %s is a %s kernel: the host engine does not run it; "
        "the replay servers send it to device/cudaworker.py" % (capture.id, capture.kernel, backend.name.upper())
    )


# A fork of the teams of a `target teams` region in its device function, and a push of the
# geometry that precedes one (the region's num_teams / thread_limit clauses).
_FORK_TEAMS = re.compile(r"^(\s*)call void (?:\([^)]*\) )?@__kmpc_fork_teams\((ptr [^,]+), ", re.M)
_PUSH = re.compile(r"(call void @__kmpc_push_num_teams\(ptr [^,]+, i32 [^,]+), i32 [^,)]+, i32 [^,)]+\)")


def apply_geometry(text, kernel, launch):
    """``text`` (a module's IR) with ``launch.num_teams`` / ``launch.thread_limit`` (None or
    0: the runtime's choice) set for the teams the device function ``kernel`` forks: its
    clauses' push replaced, or a push added before each fork. A kernel that forks no teams
    has no geometry to set: ValueError."""
    teams, limit = getattr(launch, "num_teams", None), getattr(launch, "thread_limit", None)
    if not teams and not limit:
        return text
    span = function_span(text, kernel)
    if span is None:
        raise ValueError("the device function %s is not in its module" % kernel)
    start, end = span
    body = text[start:end]
    if not _FORK_TEAMS.search(body):
        raise ValueError("%s forks no teams: num_teams and thread_limit do not apply" % kernel)
    values = "i32 %d, i32 %d" % (teams or 0, limit or 0)
    if _PUSH.search(body):
        body = _PUSH.sub(lambda m: "%s, %s)" % (m.group(1), values), body)
    else:
        body = push_before_forks(body, _FORK_TEAMS, "__kmpc_push_num_teams", values)[0]
    text = text[:start] + body + text[end:]
    return ensure_declared(
        text, ["declare i32 @__kmpc_global_thread_num(ptr)", "declare void @__kmpc_push_num_teams(ptr, i32, i32, i32)"]
    )

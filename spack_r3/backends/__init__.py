"""Backends: what records, replays, lowers and builds a kernel of one kind of device
(``base.Backend``), one module each. A capture names its backend
(``capture.launch["backend"]``; none: ``host``), and so does a unit's compile line (the
backend that claims it). Adding a backend: its module, and one line below."""

import json
import os

from ..errors import R3Error
from . import cuda, hip, host, offload
from .base import Backend

REGISTRY = (host.BACKEND, offload.BACKEND, cuda.BACKEND, hip.BACKEND)

HOST, OFFLOAD, CUDA, HIP = host.BACKEND, offload.BACKEND, cuda.BACKEND, hip.BACKEND

__all__ = ["Backend", "REGISTRY", "named", "of_capture", "of_compile", "worker_of"]


def named(name):
    """The registered backend called ``name``, or None."""
    return next((b for b in REGISTRY if b.name == name), None)


def of_capture(capture):
    """The backend of a capture (a data.Capture)."""
    name = (capture.launch or {}).get("backend", HOST.name)
    backend = named(name)
    if backend is None:
        raise R3Error(
            "capture %s names backend '%s', which this r3 does not have (%s)"
            % (capture.id, name, ", ".join(sorted(b.name for b in REGISTRY)))
        )
    return backend


def of_compile(args):
    """The backend a unit compiled with ``args`` records its kernels with: the one that
    claims the line, else the host."""
    return next((b for b in REGISTRY if b is not HOST and b.claims(args)), HOST)


def worker_of(capture_dir):
    """The worker module a replay server runs for the capture in ``capture_dir`` (its
    backend's); the host one where capture.json cannot say (it reports what is wrong)."""
    try:
        with open(os.path.join(capture_dir, "capture.json")) as f:
            name = (json.load(f).get("launch") or {}).get("backend", HOST.name)
    except (OSError, ValueError, AttributeError):
        return HOST.worker
    return (named(name) or HOST).worker

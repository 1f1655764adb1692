"""Memory after a replayed call against the recording: the verdict every backend's replay
gives (the host engine's, a GPU's device memory read back)."""

import re
from dataclasses import dataclass

import numpy as np


@dataclass
class Check:
    verified: bool
    max_rel_error: float
    mismatched_bytes: int
    detail: str = ""


def _rel_error(got, want, dtype):
    a = np.frombuffer(got, dtype=dtype)
    b = np.frombuffer(want, dtype=dtype)
    both_nan = np.isnan(a) & np.isnan(b)
    diff = np.abs(a - b)
    scale = np.maximum(np.abs(b), np.finfo(dtype).tiny)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(both_nan | (a == b), 0.0, diff / scale)
    err = np.nan_to_num(err, nan=np.inf)
    return float(err.max()) if err.size else 0.0


def fp_types(ir):
    """Floating-point element types the kernel stores: how to read memory that differs."""
    types = []
    for name, dtype in (("double", np.float64), ("float", np.float32)):
        if re.search(r"store (?:<\d+ x )?%s>? " % name, ir):
            types.append(dtype)
    return types or [np.float64, np.float32]


def compare(got, want, dtypes=(np.float64,)):
    """(max relative error, mismatched bytes). Differing memory is read as each of
    ``dtypes`` and the worst reading counts, so no layout guess can hide an error."""
    if got == want:
        return 0.0, 0
    g, w = np.frombuffer(got, np.uint8), np.frombuffer(want, np.uint8)
    mismatched = int(np.count_nonzero(g != w))
    errors = [_rel_error(got, want, d) for d in dtypes if len(got) % np.dtype(d).itemsize == 0]
    return (max(errors) if errors else float("inf")), mismatched

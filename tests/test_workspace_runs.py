"""Several recorded runs in one workspace: each capture says which run it is from, and
shares are never added across runs."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT
from spack_r3.capture import latest_run, list_captures, run_name
from spack_r3.record.session import record
from spack_r3.workspace import Workspace

HEAT = os.path.join(REPO_ROOT, "repos", "r3", "sources", "heat")


def test_tune_takes_one_run_and_says_which(tmp_path, clang):
    ws = Workspace(str(tmp_path / "ws"))
    first = record(ws, HEAT, "./heat 32 4", kernels=["jacobi_step"])
    second = record(ws, HEAT, "./heat 48 4", kernels=["jacobi_step"])
    captures = list_captures(ws)
    assert len({run_name(c) for c in captures}) == 2  # r3 kernels shows them apart
    latest, others = latest_run(captures, ["jacobi_step"])
    assert others == 1 and {c.id for c in latest} == {c.id for c in second.captures}
    assert not {c.id for c in latest} & {c.id for c in first.captures}

    proc = subprocess.run([sys.executable, "-m", "spack_r3.cli", "--workspace", ws.root, "tune", "--kernel",
                           "jacobi_step", "--budget", "1", "--mutator", "none", "--confirm-rounds", "1", "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    [kernel] = json.loads(proc.stdout)["kernels"]
    assert kernel["captures"] == [c.id for c in second.captures]
    # one run's share, not two added (jacobi_step calls no other kernel: its weight is its own share)
    assert kernel["share"] == pytest.approx(second.captures[0].app["share"])

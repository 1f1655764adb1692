"""Several recorded runs in one workspace: each capture says which run it is from, and
shares are never added across runs."""

import json
import os
import re
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

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "spack_r3.cli",
            "--workspace",
            ws.root,
            "tune",
            "--kernel",
            "jacobi_step",
            "--budget",
            "1",
            "--mutator",
            "none",
            "--confirm-rounds",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    [kernel] = json.loads(proc.stdout)["kernels"]
    assert kernel["captures"] == [c.id for c in second.captures]
    # one run's share, not two added (jacobi_step calls no other kernel: its weight is its own share)
    assert kernel["share"] == pytest.approx(second.captures[0].app["share"])


def test_the_workspace_is_the_one_map_of_its_paths(tmp_path):
    """Each thing r3 keeps in a workspace has its path from ``Workspace``, all distinct and
    under its root; no module of the package joins a workspace's root with a name itself."""
    ws = Workspace(str(tmp_path / "ws"))
    paths = [
        ws.captures_dir,
        ws.capture_dir("c1"),
        ws.runs_dir,
        ws.cache_dir,
        ws.results_dir,
        ws.result_file("c1"),
        ws.reports_dir,
        ws.journal_file,
        ws.legacy_journal_file,
        ws.locks_dir,
        ws.remix_dir,
        ws.patterns_file,
        ws.cluster_config_file,
        ws.logs_dir,
        ws.spack_dir,
        ws.repo_dir("r3tuned"),
        ws.recipes_dir,
        ws.recipe_repo_dir,
    ]
    assert len(set(paths)) == len(paths)
    assert all(p.startswith(ws.root + os.sep) for p in paths)
    assert ws.repo_dir("r3tuned") == os.path.join(ws.root, "repos", "r3tuned")  # where emit's README sends users

    package = os.path.join(REPO_ROOT, "spack_r3")
    joins = re.compile(r"os\.path\.join\(\s*[\w.]*(workspace|ws)[\w.]*root\b")
    offenders = []
    for folder, _dirs, files in os.walk(package):
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith(".py") and path != os.path.join(package, "workspace.py"):
                with open(path) as f:
                    offenders += [
                        "%s:%d" % (os.path.relpath(path, package), i + 1)
                        for i, line in enumerate(f)
                        if joins.search(line)
                    ]
    assert offenders == []

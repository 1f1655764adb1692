"""The README's first commands run as shown: each ``r3`` line of its "Using it" block, in
order, typed from the repository's root into a fresh workspace, as a user who has just
cloned it types them (tests/test_docs.py checks that every documented command parses).
The block's last line, ``r3 tune``, searches for minutes: ``scripts/demo.sh`` runs a tune
of the same demo, and tests/search/test_tune.py tunes with small budgets."""

import os
import re
import shlex

from conftest import REPO_ROOT
from r3cli import r3_subprocess


def using_it():
    """The r3 command lines of the README's "Using it" block, each as its arguments."""
    with open(os.path.join(REPO_ROOT, "README.md")) as f:
        section = f.read().split("\n## Using it\n", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [shlex.split(line, comments=True)[1:] for line in block.splitlines() if line.startswith("r3 ")]


def test_the_readmes_first_commands_run_as_shown(clang, tmp_path):
    commands = using_it()
    assert [argv[0] for argv in commands] == ["record", "kernels", "replay", "replay", "tune"]
    outputs = []
    for argv in commands[:-1]:
        run = r3_subprocess("--workspace", tmp_path / "ws", *argv, cwd=REPO_ROOT, timeout=600)
        outputs.append(run)
    recorded, kernels, replayed, table = outputs
    for run in (recorded, kernels, replayed):
        assert run.returncode == 0, run.stdout + run.stderr
    assert "PASSED" in recorded.stdout and "jacobi_step" in kernels.stdout.splitlines()[2]  # the hottest first
    assert "verified  yes" in replayed.stdout
    # A row per pipeline. The exact ones verify on any machine; O3,fast (marked: it relaxes
    # floating-point semantics) may round otherwise on another CPU, and then the command
    # says so in its row and exits 1.
    lines = table.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("pipeline "))
    status = lines[header].index("status")
    rows = {line.split()[0]: line[status:].split()[0] for line in lines[header + 2 :] if line[:1] not in ("", "*")}
    assert set(rows) == {"O3", "O2,vectorize=0", "O3,fast"} and rows["O3"] == rows["O2,vectorize=0"] == "ok", table
    assert table.returncode == (0 if rows["O3,fast"] == "ok" else 1), table.stdout + table.stderr

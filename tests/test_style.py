"""The code's style is checked, not argued: `ruff format` writes it and `ruff check`
keeps the lint rules set in pyproject.toml (pyflakes, pycodestyle, bugbear's likely bugs)."""

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATHS = ["spack_r3", "tests", "scripts"]


def ruff():
    exe = shutil.which("ruff", path=os.path.dirname(sys.executable)) or shutil.which("ruff")
    if exe is None:
        if os.environ.get("R3_REQUIRE_SPACK"):  # CI installs it (setup.cfg's test extra): never skipped there
            raise AssertionError("ruff is not installed (pip install -e '.[test]')")
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    return exe


def test_the_code_is_formatted():
    proc = subprocess.run([ruff(), "format", "--check"] + PATHS, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, "run `ruff format %s`:\n%s" % (" ".join(PATHS), proc.stdout + proc.stderr)


def test_the_code_passes_the_lint_rules():
    proc = subprocess.run([ruff(), "check"] + PATHS, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr

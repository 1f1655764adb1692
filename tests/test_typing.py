"""The type hints of the objects every stage passes around (the data objects, a kernel's
tune result and the plan r3-apply reads) are checked by mypy, with the settings of
setup.cfg's [mypy] sections: every function there annotated, and the annotations
consistent with the code."""

import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

TYPED_MODULES = ("spack_r3/data.py", "spack_r3/settings.py", "spack_r3/search/results.py", "spack_r3/emit/plan.py")


@pytest.fixture(scope="module")
def mypy():
    """mypy of this environment (the test extra installs it). Under R3_REQUIRE_SPACK=1
    (CI) a missing one fails instead of skipping."""
    path = os.path.join(os.path.dirname(sys.executable), "mypy")
    if not os.access(path, os.X_OK):
        reason = "mypy is not installed beside %s (pip install mypy)" % sys.executable
        if os.environ.get("R3_REQUIRE_SPACK") == "1":
            pytest.fail("%s and R3_REQUIRE_SPACK=1" % reason)
        pytest.skip(reason)
    return path


def test_data_objects_results_and_plan_are_fully_typed(mypy):
    config = os.path.join(REPO_ROOT, "setup.cfg")
    # --cache-dir os.devnull: nothing written into the checkout
    run = subprocess.run(
        [mypy, "--config-file", config, "--cache-dir", os.devnull, *TYPED_MODULES],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Success: no issues found in %d source files" % len(TYPED_MODULES) in run.stdout

"""Shared fixtures: the real toolchain and a real Spack, found or skipped (never faked)."""

import os
import sys

import pytest

from spack_r3.errors import ToolchainError
from spack_r3.spack.locate import find_spack_root
from spack_r3 import toolchain
from spack_r3.device.tools import _wheel_dir
from spack_r3.toolchain import find_clang

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS)
TREES = os.path.join(TESTS, "trees")  # small source trees of our own

# tests/ mirrors spack_r3's packages (tests/record, tests/replay, ...). Test modules share
# fixtures and helpers by module name (``from test_record_replay import source_tree``), so
# every folder of tests is importable from any other; basenames are unique across them.
for _folder in sorted(os.listdir(TESTS)):
    _path = os.path.join(TESTS, _folder)
    if os.path.isdir(_path) and _folder not in ("trees", "__pycache__") and _path not in sys.path:
        sys.path.insert(0, _path)


@pytest.fixture(scope="session")
def clang():
    try:
        return find_clang()
    except ToolchainError as err:
        pytest.skip(str(err))


@pytest.fixture(scope="session")
def flang(clang):
    """The flang of the record clang's version (scripts/setup.sh installs flang-19)."""
    found = toolchain.flang_beside(clang)
    if found is None:
        msg = "no flang of %s's version (Debian: apt-get install flang-19)" % clang
        if os.environ.get("R3_REQUIRE_SPACK") == "1":  # CI: setup installs it
            pytest.fail(msg)
        pytest.skip(msg)
    return found


@pytest.fixture(scope="session")
def polly(clang):
    """The record clang's opt, llvm-link and llvm-dis, with Polly in opt: found or skipped."""
    try:
        tools = toolchain.find_llvm_tools(toolchain.clang_major(clang))
    except ToolchainError as err:
        pytest.skip(str(err))
    if not toolchain.opt_has_polly(tools.opt):
        pytest.skip("%s has no Polly" % tools.opt)
    return tools


def pytest_collection_modifyitems(items):
    """Every test that needs a real Spack is marked ``spack`` (``-m "not spack"`` runs the
    rest), whichever fixture brings Spack in."""
    for item in items:
        if "spack_root" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spack)


@pytest.fixture(scope="session")
def spack_root():
    """A real Spack. Under R3_REQUIRE_SPACK=1 (CI) a missing Spack fails instead of skipping."""
    root = find_spack_root()
    if root is None:
        msg = "no Spack found (SPACK_ROOT, spack on PATH, ~/spack)"
        if os.environ.get("R3_REQUIRE_SPACK") == "1":
            pytest.fail(msg + " and R3_REQUIRE_SPACK=1")
        pytest.skip(msg)
    os.environ.setdefault("SPACK_PYTHON", sys.executable)
    return root


@pytest.fixture(scope="session")
def cuda_path(tmp_path_factory):
    """A CUDA-like tree of NVIDIA's wheels, as ``--cuda-path`` reads one: include/ (the
    runtime's cuda.h, cuda_runtime_api.h, crt/; curand's headers, which clang's CUDA
    wrapper headers include; Thrust and CUB), bin/ptxas, nvvm/ (libdevice), and
    lib64/libcudart.so.12."""
    wheels = {name: _wheel_dir("nvidia." + name) for name in ("cuda_runtime", "cuda_nvcc", "curand", "cuda_cccl")}
    missing = sorted(name for name, d in wheels.items() if not d)
    if missing:
        pytest.skip("needs NVIDIA's CUDA wheels (scripts/setup.sh installs them): no %s" % ", ".join(missing))
    tree = tmp_path_factory.mktemp("cuda")
    os.makedirs(tree / "include")
    os.makedirs(tree / "lib64")
    for name in ("cuda_runtime", "cuda_nvcc", "curand", "cuda_cccl"):
        d = os.path.join(wheels[name], "include")
        for entry in os.listdir(d):
            if not os.path.exists(tree / "include" / entry):
                os.symlink(os.path.join(d, entry), tree / "include" / entry)
    os.symlink(os.path.join(wheels["cuda_nvcc"], "bin"), tree / "bin")
    os.symlink(os.path.join(wheels["cuda_nvcc"], "nvvm"), tree / "nvvm")
    os.symlink(os.path.join(wheels["cuda_runtime"], "lib", "libcudart.so.12"), tree / "lib64" / "libcudart.so.12")
    os.symlink("libcudart.so.12", tree / "lib64" / "libcudart.so")  # what -lcudart finds
    return str(tree)


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    return str(ws)

"""Backends are plug-ins: each is a module under spack_r3/backends/ and one registry line,
and the stages ask the backend that claims a compile line or names a capture."""

import os
import sys

import pytest

from spack_r3 import backends
from spack_r3.backends.base import Backend
from types import SimpleNamespace as Capture  # of_capture reads a capture's id and launch only
from spack_r3.errors import R3Error
from spack_r3.record import launcher


def test_each_backend_is_its_own_module_and_one_registry_line():
    package = os.path.dirname(backends.__file__)
    assert [b.name for b in backends.REGISTRY] == ["host", "offload", "cuda", "hip"]
    for backend in backends.REGISTRY:
        assert isinstance(backend, Backend)
        assert os.path.exists(os.path.join(package, backend.name + ".py"))
        assert sys.modules["spack_r3.backends." + backend.name].BACKEND is backend


@pytest.mark.parametrize(
    "args, name",
    [
        (["-O2", "-c", "kernel.c"], "host"),
        (["-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-c", "k.c"], "offload"),
        (["-c", "saxpy.cu", "--cuda-gpu-arch=sm_90"], "cuda"),
        (["-x", "hip", "-c", "k.cpp"], "hip"),
        (["-xcuda", "-c", "k.cpp"], "cuda"),
    ],
)
def test_the_backend_that_claims_a_compile_line_records_it(args, name):
    assert backends.of_compile(args).name == name


def test_what_the_stages_ask_a_backend():
    host, offload, cuda, hip = backends.REGISTRY
    assert host.rewrites and host.host_engine and offload.host_engine
    assert not cuda.host_engine and not hip.host_engine  # a replay server runs their worker
    assert cuda.worker == hip.worker != host.worker == offload.worker
    assert offload.geometry == cuda.geometry == ("num_teams", "thread_limit") and host.geometry == ()


def test_a_capture_naming_no_registered_backend_is_one_line():
    capture = Capture(id="c1", kernel="k", launch={"backend": "sycl"})
    with pytest.raises(R3Error, match="names backend 'sycl', which this r3 does not have"):
        backends.of_capture(capture)


class Marker(Backend):
    """A backend of our own: claims ``-fmarker`` lines and records them by writing a file."""

    def claims(self, args):
        return "-fmarker" in args

    def record_line(self, line, record_dir, warn):
        with open(os.path.join(record_dir, "claimed"), "w") as f:
            f.write(" ".join(line.args))
        return 0


def test_adding_a_backend_is_its_module_and_a_registry_line(monkeypatch, tmp_path):
    """The record launcher dispatches to whatever the registry holds: a new backend needs no
    change in the launcher, the replay server or the capture lookup."""
    marker = Marker("marker")
    monkeypatch.setattr(backends, "REGISTRY", backends.REGISTRY + (marker,))
    monkeypatch.setenv("R3_RECORD_DIR", str(tmp_path))
    assert launcher.launch(["clang", "-fmarker", "-c", "k.c"]) == 0
    assert (tmp_path / "claimed").read_text() == "-fmarker -c k.c"
    assert backends.of_capture(Capture(id="c1", kernel="k", launch={"backend": "marker"})) is marker
    os.makedirs(tmp_path / "cap")
    (tmp_path / "cap" / "capture.json").write_text('{"launch": {"backend": "marker"}}')
    assert backends.worker_of(str(tmp_path / "cap")) == marker.worker

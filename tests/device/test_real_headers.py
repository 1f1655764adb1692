"""Device code as real applications write it, screened without a GPU: CUDA's own headers
(the runtime's, curand's, Thrust's) with ``<<<>>>`` launches, and HIP's with device math,
which the build's clang links ROCm's device libraries for. Nothing here runs on a GPU.

What went wrong before: with ``-nocudalib`` clang-19 reads no CUDA version and expects
CUDA 9's launch API (``use of undeclared identifier cudaConfigureCall`` on any ``<<<>>>``
with the real headers); AMD code calling sin/cos/atan kept ``__ocml_*`` unresolved, and the
screen rejected it on the figures of calls the real code does not make."""

import os

import pytest

from spack_r3.device import tools
from spack_r3.device.deviceir import device_ir
from spack_r3.device.occupancy import Geometry
from spack_r3.device.screen import DeviceUnit, screen
from spack_r3.device.table import rows
from spack_r3.device.targets import parse_targets
from spack_r3.compile.pipeline import parse
from conftest import TREES

REAL = os.path.join(TREES, "device", "real")
WAVE = "_Z4waveiPKdPd"  # wave(int, const double *, double *)


def test_a_cuda_program_with_thrust_and_launches_screens_on_nvidia(cuda_path):
    unit = DeviceUnit(os.path.join(REAL, "thrust_app.cu"), ("clang++", "--cuda-path=" + cuda_path, "-O2", "-c"))
    [target] = parse_targets("sm_80")
    ir = device_ir(unit.source, list(unit.command), target)
    assert WAVE in ir.kernels and ir.unresolved == ()  # sin, cos, atan: libdevice linked, as clang links it
    verdicts = {v.kernel: v for v in screen(unit, parse("O3"), Geometry(256), [target], WAVE)}
    assert verdicts[WAVE].ok and verdicts[WAVE].resources.registers > 0, verdicts


@pytest.fixture
def hip_headers():
    if not os.path.exists("/usr/include/hip/hip_runtime.h"):
        pytest.skip("needs HIP's headers (Debian's libamdhip64-dev; scripts/setup.sh installs it)")


def test_hip_device_math_is_linked_from_rocms_device_libraries(hip_headers):
    if tools.find_rocm_device_libs() is None:
        pytest.skip("needs ROCm's device libraries (Debian's rocm-device-libs; scripts/setup.sh installs it)")
    unit = DeviceUnit(os.path.join(REAL, "math_app.hip"), ("clang++", "-O2", "-c"))
    [target] = parse_targets("gfx90a")
    assert device_ir(unit.source, list(unit.command), target).unresolved == ()
    [verdict] = screen(unit, parse("O3"), Geometry(256), [target], WAVE)
    assert verdict.ok and not verdict.unresolved and verdict.resources.spill_stores == 0, verdict


def test_without_rocms_device_libraries_math_is_named_unresolved_not_rejected(hip_headers, monkeypatch):
    monkeypatch.setenv("R3_ROCM_DEVICE_LIBS", "")  # as on a machine without them
    unit = DeviceUnit(os.path.join(REAL, "math_app.hip"), ("clang++", "-O2", "-c"))
    [verdict] = screen(unit, parse("O3"), Geometry(256), parse_targets("gfx90a"), WAVE)
    assert verdict.ok  # its registers and stack are those of three calls the real code inlines
    assert {"__ocml_sin_f64", "__ocml_cos_f64", "__ocml_atan_f64"} <= set(verdict.unresolved)
    [row] = rows([verdict])
    assert row[-1].startswith("not judged: __o") and "unresolved" in row[-1]

"""The CUDA replay's driver calls, against NVIDIA's real binding (cuda-python's
``cuda.bindings.driver``, in the test extra): every name ``device/cuda.py`` and
``device/cudareplay.py`` call exists there, and without a GPU or driver the replay says
"no CUDA device" in one line. Nothing here runs on a GPU."""

import os
import re

import pytest

from conftest import REPO_ROOT

DEVICE = os.path.join(REPO_ROOT, "spack_r3", "device")


def test_every_driver_name_the_replay_calls_is_in_the_real_binding():
    cu = pytest.importorskip("cuda.bindings.driver", reason="cuda-python (the test extra) is not installed")
    used = set()
    for name in ("cuda.py", "cudareplay.py", "cudaworker.py"):
        with open(os.path.join(DEVICE, name)) as f:
            text = f.read()
        used |= set(re.findall(r"\bcu\.((?:cu|CU)\w*(?:\.\w+)?)", text))
        used |= {"CUdevice_attribute." + a for a in re.findall(r"\battr\.(CU_\w+)", text)}
    assert "cuLaunchKernel" in used and "CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR" in used
    missing = []
    for dotted in sorted(used):
        obj = cu
        for part in dotted.split("."):
            obj = getattr(obj, part, None)
        if obj is None:
            missing.append(dotted)
    assert not missing, missing


def test_without_a_gpu_the_replay_says_so_in_one_line():
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python (the test extra) is not installed")
    from spack_r3.device.cuda import CudaUnavailable, driver

    try:
        cu = driver()
    except CudaUnavailable as err:  # (this machine: the binding is there, the driver is not)
        message = str(err)
        assert message.startswith("no CUDA device: ") and "\n" not in message and "not installed" not in message
    else:  # a machine with a GPU
        count = cu.cuDeviceGetCount()
        assert count[0] == cu.CUresult.CUDA_SUCCESS and count[1] >= 1

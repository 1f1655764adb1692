"""The ``+r3`` build of a CUDA unit (emit/cuda.py, through r3-apply): a winner's pipeline
built into the unit's device image from the device code r3 measured, its block and grid
given to its launches by the launch shim (record/runtime/r3launch.c).

Built here as test_cuda_record.py builds CUDA code without a GPU: clang-19 with
-nocudainc and trees/device/cuda_min.h, ptxas and libcudart from NVIDIA's pip wheels, the
device image a cubin embedded with -fcuda-include-gpubinary. No GPU here: the test marked
``gpu`` runs the +r3 build on one and skips with "no CUDA device" elsewhere. Nothing here
is GPU-verified.
"""

import json
import os
import subprocess

import pytest

from spack_r3.data import Launch
from spack_r3.emit import apply
from spack_r3.emit.plan import Plan, PlannedKernel, PlannedUnit
from spack_r3.compile.pipeline import parse
from conftest import TREES
from test_cuda_record import HEAVY, HEAVY_KERNEL, _cubin_registers, _flags

TREE = os.path.join(TREES, "device")
SCALE, STRIDE = "_Z5scaleifPf", "_Z6strideifPf"


def _clangxx(clang):
    return clang.replace("clang", "clang++", 1) if "clang++" not in clang else clang


def _plan(tmp_path, monkeypatch, source, kernels, name="plan", **facts):
    """A plan of ``kernels`` (PlannedKernel) of the unit ``source`` for sm_90, set for r3-apply."""
    plan = Plan("x86_64", [PlannedUnit(source, kernels)], gpu="sm_90", facts=facts)
    path = tmp_path / (name + ".json")
    path.write_text(json.dumps(plan.to_json()))
    monkeypatch.setenv(apply.PLAN_ENV, str(path))


def _embedded(obj, tmp_path):
    """The GPU binary a host object embeds (its .nv_fatbin section)."""
    out = tmp_path / (os.path.basename(obj) + ".image")
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", obj, str(out)], check=True)
    return out.read_bytes()


def test_a_pipeline_winner_is_built_into_the_units_device_image(cuda_path, clang, tmp_path, monkeypatch, capsys):
    """A kernel that won with r3's pipeline: r3-apply compiles the unit's device side as record
    did, optimizes it by the pipeline as replay does, assembles it with ptxas for the plan's
    GPU and embeds that cubin in the unit's host object. The pipeline shows in ptxas's
    registers for the embedded kernel (on sm_90, measured: 48 at O3, 40 at O0); a cap
    goes with it (.maxnreg, -maxrregcount)."""
    src = tmp_path / "heavy.cu"
    src.write_text(HEAVY)
    line = [_clangxx(clang)] + _flags(cuda_path, "sm_90") + ["--cuda-host-only", "-c", str(src), "-o"]

    def build(pipeline, name, cap=None):
        _plan(
            tmp_path, monkeypatch, "heavy.cu", [PlannedKernel(HEAVY_KERNEL, parse(pipeline), Launch(max_registers=cap))]
        )
        obj = str(tmp_path / (name + ".o"))
        assert apply.launch(line + [obj]) == 0
        image = _embedded(obj, tmp_path)
        assert image.startswith(b"\x7fELF") and HEAVY_KERNEL.encode() in image  # a cubin with the kernel
        path = tmp_path / (name + ".cubin")
        path.write_bytes(image)
        return _cubin_registers(str(path))

    o3, o0 = build("O3", "o3"), build("O0", "o0")
    assert o3 > 32 and o0 != o3
    assert build("O3", "capped", cap=32) == 32
    # the build's own pipeline, no plan entry of r3's: the host side as built, no image of r3's
    monkeypatch.delenv(apply.PLAN_ENV)
    assert apply.launch(line + [str(tmp_path / "plain.o")]) == 0
    assert _embedded(str(tmp_path / "plain.o"), tmp_path) == b""


def test_what_one_cuda_image_cannot_hold_is_refused_in_one_line(cuda_path, clang, tmp_path, monkeypatch, capsys):
    """One device image a unit: its kernels' pipelines must agree; a source that is not the
    one recorded (its digest in the plan), or a compile for other GPUs than the plan's, is
    refused with one line (R3_APPLY_FALLBACK=1 builds it untuned)."""
    src = tmp_path / "launch_app.cu"
    src.write_text(open(os.path.join(TREE, "launch_app.cu")).read())
    line = [_clangxx(clang)] + _flags(cuda_path, "sm_90") + ["--cuda-host-only", "-c", str(src), "-o"]
    obj = str(tmp_path / "app.o")

    def refused(kernels, line=line, **facts):
        _plan(tmp_path, monkeypatch, "launch_app.cu", kernels, **facts)
        capsys.readouterr()
        assert apply.launch(line + [obj]) == 1
        (msg,) = capsys.readouterr().err.splitlines()
        assert msg.startswith("r3-apply: %s: " % src) and msg.endswith("(R3_APPLY_FALLBACK=1 builds it untuned)")
        return msg

    msg = refused([PlannedKernel(SCALE, parse("O3")), PlannedKernel(STRIDE, parse("O2"))])
    assert "different pipelines of one CUDA unit (O2, O3)" in msg
    msg = refused([PlannedKernel(SCALE, parse("O3")), PlannedKernel(STRIDE, parse("compiler=build"))])
    assert "different pipelines of one CUDA unit (O3, as built)" in msg
    msg = refused([PlannedKernel(SCALE, parse("O3"))], sources={"launch_app.cu": "0" * 64})
    assert "changed since tuning" in msg
    sm80 = [_clangxx(clang)] + _flags(cuda_path, "sm_80") + ["--cuda-host-only", "-c", str(src), "-o"]
    msg = refused([PlannedKernel(SCALE, parse("O3"))], line=sm80)
    assert "one cubin, for sm_90; this compile is for sm_80" in msg
    msg = refused([PlannedKernel("_Z4gonePf", parse("O3"))])
    assert "does not define _Z4gonePf" in msg
    monkeypatch.setenv("R3_APPLY_FALLBACK", "1")
    _plan(tmp_path, monkeypatch, "launch_app.cu", [PlannedKernel("_Z4gonePf", parse("O3"))])
    assert apply.launch(line + [obj]) == 0 and os.path.exists(obj)


def test_the_launch_shim_builds_against_the_real_headers(cuda_path, clang, tmp_path):
    """r3launch.c compiled against the real cuda_runtime_api.h, warnings as errors: each
    interposed definition checked against the runtime's prototype (as r3cuda.c is)."""
    from spack_r3.emit.cuda import SHIM_SOURCE

    obj = str(tmp_path / "r3launch.o")
    cmd = [clang, "-O2", "-fPIC", "-Wall", "-Wextra", "-Werror", "-DR3CUDA_REAL_HEADERS"]
    subprocess.run(cmd + ["-I", os.path.join(cuda_path, "include"), "-c", SHIM_SOURCE, "-o", obj], check=True)
    out = subprocess.run(["nm", "-g", "--defined-only", obj], capture_output=True, text=True).stdout
    defined = {l.split()[-1] for l in out.splitlines() if l.strip()}
    assert {"cudaLaunchKernel", "cudaLaunchKernel_ptsz", "__cudaRegisterFunction", "r3launch_geometry"} <= defined


def _launch_app(cuda_path, clang, tmp_path):
    """launch_app.cu compiled and linked through r3-apply under the plan set, against the
    wheel's libcudart, its device image as the build makes it (ptxas's cubin of clang's PTX,
    which its host side registers): the executable."""
    from spack_r3.device import tools

    clangxx = _clangxx(clang)
    src = os.path.join(TREE, "launch_app.cu")
    exe, obj, ptx, cubin = (str(tmp_path / n) for n in ("app", "app.o", "app.ptx", "app.cubin"))
    subprocess.run([clangxx] + _flags(cuda_path, "sm_90") + ["--cuda-device-only", "-S", src, "-o", ptx], check=True)
    subprocess.run([tools.find_ptxas(), "-arch=sm_90", ptx, "-o", cubin], check=True)
    binary = ["-Xclang", "-fcuda-include-gpubinary", "-Xclang", cubin]
    line = [clangxx] + _flags(cuda_path, "sm_90") + ["--cuda-host-only"] + binary + ["-c", src, "-o", obj]
    assert apply.launch(line) == 0
    lib = os.path.join(cuda_path, "lib64")
    assert apply.launch([clangxx, obj, "-L", lib, "-lcudart", "-Wl,-rpath," + lib, "-o", exe]) == 0
    return exe


def _shown(exe, **env):
    proc = subprocess.run([exe], capture_output=True, text=True, env=dict(os.environ, **env), timeout=60)
    return proc, {l.split()[0]: l.split()[1:] for l in proc.stdout.splitlines() if "planned=" in l}


def test_the_launch_shim_gives_a_planned_kernel_its_block_and_grid(cuda_path, clang, tmp_path, monkeypatch):
    """A winner's block (and a grid-stride kernel's grid) reach its launches: r3-apply puts
    each planned kernel's geometry in its unit's object and links the launch shim into the
    executable, which keeps each planned kernel's stub as the module constructor registers
    it (through the shim to the real libcudart) and applies replay's rule to a launch: a
    kernel that does not read gridDim keeps its threads covered (grid 10 x block 100 at a
    block of 64: 16 blocks), a grid-stride one keeps its grid or takes the planned one."""
    kernels = [
        PlannedKernel(SCALE, parse("compiler=build"), Launch(thread_limit=64)),
        PlannedKernel(STRIDE, parse("compiler=build"), Launch(thread_limit=256)),
    ]
    _plan(tmp_path, monkeypatch, "launch_app.cu", kernels)
    exe = _launch_app(cuda_path, clang, tmp_path)
    proc, shown = _shown(exe, R3LAUNCH_VERBOSE="1")
    assert shown["scale"] == ["planned=1", "grid=16", "block=64"]
    assert shown["stride"] == ["planned=1", "grid=10", "block=256"]
    assert "r3launch: %s: block x 64, grid x 0, following its block" % SCALE in proc.stderr
    assert proc.stdout.splitlines()[-1] in ("no device", "ok")  # here: no device
    kernels[1] = PlannedKernel(STRIDE, parse("compiler=build"), Launch(thread_limit=32, num_teams=4))
    _plan(tmp_path, monkeypatch, "launch_app.cu", kernels[1:], name="stride")
    _, shown = _shown(_launch_app(cuda_path, clang, tmp_path))
    assert shown["stride"] == ["planned=1", "grid=4", "block=32"]
    assert shown["scale"] == ["planned=0", "grid=10", "block=100"]  # not planned: as launched
    # a plan without geometry links no shim
    _plan(tmp_path, monkeypatch, "launch_app.cu", [PlannedKernel(SCALE, parse("O3"))], name="code")
    _, shown = _shown(_launch_app(cuda_path, clang, tmp_path))
    assert shown["scale"] == ["planned=-1", "grid=10", "block=100"]


@pytest.mark.gpu
def test_the_r3_build_runs_on_a_cuda_device(cuda_path, clang, tmp_path, monkeypatch):
    """On a CUDA GPU only: launch_app.cu built +r3 with r3's pipeline (its cubin embedded) and
    new blocks for both kernels (the shim linked in) computes what the application computes."""
    from spack_r3.device.cuda import CudaUnavailable, driver

    try:
        driver()
    except CudaUnavailable as err:
        pytest.skip(str(err))
    kernels = [
        PlannedKernel(SCALE, parse("O3"), Launch(thread_limit=64)),
        PlannedKernel(STRIDE, parse("O3"), Launch(thread_limit=32, num_teams=4)),
    ]
    _plan(tmp_path, monkeypatch, "launch_app.cu", kernels)
    proc, shown = _shown(_launch_app(cuda_path, clang, tmp_path))
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "ok", proc.stdout + proc.stderr
    assert shown["scale"] == ["planned=1", "grid=16", "block=64"]

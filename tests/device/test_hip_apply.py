"""The ``+r3`` build of a HIP unit (emit/cuda.py with emit/hip.py, through r3-apply): a
winner's pipeline and VGPR cap built into the unit's code object from the device code r3
measured, embedded as clang embeds HIP's (an offload bundle, -fcuda-include-gpubinary), its
block and grid given to its launches by HIP's launch shim (record/runtime/r3hiplaunch.c).

Built here as test_hip_record.py builds HIP code without a GPU: clang-19 -x hip (a .hip
source) --offload-arch=gfx90a -nogpulib -nogpuinc (trees/device/hip_min.h), Debian's
libamdhip64-dev (ROCm 5.2: its headers, the real libamdhip64.so), ld.lld-19 for the device
link as clang's own does it. No GPU here: the test marked ``gpu`` runs the +r3 build on an
AMD GPU and skips with "no HIP device" elsewhere. Nothing here is GPU-verified.
"""

import json
import os
import subprocess

import pytest

from spack_r3.data import Launch
from spack_r3.device import tools
from spack_r3.emit import apply
from spack_r3.emit.plan import Plan, PlannedKernel, PlannedUnit
from spack_r3.errors import R3Error
from spack_r3.compile.pipeline import parse
from conftest import TREES

TREE = os.path.join(TREES, "device")
HIP_HEADER = "/usr/include/hip/hip_runtime_api.h"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
SCALE, STRIDE = "_Z5scaleifPf", "_Z6strideifPf"
HEAVY = """#include "hip_min.h"
__global__ void heavy(const float *x, float *y, int n) {
  float a[48];
#pragma unroll
  for (int k = 0; k < 48; k++) a[k] = x[THREAD_X + k * n];
  float s = 0;
#pragma unroll
  for (int k = 0; k < 48; k++) s += a[k] * a[47 - k] * x[k];
  y[THREAD_X] = s;
}
"""
HEAVY_KERNEL = "_Z5heavyPKfPfi"
BUNDLE_ENTRY = "hipv4-amdgcn-amd-amdhsa--gfx90a"


@pytest.fixture(scope="module")
def hipcc(clang):
    """clang++-19 for a HIP compile, where ld.lld (clang's device link), clang-offload-bundler
    and the HIP runtime are installed; the flags of a gfx90a compile without ROCm's device
    libraries or headers."""
    for tool in ("ld.lld", "clang-offload-bundler"):
        try:
            tools.llvm_tool(tool)
        except R3Error:
            pytest.skip("needs %s (Debian: apt-get install lld-19 clang-19)" % tool)
    if not os.path.isfile(os.path.join(LIBDIR, "libamdhip64.so")):
        pytest.skip("needs the HIP runtime libamdhip64.so (Debian: libamdhip64-dev)")
    clangxx = clang.replace("clang", "clang++", 1) if "clang++" not in clang else clang
    return [clangxx, "--offload-arch=gfx90a", "-nogpulib", "-nogpuinc", "-I", TREE, "-O2"]


def _plan(tmp_path, monkeypatch, source, kernels, name="plan", **facts):
    """A plan of ``kernels`` (PlannedKernel) of the unit ``source`` for gfx90a, set for r3-apply."""
    plan = Plan("x86_64", [PlannedUnit(source, kernels)], gpu="gfx90a", facts=facts)
    path = tmp_path / (name + ".json")
    path.write_text(json.dumps(plan.to_json()))
    monkeypatch.setenv(apply.PLAN_ENV, str(path))


def _embedded(obj, tmp_path):
    """The gfx90a code object a host object embeds (its .hip_fatbin bundle, unbundled), or None."""
    image, code = (str(tmp_path / (os.path.basename(obj) + ext)) for ext in (".hipfb", ".hsaco"))
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.hip_fatbin", obj, image], check=True)
    if os.path.getsize(image) == 0:
        return None
    bundler = [tools.llvm_tool("clang-offload-bundler"), "-type=o", "-unbundle", "-targets=" + BUNDLE_ENTRY]
    subprocess.run(bundler + ["-input=" + image, "-output=" + code], check=True)
    return code


def test_a_pipeline_winner_and_its_vgpr_cap_are_built_into_the_units_code_object(hipcc, tmp_path, monkeypatch):
    """A kernel that won with r3's pipeline: r3-apply compiles the unit's device side as record
    did, optimizes it by the pipeline and makes its code object as replay does (llvmlite's
    AMDGPU target, ld.lld -shared), bundles it as clang does and embeds the bundle in the
    unit's host object. The pipeline shows in the embedded kernel's VGPRs as its metadata
    note gives them (gfx90a, measured: 52 at O3, 14 at O0); a cap goes with it
    (amdgpu-num-vgpr), also where the winner kept the build's pipeline: clang has no flag for
    it, so the code object is r3's, the build's -O level as replay measured it."""
    from spack_r3.device.codegen import amdgpu_resources

    src = tmp_path / "heavy.hip"
    src.write_text(HEAVY)
    line = hipcc + ["--offload-host-only", "-c", str(src), "-o"]

    def build(pipeline, name, cap=None):
        kernel = PlannedKernel(HEAVY_KERNEL, parse(pipeline), Launch(max_registers=cap))
        _plan(tmp_path, monkeypatch, "heavy.hip", [kernel])
        obj = str(tmp_path / (name + ".o"))
        assert apply.launch(line + [obj]) == 0
        code = _embedded(obj, tmp_path)
        with open(code, "rb") as f:
            assert f.read(4) == b"\x7fELF"
        return amdgpu_resources(code)[HEAVY_KERNEL].registers

    o3, o0 = build("O3", "o3"), build("O0", "o0")
    assert o3 > 32 and o0 != o3
    assert build("O3", "capped", cap=32) <= 32
    assert build("compiler=build", "built-capped", cap=24) <= 24
    # the build's own pipeline, no cap: the host side as built, no image of r3's
    monkeypatch.delenv(apply.PLAN_ENV)
    assert apply.launch(line + [str(tmp_path / "plain.o")]) == 0
    assert _embedded(str(tmp_path / "plain.o"), tmp_path) is None


def test_a_device_only_compile_gives_r3s_bundle(hipcc, tmp_path, monkeypatch):
    """A device-only compile's output is the bundle itself (as clang's is): r3's code object."""
    from spack_r3.device.codegen import amdgpu_resources

    src = tmp_path / "heavy.hip"
    src.write_text(HEAVY)
    _plan(tmp_path, monkeypatch, "heavy.hip", [PlannedKernel(HEAVY_KERNEL, parse("O3"), Launch(max_registers=32))])
    out, code = str(tmp_path / "heavy.hipfb"), str(tmp_path / "heavy.hsaco")
    assert apply.launch(hipcc + ["--offload-device-only", "-c", str(src), "-o", out]) == 0
    bundler = [tools.llvm_tool("clang-offload-bundler"), "-type=o", "-unbundle", "-targets=" + BUNDLE_ENTRY]
    subprocess.run(bundler + ["-input=" + out, "-output=" + code], check=True)
    assert amdgpu_resources(code)[HEAVY_KERNEL].registers <= 32


def test_what_one_hip_code_object_cannot_hold_is_refused_in_one_line(hipcc, tmp_path, monkeypatch, capsys):
    """One code object a unit: its kernels' pipelines and caps must agree; a source that is not
    the one recorded (its digest in the plan), a compile for other GPUs than the plan's, or a
    planned kernel the unit no longer defines is refused with one line."""
    src = os.path.join(TREE, "launch_app.hip")
    obj = str(tmp_path / "app.o")
    line = hipcc + ["--offload-host-only", "-c", src, "-o", obj]

    def refused(kernels, line=line, **facts):
        _plan(tmp_path, monkeypatch, "launch_app.hip", kernels, **facts)
        capsys.readouterr()
        assert apply.launch(line) == 1
        (msg,) = capsys.readouterr().err.splitlines()
        assert msg.startswith("r3-apply: %s: " % src) and msg.endswith("(R3_APPLY_FALLBACK=1 builds it untuned)")
        return msg

    msg = refused([PlannedKernel(SCALE, parse("O3")), PlannedKernel(STRIDE, parse("O2"))])
    assert "different pipelines of one HIP unit (O2, O3)" in msg
    capped = [PlannedKernel(k, parse("O3"), Launch(max_registers=c)) for k, c in ((SCALE, 32), (STRIDE, 64))]
    assert "different register caps of one HIP unit" in refused(capped)
    assert "changed since tuning" in refused([PlannedKernel(SCALE, parse("O3"))], sources={"launch_app.hip": "0" * 64})
    gfx942 = [a.replace("gfx90a", "gfx942") for a in line]
    msg = refused([PlannedKernel(SCALE, parse("O3"))], line=gfx942)
    assert "one code object, for gfx90a; this compile is for gfx942" in msg
    assert "does not define _Z4gonePf" in refused([PlannedKernel("_Z4gonePf", parse("O3"))])


def test_the_hip_launch_shim_builds_against_the_real_headers(clang, tmp_path):
    """r3hiplaunch.c compiled against ROCm's hip_runtime_api.h, warnings as errors: each
    interposed definition checked against the runtime's prototype (as r3hip.c is)."""
    from spack_r3.emit.cuda import HIP_SHIM_SOURCE

    if not os.path.isfile(HIP_HEADER):
        pytest.skip("needs ROCm's HIP headers (Debian: apt-get install libamdhip64-dev)")
    obj = str(tmp_path / "r3hiplaunch.o")
    cmd = [clang, "-O2", "-fPIC", "-Wall", "-Wextra", "-Werror", "-DR3HIP_REAL_HEADERS"]
    subprocess.run(cmd + ["-c", HIP_SHIM_SOURCE, "-o", obj], check=True)
    out = subprocess.run(["nm", "-g", "--defined-only", obj], capture_output=True, text=True).stdout
    defined = {l.split()[-1] for l in out.splitlines() if l.strip()}
    assert {"hipLaunchKernel", "hipLaunchKernel_spt", "__hipRegisterFunction", "r3launch_geometry"} <= defined


def _launch_app(hipcc, tmp_path):
    """launch_app.hip compiled (its device image as clang makes it, or r3's) and linked
    through r3-apply under the plan set, against the real libamdhip64.so: the executable."""
    exe, obj = str(tmp_path / "app"), str(tmp_path / "app.o")
    assert apply.launch(hipcc + ["-c", os.path.join(TREE, "launch_app.hip"), "-o", obj]) == 0
    assert apply.launch([hipcc[0], obj, "-L", LIBDIR, "-lamdhip64", "-Wl,-rpath," + LIBDIR, "-o", exe]) == 0
    return exe


def _shown(exe, **env):
    proc = subprocess.run([exe], capture_output=True, text=True, env=dict(os.environ, **env), timeout=60)
    return proc, {l.split()[0]: l.split()[1:] for l in proc.stdout.splitlines() if "planned=" in l}


def test_the_hip_launch_shim_gives_a_planned_kernel_its_block_and_grid(hipcc, tmp_path, monkeypatch):
    """A winner's block (and a grid-stride kernel's grid) reach its launches: r3-apply puts each
    planned kernel's geometry in its unit's object and links HIP's launch shim into an
    executable that links libamdhip64, which keeps each planned kernel's handle as the module
    constructor registers it (through the shim to the real runtime, no GPU needed) and applies
    replay's rule: a kernel that does not read its grid's size keeps its threads covered (grid
    10 x block 100 at a block of 64: 16 workgroups), a grid-stride one keeps its grid or takes
    the planned one."""
    kernels = [
        PlannedKernel(SCALE, parse("compiler=build"), Launch(thread_limit=64)),
        PlannedKernel(STRIDE, parse("compiler=build"), Launch(thread_limit=256)),
    ]
    _plan(tmp_path, monkeypatch, "launch_app.hip", kernels)
    proc, shown = _shown(_launch_app(hipcc, tmp_path), R3LAUNCH_VERBOSE="1")
    assert shown["scale"] == ["planned=1", "grid=16", "block=64"]
    assert shown["stride"] == ["planned=1", "grid=10", "block=256"]
    assert "r3launch: %s: block x 64, grid x 0, following its block" % SCALE in proc.stderr
    assert proc.stdout.splitlines()[-1] in ("no device", "ok")  # here: no device
    kernels[1] = PlannedKernel(STRIDE, parse("compiler=build"), Launch(thread_limit=32, num_teams=4))
    _plan(tmp_path, monkeypatch, "launch_app.hip", kernels[1:], name="stride")
    _, shown = _shown(_launch_app(hipcc, tmp_path))
    assert shown["stride"] == ["planned=1", "grid=4", "block=32"]
    assert shown["scale"] == ["planned=0", "grid=10", "block=100"]  # not planned: as launched
    # a plan without geometry links no shim
    _plan(tmp_path, monkeypatch, "launch_app.hip", [PlannedKernel(SCALE, parse("O3"))], name="code")
    _, shown = _shown(_launch_app(hipcc, tmp_path))
    assert shown["scale"] == ["planned=-1", "grid=10", "block=100"]


@pytest.mark.gpu
def test_the_r3_build_runs_on_an_amd_gpu(hipcc, tmp_path, monkeypatch):
    """On an AMD GPU (gfx90a, as the plan says) only: launch_app.hip built +r3 with r3's
    pipeline and a VGPR cap (its code object embedded) and new blocks for both kernels (the
    shim linked in) computes what the application computes."""
    from spack_r3.device.hip import driver

    try:
        driver()
    except R3Error as err:
        pytest.skip(str(err))
    kernels = [
        PlannedKernel(SCALE, parse("O3"), Launch(thread_limit=64, max_registers=32)),
        PlannedKernel(STRIDE, parse("O3"), Launch(thread_limit=32, num_teams=4, max_registers=32)),
    ]
    _plan(tmp_path, monkeypatch, "launch_app.hip", kernels)
    proc, shown = _shown(_launch_app(hipcc, tmp_path))
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "ok", proc.stdout + proc.stderr
    assert shown["scale"] == ["planned=1", "grid=16", "block=64"]

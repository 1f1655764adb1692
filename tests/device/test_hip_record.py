"""Recording HIP kernels (backend ``hip``): r3hip.c, the launch recorder r3cuda.c shares
(runtime/gpurec.h) named for the HIP runtime, checked against ROCm's real headers and
interposed in a HIP application linked against the real libamdhip64 (Debian's
libamdhip64-dev, ROCm 5.2: headers and runtime, no GPU driver needed to load); a capture
written by r3hip.c's own writer ingested as a hip capture at its arch.

The application (trees/device/record_app.hip) is compiled by clang-19 without ROCm's device
libraries or headers (-nogpulib -nogpuinc: gpu.h), its host side alone with a placeholder
device image (-fcuda-include-gpubinary): the recorder needs no device code, and no lld
(test_hip_apply.py builds real code objects). It never launches here (hipMalloc finds no
device); nothing here ran on an AMD GPU.
"""

import os
import subprocess

import pytest

from spack_r3 import backends, cli
from spack_r3.errors import R3Error
from spack_r3.record import cuda, launcher
from spack_r3.replay import engine
from spack_r3.record.ingest import ingest
from spack_r3.workspace import Workspace
from conftest import TREES

TREE = os.path.join(TREES, "device")
KERNEL = "_Z5scaleifPf"  # scale(int, float, float *)
STRIDE_KERNEL = "_Z9scale_allifPf"  # scale_all(int, float, float *): grid-stride, __launch_bounds__(256)
HIP_HEADER = "/usr/include/hip/hip_runtime_api.h"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
INTERPOSED = {"hipLaunchKernel", "hipLaunchKernel_spt", "__hipRegisterFunction", "__hipRegisterVar"}
INTERPOSED |= {"hipMalloc", "hipMallocManaged", "hipFree"}


@pytest.fixture(scope="module")
def r3hip_real(tmp_path_factory, clang):
    """r3hip.c compiled against ROCm's hip_runtime_api.h (-DR3HIP_REAL_HEADERS), warnings as
    errors: each interposed definition, and the type each runtime entry point it calls through
    dlsym is called with, checked against the headers' own prototypes."""
    if not os.path.isfile(HIP_HEADER):
        pytest.skip("needs ROCm's HIP headers (Debian: apt-get install libamdhip64-dev)")
    obj = str(tmp_path_factory.mktemp("r3hip") / "r3hip.o")
    cmd = [clang, "-O2", "-fPIC", "-Wall", "-Wextra", "-Werror", "-DR3HIP_REAL_HEADERS"]
    subprocess.run(cmd + ["-c", cuda.HIP_RUNTIME_SOURCE, "-o", obj], check=True)
    return obj


@pytest.fixture(scope="module")
def hip_build(tmp_path_factory, clang, r3hip_real):
    """record_app.hip compiled and linked (-lamdhip64) through the record launcher, for gfx90a
    (R3_RECORD_DIR set); (record dir, that executable, the same object linked without it)."""
    if not os.path.isfile(os.path.join(LIBDIR, "libamdhip64.so")):
        pytest.skip("needs the HIP runtime libamdhip64.so (Debian: libamdhip64-dev)")
    tmp = tmp_path_factory.mktemp("hip-build")
    record, obj, exe, plain = (str(tmp / n) for n in ("record", "app.o", "app", "app-plain"))
    image = tmp / "placeholder.hipfb"
    image.write_bytes(b"__CLANG_OFFLOAD_BUNDLE__")
    clangxx = clang.replace("clang", "clang++", 1) if "clang++" not in clang else clang
    old = os.environ.get("R3_RECORD_DIR")
    os.environ["R3_RECORD_DIR"] = record
    try:
        argv = [clangxx, "-x", "hip", "--offload-arch=gfx90a", "-nogpulib", "-nogpuinc", "-I", TREE, "-O2"]
        argv += ["--offload-host-only", "-Xclang", "-fcuda-include-gpubinary", "-Xclang", str(image)]
        assert launcher.launch(argv + ["-c", os.path.join(TREE, "record_app.hip"), "-o", obj]) == 0
        assert launcher.launch([clangxx, obj, "-L", LIBDIR, "-lamdhip64", "-o", exe]) == 0
    finally:
        if old is None:
            del os.environ["R3_RECORD_DIR"]
        else:
            os.environ["R3_RECORD_DIR"] = old
    subprocess.run([clangxx, obj, "-L", LIBDIR, "-lamdhip64", "-o", plain], check=True)
    return record, exe, plain


def _defined(path):
    out = subprocess.run(["nm", "-D" if path.endswith(".so") else "-g", "--defined-only", path], capture_output=True)
    return {l.split()[-1] for l in out.stdout.decode().splitlines() if l.strip()}


def test_r3hip_builds_against_the_real_headers_and_interposes_libamdhip64(hip_build, r3hip_real, clang):
    assert INTERPOSED <= _defined(r3hip_real)
    lib = cuda.preload_library(clang, cuda.HIP_RUNTIME_SOURCE)  # the launcher's build: no ROCm headers
    assert INTERPOSED <= _defined(lib) and os.path.basename(lib) == "r3hip.so"
    record, exe, plain = hip_build
    assert INTERPOSED <= _defined(exe)  # linked in by the record launcher (-lamdhip64)
    assert not INTERPOSED & _defined(plain)
    for program, env in ((exe, {}), (plain, {"LD_PRELOAD": lib})):
        proc = subprocess.run(
            [program], capture_output=True, text=True, env=dict(os.environ, R3HIP_VERBOSE="1", **env), timeout=60
        )
        # clang's module constructor registered the kernel through r3hip, then libamdhip64;
        # hipMalloc (interposed, then the runtime's) finds no device here
        assert "r3hip: kernel %s" % KERNEL in proc.stderr
        assert proc.stdout.strip() in ("no device", "x[3] = 6")
    # the launcher kept the kernel's gfx90a unit and named it for the recorder
    with open(os.path.join(record, "cuda", KERNEL)) as f:
        index = f.read().splitlines()
    assert index[0] == "4 4 8" and index[1].startswith("gfx90a ")


WRITER = r"""
#include <stdint.h>
#include <string.h>
struct r3gpu_section { uint64_t dev, size; const unsigned char *pre, *post; };
struct r3gpu_capture {
  const char *kernel, *tu_dir, *arch; uint64_t instance, ns, stream; int pid, device;
  unsigned int grid[3], block[3]; uint64_t shared; int nparams; const uint32_t *sizes;
  const unsigned char *const *params; int nsections; const struct r3gpu_section *sections;
  int nglobals; const void *globals; const char *unreplayable;
};
int r3hip_write_capture(const char *, const struct r3gpu_capture *);
int r3hip_kernel_unit(const char *, const char *, const char *, char *, size_t, uint32_t *, int);
enum { N = 1024 };
static float x0[N], x1[N];
int main(int argc, char **argv) {
  char tu[1024]; uint32_t sizes[16];
  if (r3hip_kernel_unit(argv[1], argv[2], "gfx90a", tu, sizeof tu, sizes, 16) != 3) return 2;
  for (int i = 0; i < N; i++) { x0[i] = i; x1[i] = 2.0f * i; }
  int n = N; float a = 2.0f; uint64_t xd = 0x7f1200000000ull;  /* a device address */
  const unsigned char *params[3] = {(void *)&n, (void *)&a, (void *)&xd};
  struct r3gpu_section s = {xd, sizeof x0, (void *)x0, (void *)x1};
  struct r3gpu_capture c = {argv[2], tu, "gfx90a", 1, 777, 0, 4242, 0, {4, 1, 1}, {256, 1, 1}, 0,
                            3, sizes, params, 1, &s, 0, 0, 0};
  return r3hip_write_capture(argv[1], &c) ? 3 : 0;
}
"""


def _written(hip_build, r3hip_real, clang, tmp_path, kernel):
    """(workspace, capture): a capture of ``kernel`` written by r3hip.c's writer (built into a
    host program, no GPU) from the memory a launch of 4 x 256 threads scaling x by 2 would
    leave (x = 2x), ingested."""
    tmp_path = tmp_path / kernel  # (a test may take two)
    tmp_path.mkdir()
    writer = tmp_path / "writer.c"
    writer.write_text(WRITER)
    exe = str(tmp_path / "writer")
    subprocess.run([clang, "-O1", str(writer), r3hip_real, "-ldl", "-lpthread", "-o", exe], check=True)
    run = tmp_path / "run"
    subprocess.run(["cp", "-r", hip_build[0], str(run)], check=True)
    assert subprocess.run([exe, str(run), kernel]).returncode == 0
    ws = Workspace(str(tmp_path / "ws"))
    (capture,) = ingest(str(run), ws)
    return ws, capture


@pytest.fixture
def hip_capture(hip_build, r3hip_real, clang, tmp_path):
    """A written capture of scale (no launch bounds, not grid-stride)."""
    return _written(hip_build, r3hip_real, clang, tmp_path, KERNEL)


@pytest.fixture
def stride_capture(hip_build, r3hip_real, clang, tmp_path):
    """A written capture of scale_all (grid-stride, __launch_bounds__(256))."""
    return _written(hip_build, r3hip_real, clang, tmp_path, STRIDE_KERNEL)


def test_a_hip_capture_ingests_with_its_launch(hip_capture):
    """The capture is a hip one: its arch, geometry, arguments and memory at the device address."""
    from spack_r3.memimage import read_regions

    ws, capture = hip_capture
    launch = capture.launch
    assert backends.of_capture(capture) is backends.HIP and capture.kernel == KERNEL
    assert launch["arch"] == "gfx90a" and launch["grid"] == [4, 1, 1] and launch["block_dim"] == [256, 1, 1]
    assert capture.args == ["0x400", "0x40000000", "0x7f1200000000"]  # n = 1024, a = 2.0f, x
    (region,) = read_regions(os.path.join(ws.capture_dir(capture.id), "pre.bin"))
    assert region.addr == 0x7F1200000000 and region.size == 4096


def _no_hip_device():
    from spack_r3.device.hip import driver

    try:
        driver()
    except R3Error as err:
        return str(err)
    return None


def test_a_hip_capture_without_a_device_is_one_line_and_its_code_still_compiles(hip_capture, capsys):
    """Without an AMD GPU (or hip-python) r3 replay and a replay server's worker (the CUDA
    worker, whose child replays on a HipDevice) refuse a hip capture in one line; the code a
    replay would load, the kernel as built compiled for gfx90a by codegen's AMDGPU target,
    still compiles, with its resources."""
    from spack_r3.device.cudareplay import device_code
    from spack_r3.device.targets import parse_targets
    from spack_r3.compile.pipeline import as_built
    from spack_r3.replay.server import ReplayServer

    if _no_hip_device() is None:
        pytest.skip("a HIP device is present: the refusal is for machines without one")
    ws, capture = hip_capture
    directory = ws.capture_dir(capture.id)
    with pytest.raises(R3Error) as err:
        engine.host_engine_runs(capture)
    assert str(err.value).startswith("no HIP device: ") and "\n" not in str(err.value)
    assert cli.main(["--workspace", ws.root, "replay", capture.id]) != 0
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("r3 replay: error: no HIP device: ")
    assert backends.worker_of(directory) == backends.HIP.worker == "spack_r3.device.cudaworker"
    with ReplayServer(timeout=60) as server:
        with pytest.raises(R3Error) as err:
            server.load(directory)
        assert str(err.value).startswith("no HIP device: ") and "\n" not in str(err.value)
    (gfx90a,) = parse_targets("gfx90a")
    code = device_code(capture, directory, gfx90a, as_built(capture))
    assert code.code[:4] == b"\x7fELF" and code.resources[KERNEL].registers > 0


@pytest.mark.gpu
def test_a_hip_capture_replays_on_an_amd_gpu(hip_capture):
    """On an AMD GPU with hip-python: the written capture's memory mapped at its device
    address, the kernel as built launched once (x = 2x: verified) and timed with HIP events."""
    from spack_r3.data import Variant
    from spack_r3.device.cudareplay import evaluate

    why = _no_hip_device()
    if why:
        pytest.skip(why)
    ws, capture = hip_capture
    ev = evaluate(capture, ws.capture_dir(capture.id), Variant(), repeat=3)
    assert ev["status"] == "ok" and ev["verified"], ev.get("diagnostics")
    assert ev["time_median_s"] > 0


def _module_text(ws, capture):
    import llvmlite.binding as llvm

    with open(os.path.join(ws.capture_dir(capture.id), "module.bc"), "rb") as f:
        return str(llvm.parse_bitcode(f.read()))


def test_what_hip_device_ir_reads_for_the_grid_and_its_launch_bounds(clang, tmp_path):
    """clang-19's HIP device IR before any pass, with ROCm's own headers: gridDim is read
    through HIP's __HIP_GridDim coordinates (ROCm's __ockl_get_num_groups; gridDim.x *
    blockDim.x through __ockl_get_global_size), __launch_bounds__(256) is
    amdgpu-flat-work-group-size 1,256 and no bounds 1,1024. Without the headers (gpu.h), the
    grid size is the dispatch packet's (offset 12); with code object v4 the workgroup size
    is read from the dispatch packet too (offset 4), which is no read of the grid."""
    import llvmlite.binding as llvm

    from spack_r3.device import geometry
    from spack_r3.device.screen import DeviceUnit
    from spack_r3.device.targets import gpu_target

    if not os.path.isfile("/usr/include/hip/hip_runtime.h"):
        pytest.skip("needs ROCm's HIP headers (Debian: apt-get install libamdhip64-dev)")
    gfx90a = gpu_target("gfx90a")
    unit = DeviceUnit(os.path.join(TREE, "geometry.hip"), ("clang++", "-x", "hip", "-O2"))
    text = str(llvm.parse_bitcode(unit.ir(gfx90a).bitcode))
    stride, groups, plain = "_Z6strideifPf", "_Z6groupsifPf", "_Z5plainifPf"
    assert "@__ockl_get_global_size" in text and "@__ockl_get_num_groups" in text
    assert [geometry.grid_stride(text, k) for k in (stride, groups, plain)] == [True, True, False]
    assert [geometry.launch_bound(text, k) for k in (stride, groups, plain)] == [256, 1024, 1024]
    for version in ("5", "4"):  # (the device IR a unit's record keeps: its own -m flags kept)
        out = str(tmp_path / ("v%s.ll" % version))
        argv = [clang, "-x", "hip", "--offload-arch=gfx90a", "-nogpulib", "-nogpuinc", "-I", TREE, "-O2"]
        argv += ["-mcode-object-version=" + version, "--offload-device-only", "-emit-llvm", "-S"]
        subprocess.run(argv + ["-Xclang", "-disable-llvm-passes", os.path.join(TREE, "record_app.hip"), "-o", out])
        with open(out) as f:
            text = f.read()
        assert geometry.grid_stride(text, STRIDE_KERNEL) and not geometry.grid_stride(text, KERNEL)
    assert "@llvm.amdgcn.dispatch.ptr" in geometry._body(text, KERNEL)  # v4: the workgroup size


def test_a_hip_captures_space_has_its_launch_geometry(hip_capture, stride_capture):
    """r3 tune's space for a HIP launch recorded at gfx90a: blocks from a wavefront (64) up to
    the kernel's launch bounds, the grid of a grid-stride kernel scaled around the recorded 4
    blocks, VGPR caps up to what a gfx90a wave addresses; the recorded values first; no host
    settings. A kernel that is no grid-stride one keeps its threads at another block."""
    from dataclasses import replace

    from spack_r3.data import Launch
    from spack_r3.device.cudareplay import geometry
    from spack_r3.search.bayes import Target
    from spack_r3.search.space import Space
    from spack_r3.search.tune import kernel_facts

    for (ws, capture), blocks, grids in (
        (stride_capture, (None, 64, 128, 256), (None, 1, 2, 4, 8, 16)),
        (hip_capture, (None, 64, 128, 256, 512, 1024), None),
    ):
        space = Space(kernel_facts(Target(capture.kernel, [ws.capture_dir(capture.id)]), cores=1))
        params = {p.name: p for p in space.params}
        assert params["thread_limit"].choices == blocks
        assert (params["num_teams"].choices if "num_teams" in params else None) == grids
        assert params["max_registers"].choices == (None, 32, 64, 128, 256)
        assert "target" not in params and "threads a block" in space.describe()
        assert space.fingerprint() != Space(replace(space.facts, geometry=())).fingerprint()
        assert space.variant(space.defaults()).launch.to_json() == Launch().to_json()
    # the launch replay makes of a variant (hip.HipDevice launches what cudareplay.Session gives it)
    ws, capture = hip_capture
    assert geometry(capture, Launch(thread_limit=128), stride=False) == ((8, 1, 1), (128, 1, 1))
    ws, capture = stride_capture
    assert geometry(capture, Launch(thread_limit=128, num_teams=16)) == ((16, 1, 1), (128, 1, 1))


def test_a_hip_block_over_its_launch_bounds_is_rejected_before_any_run(stride_capture):
    """Without --gpu, each candidate of a HIP launch is screened on the arch it was recorded
    for, by its code object's metadata: a workgroup of 512 threads for a kernel bounded to
    256 is a compile error with the reason, and nothing runs (no replay server is given)."""
    from spack_r3.data import COMPILE_ERROR
    from spack_r3.device import hook
    from spack_r3.search.bayes import Target
    from spack_r3.search.space import Space
    from spack_r3.search.tune import kernel_facts

    ws, capture = stride_capture
    target = Target(STRIDE_KERNEL, [ws.capture_dir(capture.id)])
    space = Space(kernel_facts(target, cores=1))
    assert hook.attach([target], [capture], []) == []
    assert [g.name for g in target.screen.gpus] == ["gfx90a"]
    base = space.defaults()
    assert target.screen(space.variant(base)) is None
    assert target.screen(space.variant(dict(base, thread_limit=256, num_teams=16))) is None
    capped = space.variant(dict(base, max_registers=32))
    assert target.screen(capped) is None
    (verdict,) = target.screen.verdicts(capped)
    assert 0 < verdict.resources.registers <= 32 and verdict.resources.max_threads == 256
    ev = target.submit(None, space.variant(dict(base, thread_limit=512)))
    assert ev.status == COMPILE_ERROR
    assert ev.diagnostics == (
        "rejected before any run: %s: cannot launch on gfx90a at 512 threads: "
        "a block of 512 threads is over the kernel's launch bounds (256)" % STRIDE_KERNEL
    )


def test_hip_occupancy_from_the_code_objects_metadata(stride_capture, hip_capture):
    """The kernel's gfx90a code object (what a replay would load): its VGPRs, SGPRs, LDS and
    launch bound as llvm-readelf prints its metadata note, and the occupancy they give at
    the recorded 256 threads: 4 waves a workgroup, 8 waves a SIMD at most 64 VGPRs, so 8
    workgroups and every one of a CU's 32 wave slots (bound by waves, not registers)."""
    import re

    from spack_r3.device import tools
    from spack_r3.device.cudareplay import device_code
    from spack_r3.device.occupancy import Geometry, Resources, occupancy
    from spack_r3.device.screen import judge
    from spack_r3.device.targets import gpu_target

    gfx90a = gpu_target("gfx90a")
    for (ws, capture), bound in ((stride_capture, 256), (hip_capture, 1024)):
        code = device_code(capture, ws.capture_dir(capture.id), gfx90a)
        obj = os.path.join(ws.capture_dir(capture.id), "gfx90a.o")
        with open(obj, "wb") as f:
            f.write(code.code)
        notes = subprocess.run([tools.llvm_tool("llvm-readelf"), "--notes", obj], capture_output=True, text=True)
        res = code.resources[capture.kernel]
        for key, value in (("vgpr_count", res.registers), ("sgpr_count", res.sgprs), ("wavefront_size", 64)):
            assert re.search(r"\.%s:\s+%d\b" % (key, value), notes.stdout)
        assert (res.max_threads, res.wave_size, res.shared, res.spills) == (bound, 64, 0, False)
        assert 0 < res.registers <= 64 and res.sgprs <= 96  # (96 SGPRs: 8 waves of 800)
        o = occupancy(res, gfx90a, Geometry(256))
        assert (o.launchable, o.blocks, o.warps, o.max_warps, o.limiter, o.fraction) == (
            True,
            8,
            32,
            32,
            "waves",
            1.0,
        )
    # VGPRs x a workgroup's waves on one SIMD over its 512: 1024 threads are 16 waves, 4 a SIMD
    no = judge(KERNEL, gfx90a, Resources(KERNEL, registers=256, wave_size=64, max_threads=1024), Geometry(1024))
    assert not no.ok and no.reason == (
        "cannot launch on gfx90a at 1024 threads: 256 VGPRs x 4 waves a SIMD need more than the 512 VGPRs of a SIMD"
    )
    assert judge(KERNEL, gfx90a, Resources(KERNEL, registers=128, wave_size=64), Geometry(1024)).ok


def test_r3_retarget_reports_a_hip_captures_resources(stride_capture, capsys):
    """r3 retarget --gpu gfx90a,gfx942 on a workspace with a hip capture: the kernel compiled
    for each, its code object's figures and the occupancy at the recorded block."""
    import json

    ws, capture = stride_capture
    assert cli.main(["--workspace", ws.root, "retarget", "--gpu", "gfx90a,gfx942", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["kernels"]
    assert row["kernel"] == STRIDE_KERNEL and row["capture"] == capture.id
    assert [v["target"] for v in row["verdicts"]] == ["gfx90a", "gfx942"]
    for v in row["verdicts"]:
        r = v["resources"]
        assert v["ok"] and r["registers"] > 0 and r["sgprs"] > 0 and not r["spills"]
        assert (r["max_threads"], r["wave_size"]) == (256, 64)
        assert v["occupancy"]["launchable"] and v["occupancy"]["max_warps"] == 32

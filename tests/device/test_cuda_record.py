"""Recording CUDA kernels (backend ``cuda``): the record launcher's device IR per GPU arch,
the launch recorder r3cuda.c built against the CUDA runtime's real headers and interposed
in a CUDA application linked against the real libcudart (NVIDIA's pip wheels), a capture
written by r3cuda.c's own writer ingested, refused for replay without a CUDA device and
screened statically per GPU target.

The application (trees/device/record_app.cu) is compiled by clang-19 with -nocudainc and
the runtime API it calls declared in trees/device/cuda_min.h: clang-19's CUDA wrapper
headers want curand's headers, which the wheels do not ship. Its device image is the cubin
ptxas makes of clang's PTX, embedded with -fcuda-include-gpubinary: clang's own fatbinary
step needs CUDA's fatbinary, which the wheels do not ship either (and CUDA 13's rejects
clang-19's options). ``--cuda-path`` is a CUDA-like tree made of the wheels' include/ and
bin/ folders, from which clang reads the CUDA version (12.9: the launch through
__cudaPushCallConfiguration and cudaLaunchKernel).

No GPU here: the test marked ``gpu`` records and replays the application on one and skips
with "no CUDA device" elsewhere. Nothing here is GPU-verified.
"""

import json
import os
import subprocess

import pytest

from spack_r3 import backends, cli
from spack_r3.capture import list_captures
from spack_r3.device import tools
from spack_r3.errors import R3Error
from spack_r3.record import cuda, launcher
from spack_r3.replay import engine
from spack_r3.record.ingest import ingest
from spack_r3.workspace import Workspace
from conftest import TREES

TREE = os.path.join(TREES, "device")
KERNEL = "_Z5saxpyi5ScalePKfPf"  # saxpy(int, Scale, const float *, float *)


def _flags(cuda_path, *archs):
    return ["-nocudainc", "-nocudalib", "--cuda-path=" + cuda_path, "-Wno-unknown-cuda-version", "-O2", "-I", TREE] + [
        "--cuda-gpu-arch=" + a for a in archs
    ]


@pytest.fixture(scope="module")
def recorded_build(tmp_path_factory, cuda_path, clang):
    """record_app.cu built through the record launcher (R3_RECORD_DIR set), for sm_80 and
    sm_90, linked by it against the wheel's libcudart (-lcudart: the launcher links r3cuda.o
    in); (record dir, that executable, the same object linked without the launcher)."""
    tmp = tmp_path_factory.mktemp("cuda-build")
    record = str(tmp / "record")
    clangxx = clang.replace("clang", "clang++", 1) if "clang++" not in clang else clang
    src = os.path.join(TREE, "record_app.cu")
    ptx, cubin, obj, exe = (str(tmp / n) for n in ("app.ptx", "app.cubin", "app.o", "app"))
    subprocess.run([clangxx] + _flags(cuda_path, "sm_80") + ["--cuda-device-only", "-S", src, "-o", ptx], check=True)
    subprocess.run([tools.find_ptxas(), "-arch=sm_80", ptx, "-o", cubin], check=True)
    old = os.environ.get("R3_RECORD_DIR")
    os.environ["R3_RECORD_DIR"] = record
    try:
        argv = [clangxx] + _flags(cuda_path, "sm_80", "sm_90")
        argv += ["--cuda-host-only", "-Xclang", "-fcuda-include-gpubinary", "-Xclang", cubin, "-c", src, "-o", obj]
        assert launcher.launch(argv) == 0
        lib = os.path.join(cuda_path, "lib64")
        assert launcher.launch([clangxx, obj, "-L", lib, "-lcudart", "-Wl,-rpath," + lib, "-o", exe]) == 0
    finally:
        if old is None:
            del os.environ["R3_RECORD_DIR"]
        else:
            os.environ["R3_RECORD_DIR"] = old
    plain = str(tmp / "app-plain")
    subprocess.run([clangxx, obj, "-L", lib, "-lcudart", "-Wl,-rpath," + lib, "-o", plain], check=True)
    return record, exe, plain


def test_launcher_keeps_each_archs_device_ir_and_the_kernels_parameter_layout(recorded_build):
    record, exe, _ = recorded_build
    assert os.path.exists(exe)  # the build's own compile ran unchanged
    units = {}
    for d in os.listdir(os.path.join(record, "tus")):
        with open(os.path.join(record, "tus", d, "tu.json")) as f:
            units[d] = json.load(f)
    assert sorted(u["gpu_arch"] for u in units.values()) == ["sm_80", "sm_90"]
    for u in units.values():
        assert u["backend"] == "cuda" and u["triple"] == "nvptx64-nvidia-cuda"
        assert "--cuda-gpu-arch=" + u["gpu_arch"] in u["bitcode_args"] and "--cuda-device-only" in u["bitcode_args"]
        (k,) = u["kernels"]
        assert k["name"] == KERNEL and k["byval_sizes"] == [0, 16, 0, 0]
    assert backends.of_compile(next(iter(units.values()))["compile_command"][1:]) is backends.CUDA
    # the launch recorder's index: parameter bytes, then a unit folder per arch
    with open(os.path.join(record, "cuda", KERNEL)) as f:
        lines = f.read().splitlines()
    assert lines[0] == "4 16 8 8"
    assert [l.split()[0] for l in lines[1:]] == ["sm_80", "sm_90"]
    assert all(units[os.path.basename(l.split()[1])]["gpu_arch"] == l.split()[0] for l in lines[1:])


def test_hip_unit_device_ir_without_rocm(tmp_path, clang):
    """A HIP unit (clang-19, -nogpulib -nogpuinc: no ROCm here): its gfx90a module kept."""
    src = tmp_path / "k.hip"
    src.write_text(
        '#include "gpu.h"\n__global__ void scale(int n, float a, float *x) {\n'
        "  int i = BLOCK_X * BLOCK_DIM_X + THREAD_X;\n  if (i < n) x[i] *= a;\n}\n"
    )
    args = ["-nogpulib", "-nogpuinc", "-I", TREE, "--offload-arch=gfx90a", "-O2", "-c", str(src)]
    assert cuda.unit_kind(args) == "hip"
    assert cuda.record_device_units(clang, args, str(src), str(tmp_path / "rec")) is None
    (unit,) = os.listdir(tmp_path / "rec" / "tus")
    with open(tmp_path / "rec" / "tus" / unit / "tu.json") as f:
        tu = json.load(f)
    assert tu["backend"] == "hip" and tu["gpu_arch"] == "gfx90a" and tu["triple"] == "amdgcn-amd-amdhsa"
    assert [k["name"] for k in tu["kernels"]] == ["_Z5scaleifPf"]


def test_a_kernels_device_variables_are_named_for_the_recorder(tmp_path, clang):
    """A __device__ / __constant__ variable lives in the loaded module, not in the tracked
    allocations: the index file names each one a kernel uses, and r3cuda.c captures it by
    that name (cudaGetSymbolAddress, cudaMemcpyFromSymbol). A static one has no registered
    name: its kernel is recorded (its share counts) and replay refuses it with the reason."""
    src = tmp_path / "g.cu"
    src.write_text(
        '#include "gpu.h"\n__device__ int hits;\n__attribute__((constant)) float scale[4];\nstatic __device__ int seen;\n'
        "__global__ void count(int *x) {\n  if (x[THREAD_X] > 0) hits += 1;\n  x[THREAD_X] *= scale[0];\n}\n"
        "__global__ void mark(int *x) { seen = x[THREAD_X]; }\n"
        "__global__ void plain(int *x) { x[THREAD_X] += 1; }\n"
    )
    args = ["-nocudainc", "-nocudalib", "-I", TREE, "--cuda-gpu-arch=sm_80", "-O2", "-c", str(src)]
    rec = tmp_path / "rec"
    assert cuda.record_device_units(clang, args, str(src), str(rec)) is None
    (unit,) = os.listdir(rec / "tus")
    with open(rec / "tus" / unit / "tu.json") as f:
        kernels = {k["name"]: k for k in json.load(f)["kernels"]}
    assert kernels["_Z5countPi"]["unreplayable"] is None and kernels["_Z5plainPi"]["unreplayable"] is None
    assert kernels["_Z4markPi"]["unreplayable"].startswith("it uses the device global _ZL4seen, which has no name")
    lines = (rec / "cuda" / "_Z5countPi").read_text().splitlines()
    assert lines[1] == "sm_80 " + str(rec / "tus" / unit)
    assert sorted(lines[2:]) == ["global hits", "global scale"]
    assert len((rec / "cuda" / "_Z5plainPi").read_text().splitlines()) == 2  # no variable
    assert len((rec / "cuda" / "_Z4markPi").read_text().splitlines()) == 2  # refused: none to capture


@pytest.fixture(scope="module")
def r3cuda_real(tmp_path_factory, cuda_path, clang):
    """r3cuda.c compiled against the real cuda_runtime_api.h (-DR3CUDA_REAL_HEADERS), warnings
    as errors: each interposed definition checked against the runtime's own prototype."""
    obj = str(tmp_path_factory.mktemp("r3cuda") / "r3cuda.o")
    cmd = [clang, "-O2", "-fPIC", "-Wall", "-Wextra", "-Werror", "-DR3CUDA_REAL_HEADERS"]
    subprocess.run(cmd + ["-I", os.path.join(cuda_path, "include"), "-c", cuda.RUNTIME_SOURCE, "-o", obj], check=True)
    return obj


def _defined(path):
    out = subprocess.run(["nm", "-D" if path.endswith(".so") else "-g", "--defined-only", path], capture_output=True)
    return {l.split()[-1] for l in out.stdout.decode().splitlines() if l.strip()}


def test_r3cuda_builds_against_the_real_headers_and_interposes_libcudart(recorded_build, r3cuda_real, clang):
    interposed = {"cudaLaunchKernel", "cudaLaunchKernel_ptsz", "__cudaRegisterFunction", "cudaMalloc"}
    interposed |= {"cudaMallocManaged", "cudaFree"}
    assert interposed <= _defined(r3cuda_real)
    lib = cuda.preload_library(clang)  # the launcher's build: the ABI declared in r3cuda.c
    assert interposed <= _defined(lib)
    assert "libcudart" not in _ldd(lib)  # the real ones by dlsym(RTLD_NEXT)
    _, exe, plain = recorded_build
    # linked by the record launcher: r3cuda's definitions in the executable, libcudart's beside
    assert interposed <= _defined(exe) and "libcudart.so.12" in _ldd(exe)
    # linked without it: nothing of r3cuda's until preloaded
    assert not interposed & _defined(plain) and "libcudart.so.12" in _ldd(plain)
    for program, env in ((exe, {}), (plain, {"LD_PRELOAD": lib})):
        proc = subprocess.run(
            [program], capture_output=True, text=True, env=dict(os.environ, R3CUDA_VERBOSE="1", **env), timeout=60
        )
        # the module constructor's registration went through r3cuda, then on to libcudart
        assert "r3cuda: kernel %s" % KERNEL in proc.stderr
        # here cudaMalloc (interposed, then libcudart's) finds no device; on a GPU the saxpy ran
        assert proc.stdout.strip() in ("no device", "y[3] = 9")


def _ldd(path):
    return subprocess.run(["ldd", path], capture_output=True, text=True).stdout


WRITER = r"""
#include <stdint.h>
#include <stdio.h>
#include <string.h>
struct r3cuda_section { uint64_t dev, size; const unsigned char *pre, *post; };
struct r3cuda_global { const char *name; uint64_t dev, size; const unsigned char *pre, *post; };
struct r3cuda_capture {
  const char *kernel, *tu_dir, *arch; uint64_t instance, ns, stream; int pid, device;
  unsigned int grid[3], block[3]; uint64_t shared; int nparams; const uint32_t *sizes;
  const unsigned char *const *params; int nsections; const struct r3cuda_section *sections;
  int nglobals; const struct r3cuda_global *globals; const char *unreplayable;
};
int r3cuda_write_capture(const char *, const struct r3cuda_capture *);
int r3cuda_kernel_unit(const char *, const char *, const char *, char *, size_t, uint32_t *, int);
enum { N = 4096 };
static float x[N], y0[N], y1[N];
int main(int argc, char **argv) {
  char tu[1024]; uint32_t sizes[16];
  int np = r3cuda_kernel_unit(argv[1], argv[2], "sm_90", tu, sizeof tu, sizes, 16);
  if (np != 4) return 2;
  for (int i = 0; i < N; i++) { x[i] = i; y0[i] = i; y1[i] = 2.0f * x[i] + y0[i]; }
  int n = N; float scale[4] = {2.0f, 0, 0, 0};
  uint64_t xd = 0x7f3a00000000ull, yd = 0x7f3a00200000ull;  /* device addresses */
  const unsigned char *params[4] = {(void *)&n, (void *)scale, (void *)&xd, (void *)&yd};
  struct r3cuda_section s[2] = {{xd, sizeof x, (void *)x, (void *)x}, {yd, sizeof y0, (void *)y0, (void *)y1}};
  struct r3cuda_capture c = {argv[2], tu, "sm_90", 1, 12345, 0, 4242, 0, {8, 1, 1}, {128, 1, 1}, 0,
                             np, sizes, params, 2, s, 0, 0, 0};
  return r3cuda_write_capture(argv[1], &c) ? 3 : 0;
}
"""


@pytest.fixture
def cuda_capture(recorded_build, r3cuda_real, clang, tmp_path):
    """A workspace holding one cuda capture: written by r3cuda.c's own writer (built into a
    host program, no GPU), from the memory a saxpy launch would have left (y = 2x + y, computed
    on the host), for the units the record launcher kept; then ingested."""
    return _written(recorded_build[0], r3cuda_real, clang, tmp_path, WRITER)


def _written(record, r3cuda_real, clang, tmp_path, writer):
    """(workspace, capture): the capture ``writer`` (a C program calling r3cuda_write_capture)
    writes into a copy of ``record``, ingested."""
    c = tmp_path / "writer.c"
    c.write_text(writer)
    exe = str(tmp_path / "writer")
    subprocess.run([clang, "-O1", str(c), r3cuda_real, "-ldl", "-lpthread", "-o", exe], check=True)
    run = tmp_path / "run"
    subprocess.run(["cp", "-r", record, str(run)], check=True)
    assert subprocess.run([exe, str(run), KERNEL]).returncode == 0
    ws = Workspace(str(tmp_path / "ws"))
    (capture,) = ingest(str(run), ws)
    return ws, capture


def test_a_captured_device_variable_ingests_at_its_device_address(recorded_build, r3cuda_real, clang, tmp_path):
    """A device variable r3cuda.c captured (its bytes before and after, at the address
    cudaGetSymbolAddress gave) is a section of kind 2 and named in the capture's globals:
    replay writes it into the loaded module's own copy (cuModuleGetGlobal) and compares it."""
    from spack_r3.memimage import KIND_GLOBAL, read_regions, region_bytes

    hits = (
        '  int h0 = 7, h1 = 8;\n  struct r3cuda_global g = {"hits", 0x7f3a10000000ull, 4, (void *)&h0, (void *)&h1};\n'
    )
    writer = WRITER.replace("  struct r3cuda_capture c =", hits + "  struct r3cuda_capture c =")
    writer = writer.replace("2, s, 0, 0, 0};", "2, s, 1, &g, 0};")
    ws, capture = _written(recorded_build[0], r3cuda_real, clang, tmp_path, writer)
    assert capture.globals == [{"name": "hits", "addr": "0x7f3a10000000", "size": 4}]
    assert not capture.unreplayable
    d = ws.capture_dir(capture.id)
    for name, value in (("pre.bin", 7), ("post.bin", 8)):
        path = os.path.join(d, name)
        (g,) = [r for r in read_regions(path) if r.kind == KIND_GLOBAL]
        assert g.addr == 0x7F3A10000000 and region_bytes(path, g) == value.to_bytes(4, "little")


def test_a_cuda_capture_ingests_with_its_launch(cuda_capture):
    from spack_r3.device.cudareplay import argument_bytes, geometry

    ws, capture = cuda_capture
    assert [c.id for c in list_captures(ws)] == [capture.id]
    assert backends.of_capture(capture) is backends.CUDA
    launch = capture.launch
    assert launch["arch"] == "sm_90" and launch["grid"] == [8, 1, 1] and launch["block"] == 128
    assert capture.signature["byval"] == [0, 16, 0, 0]
    args = argument_bytes(capture)
    assert args[0] == (4096).to_bytes(4, "little") and args[2] == (0x7F3A00000000).to_bytes(8, "little")
    assert args[1][:4] == bytes.fromhex("00000040")  # 2.0f
    from spack_r3.data import Launch

    assert geometry(capture, Launch(num_teams=16, thread_limit=256)) == ((16, 1, 1), (256, 1, 1))
    # a kernel that is no grid-stride kernel keeps its 8 x 128 threads under another block
    assert geometry(capture, Launch(thread_limit=256), stride=False) == ((4, 1, 1), (256, 1, 1))


def test_recorded_allocations_map_as_whole_granules():
    """cudaMalloc packs small allocations into one 2 MiB granule: replay maps each granule
    that holds any once (the driver maps no less), joined where they touch."""
    from spack_r3.device.cudareplay import spans

    g = 2 << 20
    x, y, z = 0x7F3A00000000, 0x7F3A00004000, 0x7F3A00400000
    assert spans([(y, 16384), (x, 16384), (z, g + 1)], g) == [(x, x + g), (z, z + 2 * g)]
    assert spans([(x, g), (x + g, 1)], g) == [(x, x + 2 * g)]


def test_launch_geometry_in_the_space(cuda_capture):
    """The saxpy strides over its work (it reads gridDim): block and grid are searched, the
    block up to its __launch_bounds__(256)."""
    import llvmlite.binding as llvm

    from spack_r3.device import geometry

    ws, capture = cuda_capture
    with open(os.path.join(ws.capture_dir(capture.id), "module.bc"), "rb") as f:
        text = str(llvm.parse_bitcode(f.read()))
    assert geometry.grid_stride(text, KERNEL) and geometry.launch_bound(text, KERNEL) == 256
    params = {p.name: p for p in geometry.params(capture, text)}
    assert params["thread_limit"].choices == (None, 32, 64, 128, 256)  # None: as recorded
    assert params["num_teams"].choices == (None, 2, 4, 8, 16, 32)
    assert params["max_registers"].choices == (None, 32, 64, 128, 255)  # None: the compiler's choice


def test_r3_tunes_a_cuda_launchs_geometry_screened_before_any_gpu_time(cuda_capture):
    """The space r3 tune searches for a recorded CUDA launch has its block and grid beside the
    pipeline, and each candidate is screened on the arch it was recorded for (ptxas -v's
    figures, occupancy) without --gpu: one it cannot launch is rejected with the reason and
    never reaches a replay server."""
    from dataclasses import replace

    from spack_r3.data import COMPILE_ERROR, Launch
    from spack_r3.device import hook
    from spack_r3.search.bayes import Target
    from spack_r3.search.space import Space
    from spack_r3.search.tune import kernel_facts

    ws, capture = cuda_capture
    target = Target(KERNEL, [ws.capture_dir(capture.id)])
    space = Space(kernel_facts(target, cores=1))
    params = {p.name: p for p in space.params}
    assert params["thread_limit"].choices == (None, 32, 64, 128, 256)
    assert params["num_teams"].choices == (None, 2, 4, 8, 16, 32)
    assert params["max_registers"].choices == (None, 32, 64, 128, 255)
    # the host's settings are not offered: the code is the GPU's, compiled for its arch
    assert space.facts.retarget and "target" not in params  # (its "CPU" reads as behind this one's)
    folded = Space(replace(space.facts, specialize=(("none", ()), ("0:1024", ((0, 1024),)))))
    assert "specialize" not in {p.name for p in folded.params}
    assert "threads a block" in space.describe()
    # a study is resumed into the same geometry only (an offload region's follows the workers' CPUs)
    assert space.fingerprint() != Space(replace(space.facts, geometry=())).fingerprint()
    assert hook.attach([target], [capture], []) == []
    assert [g.name for g in target.screen.gpus] == ["sm_90"]
    base = space.defaults()
    assert base["thread_limit"] is None and target.screen(space.variant(base)) is None
    assert target.screen(space.variant(dict(base, thread_limit=256, num_teams=32))) is None
    # a register cap is the variant's launch setting, screened at its cap (ptxas -maxrregcount)
    capped = space.variant(dict(base, max_registers=32))
    assert capped.launch.max_registers == 32 and capped.launch.to_json()["max_registers"] == 32
    assert space.variant(base).launch.to_json() == Launch().to_json()  # no cap: written as before
    assert target.screen(capped) is None
    (verdict,) = target.screen.verdicts(capped)
    assert 0 < verdict.resources.registers <= 32
    ev = target.submit(None, space.variant(dict(base, thread_limit=512)))  # no server: nothing may run
    assert ev.status == COMPILE_ERROR
    assert ev.diagnostics == (
        "rejected before any run: %s: cannot launch on sm_90 at 512 threads: "
        "a block of 512 threads is over the kernel's launch bounds (256)" % KERNEL
    )


def test_screening_rejects_more_registers_than_an_sm_holds_at_a_block():
    """ptxas's registers a thread x the block's threads over the SM's register file: no SM can
    hold one block, whatever the kernel's launch bounds allow."""
    from spack_r3.device.occupancy import Geometry, Resources
    from spack_r3.device.screen import judge
    from spack_r3.device.targets import gpu_target

    res = Resources(KERNEL, registers=128)
    assert judge(KERNEL, gpu_target("sm_90"), res, Geometry(512)).ok  # 64K registers: exactly one block
    no = judge(KERNEL, gpu_target("sm_90"), res, Geometry(1024))
    assert not no.ok and no.reason == (
        "cannot launch on sm_90 at 1024 threads: 128 registers x 1024 threads need more than "
        "the 65536 registers of an SM"
    )


def test_a_block_over_the_launch_bounds_is_rejected_before_any_gpu_time(cuda_capture):
    """A candidate's block is screened on each GPU by ptxas -v's figures before it could run:
    512 threads a block cannot launch a kernel bounded to 256."""
    from spack_r3.data import Launch, Variant
    from spack_r3.device.cudareplay import screen_capture
    from spack_r3.device.targets import parse_targets

    ws, capture = cuda_capture
    gpus = parse_targets("sm_90")
    (ok,) = screen_capture(capture, ws.capture_dir(capture.id), gpus, Variant(launch=Launch(thread_limit=256)))
    assert ok.ok and ok.occupancy.launchable
    (no,) = screen_capture(capture, ws.capture_dir(capture.id), gpus, Variant(launch=Launch(thread_limit=512)))
    assert not no.ok and no.reason.startswith("cannot launch on sm_90 at 512 threads")


def test_a_cuda_capture_without_a_device_is_one_line_and_still_screened(cuda_capture, capsys):
    ws, capture = cuda_capture
    try:
        from spack_r3.device.cuda import driver

        driver()
        pytest.skip("a CUDA device is present: the refusal is for machines without one")
    except R3Error:
        pass
    with pytest.raises(R3Error) as err:
        engine.host_engine_runs(capture)
    assert str(err.value).startswith("no CUDA device: ") and "\n" not in str(err.value)
    assert cli.main(["--workspace", ws.root, "replay", capture.id]) != 0
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("r3 replay: error: no CUDA device: ")
    assert cli.main(["--workspace", ws.root, "retarget", "--gpu", "sm_80,sm_90", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["kernels"]
    assert row["kernel"] == KERNEL and row["capture"] == capture.id
    # ptxas -v's figures for each GPU at the recorded block of 128 threads, the kernel's
    # __launch_bounds__(256) read from its PTX (.maxntid)
    assert [v["target"] for v in row["verdicts"]] == ["sm_80", "sm_90"]
    for v in row["verdicts"]:
        assert v["ok"] and v["resources"]["registers"] > 0 and v["resources"]["max_threads"] == 256
        assert v["occupancy"]["launchable"]


@pytest.mark.gpu
def test_record_and_replay_on_a_cuda_device(recorded_build, clang, tmp_path):
    """On a CUDA GPU only: the application built by the record launcher records its saxpy launch
    (device memory at its device addresses), the capture ingests, and replay through the
    driver API maps it at those addresses, launches, verifies and times it."""
    from spack_r3.device.cuda import CudaUnavailable, driver
    from spack_r3.device.cudareplay import replay

    try:
        driver()
    except CudaUnavailable as err:
        pytest.skip(str(err))
    record, exe, _ = recorded_build  # r3cuda.o linked in by the record launcher
    env = dict(os.environ, R3_RECORD_DIR=record, R3_CAPTURE=KERNEL)
    proc = subprocess.run([exe], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and "y[3] = 9" in proc.stdout, proc.stderr
    from spack_r3.record.profiles import load_profiles

    stats, app_s = load_profiles(record)  # profile.<pid>.cuda.json: the launch counted and timed
    (s,) = [s for (_, name), s in stats.items() if name == KERNEL]
    assert s["calls"] == 1 and s["captured"] == 1 and 0 < s["total_ns"] < app_s * 1e9
    ws = Workspace(str(tmp_path / "ws"))
    (capture,) = ingest(record, ws)
    result = replay(capture, ws.capture_dir(capture.id))
    assert result.verified, result.mismatches
    assert len(result.times) == 5 and all(t > 0 for t in result.times)


def test_a_register_cap_is_in_the_ptx_the_driver_would_load(cuda_capture):
    """A candidate's register cap reaches the PTX a replay loads (.maxnreg, which the driver's
    JIT honours) as well as ptxas's figures."""
    from spack_r3.device.cudareplay import device_code
    from spack_r3.device.targets import parse_targets

    ws, capture = cuda_capture
    (sm90,) = parse_targets("sm_90")
    code = device_code(capture, ws.capture_dir(capture.id), sm90, max_registers=16)
    assert b".maxnreg 16" in code.code and b".maxntid 256" in code.code
    # ptxas accepts it (and goes no lower than its own floor: 18 for this kernel on sm_90,
    # measured, with -maxrregcount=16 as with .maxnreg 16)
    assert code.resources[KERNEL].registers > 0 and not code.resources[KERNEL].spills


def test_the_replay_servers_send_a_cuda_capture_to_the_cuda_worker(cuda_capture, tmp_path, capsys):
    """A replay server runs a capture's backend's worker: for a cuda capture
    device/cudaworker.py, whose children replay it through the driver API. Without a device
    its load and its candidates are one line each, as r3 replay's is; the kernel as built,
    which paired timings measure candidates against, still compiles for the recorded arch."""
    from spack_r3.data import Launch, Variant
    from spack_r3.device.cuda import driver
    from spack_r3.device.cudareplay import device_code
    from spack_r3.device.targets import parse_targets
    from spack_r3.compile.pipeline import as_built
    from spack_r3.replay.server import HOST_WORKER, ReplayServer

    try:
        driver()
        pytest.skip("a CUDA device is present: the refusal is for machines without one")
    except R3Error:
        pass
    ws, capture = cuda_capture
    directory = ws.capture_dir(capture.id)
    assert backends.worker_of(directory) == backends.CUDA.worker == "spack_r3.device.cudaworker"
    assert backends.worker_of(str(tmp_path)) == HOST_WORKER  # no capture.json: the host worker says what is wrong
    with ReplayServer(timeout=60) as server:
        with pytest.raises(R3Error) as err:
            server.load(directory)
        assert server.module == backends.CUDA.worker
        assert str(err.value).startswith("no CUDA device: ") and "\n" not in str(err.value)
        with pytest.raises(R3Error) as err:
            server.submit(directory, Variant(launch=Launch(thread_limit=64)), pairs=3)
        assert str(err.value).startswith("no CUDA device: ") and "\n" not in str(err.value)
    (sm90,) = parse_targets("sm_90")
    base = device_code(capture, directory, sm90, as_built(capture))
    assert base.resources[KERNEL].registers > 0 and b".entry " + KERNEL.encode() in base.code
    # r3 tune (the capture has no profile: --min-share 0) says why the kernel is not tuned
    assert cli.main(["--workspace", ws.root, "tune", "--budget", "2", "--workers", "1", "--min-share", "0"]) == 1
    (line,) = [l for l in capsys.readouterr().out.splitlines() if l.startswith("==> not tuned: ")]
    assert "saxpy" in line and ": no CUDA device: " in line


@pytest.mark.gpu
def test_r3_tune_evaluates_cuda_candidates_in_the_replay_servers(recorded_build, tmp_path):
    """On a CUDA GPU only: the recorded saxpy's candidates, through a replay server as r3 tune
    submits them: the kernel as built verified and timed with device events, a geometry of
    the space paired with it; then r3 tune itself on the workspace."""
    from spack_r3.data import OK, Launch, Variant
    from spack_r3.device.cuda import CudaUnavailable, driver
    from spack_r3.compile.pipeline import as_built
    from spack_r3.replay.server import ReplayServer

    try:
        driver()
    except CudaUnavailable as err:
        pytest.skip(str(err))
    record, exe, _ = recorded_build
    env = dict(os.environ, R3_RECORD_DIR=record, R3_CAPTURE=KERNEL)
    proc = subprocess.run([exe], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    ws = Workspace(str(tmp_path / "ws"))
    (capture,) = ingest(record, ws)
    directory = ws.capture_dir(capture.id)
    with ReplayServer(timeout=120) as server:
        server.load(directory)
        ev = server.submit(directory, Variant(pipeline=as_built(capture)), repeat=3)
        assert ev.status == OK and ev.verified, ev.diagnostics
        assert ev.time_median_s > 0 and ev.code
        ev = server.submit(directory, Variant(launch=Launch(thread_limit=256, num_teams=16)), pairs=4)
        assert ev.status == OK and ev.verified and ev.pairs == 4 and ev.speedup > 0, ev.diagnostics
    assert cli.main(["--workspace", ws.root, "tune", "--budget", "6", "--workers", "1"]) == 0


HEAVY = """#include "cuda_min.h"
__global__ void heavy(const float *x, float *y, int n) {
  float a[48];
#pragma unroll
  for (int k = 0; k < 48; k++) a[k] = x[__nvvm_read_ptx_sreg_tid_x() + k * n];
  float s = 0;
#pragma unroll
  for (int k = 0; k < 48; k++) s += a[k] * a[47 - k] * x[k];
  y[__nvvm_read_ptx_sreg_tid_x()] = s;
}
"""
HEAVY_KERNEL = "_Z5heavyPKfPfi"


def _cubin_registers(path):
    """The registers ptxas gave the cubin's one kernel: EIATTR_REGCOUNT (0x2f) in .nv.info,
    (symbol, count) after its header 04 2f 08 00."""
    with open(path, "rb") as f:
        data = f.read()
    at = data.index(b"\x04\x2f\x08\x00")
    return int.from_bytes(data[at + 8 : at + 12], "little")


def test_the_r3_build_gives_a_cuda_unit_its_planned_register_cap(cuda_path, clang, tmp_path, monkeypatch):
    """r3-apply compiles a planned CUDA unit with its kernel's register cap passed to ptxas
    (-Xcuda-ptxas --maxrregcount=N, which clang-19 accepts): 48 live floats take more than 32
    registers as built, 32 with the plan's cap; with a pipeline of r3's, the device-only
    compile's cubin is r3's, capped the same (test_cuda_apply.py: more of the +r3 build).
    (The device-only compile makes a cubin: clang's fatbinary step needs CUDA's fatbinary,
    which the wheels do not ship.)"""
    from spack_r3.data import Launch
    from spack_r3.emit import apply
    from spack_r3.emit.plan import Plan, PlannedKernel, PlannedUnit
    from spack_r3.compile.pipeline import parse

    src = tmp_path / "heavy.cu"
    src.write_text(HEAVY)
    clangxx = clang.replace("clang", "clang++", 1) if "clang++" not in clang else clang
    argv = [clangxx] + _flags(cuda_path, "sm_90") + ["--cuda-device-only", "-c", str(src), "-o"]
    subprocess.run(argv + [str(tmp_path / "built.cubin")], check=True)
    assert _cubin_registers(str(tmp_path / "built.cubin")) > 32

    def build(pipeline, name):
        kernel = PlannedKernel(HEAVY_KERNEL, parse(pipeline), Launch(max_registers=32))
        plan = tmp_path / (name + ".json")
        plan.write_text(json.dumps(Plan("x86_64", [PlannedUnit("heavy.cu", [kernel])], gpu="sm_90").to_json()))
        monkeypatch.setenv(apply.PLAN_ENV, str(plan))
        return apply.launch(argv + [str(tmp_path / (name + ".cubin"))])

    assert build("compiler=build", "capped") == 0
    assert _cubin_registers(str(tmp_path / "capped.cubin")) == 32
    assert build("O3", "r3") == 0
    assert _cubin_registers(str(tmp_path / "r3.cubin")) == 32


def test_a_device_kernels_output_is_checked_within_its_tolerance(cuda_capture):
    """A candidate's device memory is held to the recording byte for byte, or within the
    capture's (the user's) relative tolerance: differing bytes read as the floats the saxpy
    stores, the worst error against the tolerance, as the host engine checks a host kernel.
    (``checked`` reads the device through ``read``: here the bytes a launch would leave.)"""
    import llvmlite.binding as llvm
    import numpy as np

    from spack_r3.device.cudareplay import checked, fp_types

    ws, capture = cuda_capture
    with open(os.path.join(ws.capture_dir(capture.id), "module.bc"), "rb") as f:
        types = fp_types(str(llvm.parse_bitcode(f.read())))
    assert types == [np.float32]
    y = np.arange(1, 1025, dtype=np.float32)
    near = y.copy()
    near[7] *= np.float32(1 + 2**-20)  # one float off by about 1e-6, relative
    memory = {0x7F3A00200000: near.tobytes()}

    def read(addr, size):
        return memory[addr][:size]

    recorded = [(0x7F3A00200000, y.tobytes())]
    exact = checked(recorded, read, types)
    assert not exact.verified and 0 < exact.mismatched_bytes <= 4
    assert exact.detail.startswith("device memory at 0x7f3a00200000 (4096 bytes) differs; max relative error 9.5")
    assert checked(recorded, read, types, tolerance=1e-5).verified
    assert not checked(recorded, read, types, tolerance=1e-7).verified
    assert checked([(0x7F3A00200000, near.tobytes())], read, types).verified

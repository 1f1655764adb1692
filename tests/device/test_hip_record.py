"""Recording HIP kernels (backend ``hip``): r3hip.c, the launch recorder r3cuda.c shares
(runtime/gpurec.h) named for the HIP runtime, checked against ROCm's real headers and
interposed in a HIP application linked against the real libamdhip64 (Debian's
libamdhip64-dev, ROCm 5.2: headers and runtime, no GPU driver needed to load); a capture
written by r3hip.c's own writer ingested as a hip capture at its arch.

The application (trees/device/record_app.hip) is compiled by clang-19 without ROCm's device
libraries or headers (-nogpulib -nogpuinc: gpu.h), its host side alone with a placeholder
device image (-fcuda-include-gpubinary): clang's device link needs lld, which is not
installed. It never launches here (hipMalloc finds no device); nothing here ran on an AMD
GPU.
"""

import os
import subprocess

import pytest

from spack_r3 import backends, cli
from spack_r3.errors import R3Error
from spack_r3.record import cuda, launcher
from spack_r3.record.ingest import ingest
from spack_r3.workspace import Workspace
from conftest import TREES

TREE = os.path.join(TREES, "device")
KERNEL = "_Z5scaleifPf"  # scale(int, float, float *)
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


@pytest.fixture
def hip_capture(hip_build, r3hip_real, clang, tmp_path):
    """(workspace, capture): a capture written by r3hip.c's writer (built into a host program,
    no GPU) from the memory a scale launch would leave (x = 2x), ingested."""
    writer = tmp_path / "writer.c"
    writer.write_text(WRITER)
    exe = str(tmp_path / "writer")
    subprocess.run([clang, "-O1", str(writer), r3hip_real, "-ldl", "-lpthread", "-o", exe], check=True)
    run = tmp_path / "run"
    subprocess.run(["cp", "-r", hip_build[0], str(run)], check=True)
    assert subprocess.run([exe, str(run), KERNEL]).returncode == 0
    ws = Workspace(str(tmp_path / "ws"))
    (capture,) = ingest(str(run), ws)
    return ws, capture


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
    from spack_r3.replay.pipeline import as_built
    from spack_r3.replay.server import ReplayServer

    if _no_hip_device() is None:
        pytest.skip("a HIP device is present: the refusal is for machines without one")
    ws, capture = hip_capture
    directory = ws.capture_dir(capture.id)
    with pytest.raises(R3Error) as err:
        backends.host_engine_runs(capture)
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

"""Pointers to a device variable's recorded address, at CUDA/HIP replay (device/relocate.py).

Replay maps the recorded allocations at their recorded addresses, but a ``__device__``
variable lives in the module replay loads, where the driver puts it: a pointer to it kept in
device memory or passed as an argument is moved to the module's copy before the launch, and
read back as recorded when the memory is compared with post.bin.

The capture here is written by r3cuda.c's own writer (built into a host program, no GPU),
as test_cuda_record.py writes its captures; where the loaded module holds the variables is
given as a driver would give it (``cuModuleGetGlobal``). The replay itself on a GPU is the
``gpu`` test, which skips with "no CUDA device" here: nothing here is GPU-verified.
"""

import os
import subprocess

import numpy as np
import pytest

from spack_r3.device import tools
from spack_r3.device.cudareplay import Recording, checked
from spack_r3.device.relocate import Variable, relocate
from spack_r3.record import launcher
from spack_r3.record.ingest import ingest
from spack_r3.workspace import Workspace
from conftest import TREES
from test_cuda_record import WRITER, _flags, _written, r3cuda_real, recorded_build  # noqa: F401

TABLE, MIDDLE = 0x7F3A10000000, 0x7F3A10000100  # recorded: __device__ float table[8], float *middle
Y, LIST = 0x7F3A00200000, 0x7F3A00400000  # recorded allocations: the saxpy's y, a list of pointers
LOADED = {"table": (0x7F4B00000A00, 32), "middle": (0x7F4B00000B00, 8)}  # the replay module's copies

# The saxpy's x is the device variable table (x = table: argument 2), n = 8; beside y the
# application keeps a list of 10 words in device memory: pointers into table and middle,
# and words that are no such pointer (one past table's end, a misaligned copy of its
# address, a pointer into y, the double 1.0). The launch (as a kernel storing &table[1]
# would) leaves word 2 pointing at table + 4.
VARIABLES = r"""
  uint64_t td = 0x7f3a10000000ull, md = 0x7f3a10000100ull, ld = 0x7f3a00400000ull, one = 0x3ff0000000000000ull;
  float table[8];
  for (int i = 0; i < 8; i++) table[i] = i + 1;
  uint64_t middle = td + 16; /* __device__ float *middle = &table[4] */
  for (int i = 0; i < N; i++) { y0[i] = i; y1[i] = i < 8 ? 2.0f * table[i] + y0[i] : y0[i]; }
  uint64_t list0[10] = {td + 8, td + 32, 0, 0, 0, yd, td, one, md, 0}, list1[10];
  memcpy((char *)list0 + 28, &td, 8); /* misaligned: words 3 and 4 hold halves of it */
  memcpy(list1, list0, sizeof list0);
  list1[2] = td + 4;
  n = 8;
  xd = td;
  struct r3cuda_section s2[2] = {{yd, sizeof y0, (void *)y0, (void *)y1}, {ld, sizeof list0, (void *)list0, (void *)list1}};
  struct r3cuda_global g[2] = {{"table", td, sizeof table, (void *)table, (void *)table},
                               {"middle", md, 8, (void *)&middle, (void *)&middle}};
"""


def _writer():
    writer = WRITER.replace("  struct r3cuda_capture c =", VARIABLES + "  struct r3cuda_capture c =")
    return writer.replace("2, s, 0, 0, 0};", "2, s2, 2, g, 0};")


@pytest.fixture
def recording(recorded_build, r3cuda_real, clang, tmp_path):
    """(capture, cudareplay.Recording) of the saxpy's capture above, written and ingested."""
    ws, capture = _written(recorded_build[0], r3cuda_real, clang, tmp_path, _writer())
    return capture, Recording.read(capture, ws.capture_dir(capture.id))


def _words(data):
    return [int(w) for w in np.frombuffer(data, dtype="<u8")]


def test_pointers_into_a_device_variable_are_moved_to_the_loaded_modules_copy(recording):
    """The aligned words that hold an address inside a captured variable, in the allocations,
    in the variables and in the arguments, and only those, point at the module's copy
    (the same offset) in what replay restores and launches with; each one is named."""
    capture, rec = recording
    assert [(g["name"], int(g["addr"], 16), g["size"]) for g in capture.globals] == [
        ("table", TABLE, 32),
        ("middle", MIDDLE, 8),
    ]
    table, middle = LOADED["table"][0], LOADED["middle"][0]
    kernel = rec.kernel(None, LOADED)
    assert kernel.variables == [Variable("table", TABLE, 32, table), Variable("middle", MIDDLE, 8, middle)]
    assert kernel.launch.moved == [
        ("0x%x" % LIST, "table", 8),
        ("0x%x" % (LIST + 48), "table", 0),
        ("0x%x" % (LIST + 64), "middle", 0),
        ("0x%x" % middle, "table", 16),  # middle = &table[4], in the module's own copy of middle
        ("argument 2", "table", 0),  # x = table
    ]
    memory = dict(kernel.launch.memory)
    recorded = dict(rec.pre)
    assert memory[Y] == recorded[Y]  # floats: nothing there is such a word
    words, before = _words(memory[LIST]), _words(recorded[LIST])
    assert words[0] == table + 8 and words[6] == table and words[8] == middle
    # one past the end, the misaligned halves, the pointer into y, 1.0 and zeros: as recorded
    assert [words[i] for i in (1, 2, 3, 4, 5, 7, 9)] == [before[i] for i in (1, 2, 3, 4, 5, 7, 9)]
    assert before[1] == TABLE + 32 and before[5] == Y
    assert _words(memory[middle]) == [table + 16]  # the variable's recorded bytes, moved
    assert memory[table] == rec.variables[0][2]  # table's floats, written into the module's copy
    recorded_args = rec.arguments
    assert kernel.launch.arguments[2] == table.to_bytes(8, "little")
    assert [kernel.launch.arguments[i] for i in (0, 1, 3)] == [recorded_args[i] for i in (0, 1, 3)]
    assert kernel.launch.note() == (
        "relocated 5 pointer(s) into device variables to the loaded module's copies: "
        "0x7f3a00400000 -> table+8, 0x7f3a00400030 -> table+0, 0x7f3a00400040 -> middle+0, "
        "0x7f4b00000b00 -> table+16, argument 2 -> table+0"
    )
    # another module (the kernel as built, paired with a candidate) holds copies of its own
    other = rec.kernel(None, {"table": (0x7F4C00000000, 32), "middle": (0x7F4C00000100, 8)})
    assert _words(dict(other.launch.memory)[LIST])[0] == 0x7F4C00000008


def test_the_comparison_reads_moved_pointers_back_as_recorded(recording):
    """After the launch the device holds the module's addresses where the recording holds
    the recorded ones: read back through the relocation they compare equal, byte for byte
    (a pointer the kernel stored into the module's copy too); a pointer at another offset
    still differs."""
    _, rec = recording
    kernel = rec.kernel(None, LOADED)
    table = LOADED["table"][0]
    # the device after a saxpy launch with x = the module's table: y = 2 x + y on the first 8
    device = dict(kernel.launch.memory)
    x = np.frombuffer(device[table], dtype=np.float32)
    y = np.frombuffer(device[Y], dtype=np.float32).copy()
    y[:8] = 2.0 * x + y[:8]
    device[Y] = y.tobytes()
    stored = bytearray(device[LIST])
    stored[16:24] = (table + 4).to_bytes(8, "little")  # the kernel's &table[1]
    device[LIST] = bytes(stored)

    def read(addr, size):
        return device[addr][:size]

    expected = rec.expected(kernel)
    types = [np.float32]  # what the saxpy stores (cudareplay.fp_types of its module)
    assert checked(expected, rec.read_back(read, kernel), types).verified
    plain = checked(expected, read, types)  # compared without reading back: the moved words differ
    assert not plain.verified and plain.mismatched_bytes > 0
    off = bytearray(device[LIST])
    off[0:8] = (table + 12).to_bytes(8, "little")  # table + 12 where the recording has table + 8
    device[LIST] = bytes(off)
    wrong = checked(expected, rec.read_back(read, kernel), types)
    assert not wrong.verified and wrong.detail.startswith("device memory at 0x7f3a00400000 (80 bytes) differs")


def test_a_data_word_equal_to_a_variables_address_is_moved_too():
    """The false positive the rule admits: a 64-bit integer in device data that equals an
    address inside a captured variable is taken for a pointer and moved (the bytes cannot
    say otherwise; the diagnostics name it). Where no variable is captured nothing moves."""
    table = Variable("table", 0x7F3A10000000, 32, 0x7F4B00000A00)
    counters = np.array([5, 0x7F3A10000010, 7], dtype="<u8").tobytes()
    moved, count, where = relocate(counters, 0x1000, [table])
    assert _words(moved) == [5, 0x7F4B00000A10, 7] and count == 1
    assert [(at, v.name, k) for at, v, k in where] == [(8, "table", 16)]
    assert relocate(counters, 0x1000, []) == (counters, 0, [])


APP = os.path.join(TREES, "device", "varptr_app.cu")
GATHER = "_Z6gatherPKPKfS0_Pfi"  # gather(const float *const *, const float *, float *, int)


def _device_arch():
    """The CUDA device's arch (sm_XY) where one is, else sm_90 (the build is checked anyway)."""
    from spack_r3.device.cuda import CudaDevice, CudaUnavailable

    try:
        with CudaDevice(0) as dev:
            return dev.arch
    except CudaUnavailable:
        return "sm_90"


@pytest.fixture(scope="module")
def varptr_build(tmp_path_factory, cuda_path, clang):
    """varptr_app.cu built through the record launcher (R3_RECORD_DIR set) for the device's
    arch, its cubin from ptxas embedded (as test_cuda_record.py builds record_app.cu) and
    linked against the wheel's libcudart; (record dir, executable)."""
    tmp = tmp_path_factory.mktemp("varptr")
    arch, record = _device_arch(), str(tmp / "record")
    clangxx = clang.replace("clang", "clang++", 1) if "clang++" not in clang else clang
    ptx, cubin, obj, exe = (str(tmp / n) for n in ("app.ptx", "app.cubin", "app.o", "app"))
    subprocess.run([clangxx] + _flags(cuda_path, arch) + ["--cuda-device-only", "-S", APP, "-o", ptx], check=True)
    subprocess.run([tools.find_ptxas(), "-arch=" + arch, ptx, "-o", cubin], check=True)
    lib = os.path.join(cuda_path, "lib64")
    old = os.environ.get("R3_RECORD_DIR")
    os.environ["R3_RECORD_DIR"] = record
    try:
        argv = [clangxx] + _flags(cuda_path, arch)
        argv += ["--cuda-host-only", "-Xclang", "-fcuda-include-gpubinary", "-Xclang", cubin, "-c", APP, "-o", obj]
        assert launcher.launch(argv) == 0
        assert launcher.launch([clangxx, obj, "-L", lib, "-lcudart", "-Wl,-rpath," + lib, "-o", exe]) == 0
    finally:
        if old is None:
            del os.environ["R3_RECORD_DIR"]
        else:
            os.environ["R3_RECORD_DIR"] = old
    return record, exe, arch


def test_the_recorder_is_told_to_capture_the_table_the_kernel_reads(varptr_build):
    """The kernel reads the table by name as well as through the pointers: the record
    launcher's index names it, so r3cuda.c captures it and replay can move the pointers (a
    variable a kernel reaches only through pointers is not captured, and those stay)."""
    record, exe, arch = varptr_build
    with open(os.path.join(record, "cuda", GATHER)) as f:
        lines = f.read().splitlines()
    assert lines[0] == "8 8 8 4" and lines[1].split()[0] == arch and lines[2:] == ["global table"]
    proc = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() in ("no device", "y[0] = 10")


@pytest.mark.gpu
def test_record_and_replay_pointers_to_a_device_variable_on_a_cuda_device(varptr_build, tmp_path):
    """On a CUDA GPU only: the gather's launch recorded (the table at the address
    cudaGetSymbolAddress gave, eight pointers to it in device memory, one as an argument)
    and replayed through the driver API: the nine pointers moved to the replay module's
    table, and the output verified against the recording."""
    from spack_r3.device.cuda import CudaUnavailable, driver
    from spack_r3.device.cudareplay import replay

    try:
        driver()
    except CudaUnavailable as err:
        pytest.skip(str(err))
    record, exe, _ = varptr_build
    env = dict(os.environ, R3_RECORD_DIR=record, R3_CAPTURE=GATHER)
    proc = subprocess.run([exe], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and "y[0] = 10" in proc.stdout, proc.stderr
    ws = Workspace(str(tmp_path / "ws"))
    (capture,) = ingest(record, ws)
    assert [g["name"] for g in capture.globals] == ["table"]
    result = replay(capture, ws.capture_dir(capture.id))
    assert result.verified, result.mismatches
    # from[0] = &table[7] first; the argument (direct = table) is the ninth, past the 8 shown
    assert result.relocations.startswith("relocated 9 pointer(s) into device variables"), result.relocations
    assert "-> table+28, " in result.relocations and result.relocations.endswith(" and 1 more")

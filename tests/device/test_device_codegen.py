"""GPU targets without a GPU: a unit's device code for NVIDIA and AMD GPUs, checked by
the vendors' own tools (ptxas -v for PTX, the AMDGPU code object's metadata note), for
every pipeline the search space can produce; candidates that spill or cannot launch are
rejected with the reason; occupancy against hand-computed values; r3 retarget's table."""

import os

import pytest

from conftest import REPO_ROOT
from spack_r3 import cli
from spack_r3.device import tools
from spack_r3.device.codegen import DeviceCode, generate_many
from spack_r3.device.occupancy import Geometry, Resources, occupancy
from spack_r3.device.screen import DeviceUnit, screen
from spack_r3.device.targets import gpu_target, parse_targets, variant_key
from spack_r3.emit.plan import Plan
from spack_r3.errors import R3Error
from spack_r3.compile.pipeline import format_spec, parse
from spack_r3.compile.stages import polly_available
from spack_r3.search.space import KernelFacts, Space

TREE = os.path.join(REPO_ROOT, "tests", "trees", "device")
NO_HEADERS = ("clang", "-nocudainc", "-O2", "-c")  # the kernels spell CUDA through gpu.h
GPUS = parse_targets("sm_80,sm_90,gfx90a,gfx942")


@pytest.fixture(scope="module")
def ptxas():
    """ptxas from the nvidia-cuda-nvcc-cu12 wheel (setup installs it). Under
    R3_REQUIRE_SPACK=1 (CI) a missing one fails instead of skipping."""
    try:
        return tools.find_ptxas()
    except R3Error as err:
        if os.environ.get("R3_REQUIRE_SPACK") == "1":
            pytest.fail("%s and R3_REQUIRE_SPACK=1" % err)
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def cuda_unit():
    return DeviceUnit(os.path.join(TREE, "kernels.cu"), NO_HEADERS)


def by_kernel(verdicts, target):
    return {v.kernel: v for v in verdicts if v.target == target}


def test_cuda_kernels_on_sm80_and_sm90_through_ptxas(ptxas, cuda_unit):
    verdicts = screen(cuda_unit, parse("O3"), Geometry(256), parse_targets("sm_80,sm_90"))
    for target in ("sm_80", "sm_90"):
        found = by_kernel(verdicts, target)
        assert set(found) == {"_Z5saxpyifPKfPf", "_Z7stenciliPKfPf", "_Z7momentsiPKfPf"}
        stencil = found["_Z7stenciliPKfPf"]
        assert stencil.ok, stencil.reason
        assert stencil.resources.shared == 258 * 4  # its __shared__ tile, as ptxas counts it
        assert stencil.resources.max_threads == 256  # __launch_bounds__(256) -> .maxntid
        for v in found.values():
            assert v.ok and 0 < v.resources.registers <= 255 and not v.resources.spills
        # 64 live accumulators: many more registers than the saxpy
        assert found["_Z7momentsiPKfPf"].resources.registers > 2 * found["_Z5saxpyifPKfPf"].resources.registers


def test_openmp_target_region_on_nvidia_and_amd(ptxas):
    unit = DeviceUnit(os.path.join(TREE, "offload.c"), ("clang", "-fopenmp", "-O2", "-c"))
    verdicts = screen(unit, parse("O3"), Geometry(), GPUS, kernel="saxpy")
    assert [v.target for v in verdicts] == [t.name for t in GPUS]
    for v in verdicts:
        assert v.ok, v.reason
        assert v.kernel.startswith("__omp_offloading_") and v.kernel.endswith("_saxpy_l3")
        # the device runtime is linked in: its calls are resolved, no worst-case stack
        assert 0 < v.resources.registers < 64 and not v.resources.dynamic_stack and not v.resources.spills
    amd = [v for v in verdicts if v.target.startswith("gfx")]
    assert all(v.resources.sgprs > 0 and v.resources.wave_size == 64 for v in amd)
    # the region's default thread limit (256 on AMDGPU) is its launch bound in the metadata
    assert all(v.resources.max_threads == 256 for v in amd)


def test_amdgpu_code_object_metadata(cuda_unit):
    verdicts = screen(cuda_unit, parse("O3"), Geometry(256), parse_targets("gfx90a,gfx942"))
    for target in ("gfx90a", "gfx942"):
        found = by_kernel(verdicts, target)
        stencil = found["_Z7stenciliPKfPf"]
        assert stencil.ok and stencil.resources.shared == 258 * 4  # LDS of its tile
        assert stencil.resources.max_threads == 256  # __launch_bounds__(256): max_flat_workgroup_size
        for v in found.values():
            r = v.resources
            assert v.ok and r.registers > 0 and r.sgprs > 0 and r.wave_size == 64 and r.stack == 0


def space_pipelines(facts):
    """Pipelines covering every value of every setting of the space (each alone, the others
    at the baseline's), without repeats."""
    space = Space(facts)
    specs = {}
    for param in space.params:
        change = {param.name: None}
        activate = {
            "polly_tile": {"polly": True},
            "polly_matmul": {"polly": True},
            "polly_vec": {"polly": True},
            "pass0": {"passes": 1},
            "pass1": {"passes": 2},
            "pass2": {"passes": 3},
        }.get(param.name, {})
        for value in param.values():
            change = dict(activate, **{param.name: value})
            values = space._values(change)
            if values.get(param.name) != value:
                continue  # not active at the baseline
            p = space.variant(values).pipeline
            specs[format_spec(p)] = p
    return list(specs.values())


def test_every_pipeline_of_the_space_generates_code_for_each_target(ptxas):
    facts = KernelFacts("_Z5saxpyifPKfPf", tolerance=1e-3, polly=polly_available())
    pipelines = space_pipelines(facts)
    names = {p.name for p in Space(facts).params}
    assert {"opt", "inline", "codegen", "noalias", "pass0", "fast_math", "fma"} <= names
    assert len(pipelines) > 40
    unit = DeviceUnit(os.path.join(TREE, "saxpy.cu"), NO_HEADERS)
    for target in GPUS:
        codes = generate_many(unit.ir(target), pipelines)
        for p, code in zip(pipelines, codes):
            assert isinstance(code, DeviceCode), "%s on %s: %s" % (format_spec(p), target, code)
            r = code.resources["_Z5saxpyifPKfPf"]
            assert r.registers > 0 and not r.spills, format_spec(p)


def test_a_kernel_that_spills_is_rejected_with_the_reason(ptxas, cuda_unit):
    capped = screen(cuda_unit, parse("O3"), Geometry(256, max_registers=32), GPUS, kernel="moments")
    assert len(capped) == len(GPUS)
    for v in capped:
        assert not v.ok and v.resources.spills
        assert v.reason.startswith("spills on %s with at most 32 registers" % v.target)
    free = screen(cuda_unit, parse("O3"), Geometry(256), GPUS, kernel="moments")
    assert all(v.ok for v in free)


def test_a_geometry_over_the_launch_bounds_cannot_launch(ptxas, cuda_unit):
    verdicts = screen(cuda_unit, parse("O3"), Geometry(512), parse_targets("sm_80,gfx942"), kernel="stencil")
    assert [v.target for v in verdicts] == ["sm_80", "gfx942"]
    for v in verdicts:
        assert not v.ok
        assert v.reason == (
            "cannot launch on %s at 512 threads: a block of 512 threads is over the kernel's "
            "launch bounds (256)" % v.target
        )


def test_occupancy_matches_hand_computed_values():
    sm80, sm86, gfx942, gfx1100 = (gpu_target(n) for n in ("sm_80", "sm_86", "gfx942", "gfx1100"))
    # sm_80, 76 registers, 256 threads: 76*32 = 2432 -> 2560 a warp (unit 256); 65536 // 2560
    # = 25 warps -> 3 blocks of 8 warps = 24 of 64 warps
    o = occupancy(Resources("k", registers=76), sm80, Geometry(256))
    assert (o.blocks, o.warps, o.max_warps, o.limiter, o.fraction) == (3, 24, 64, "registers", 0.375)
    # sm_86 holds 48 warps: the same 3 blocks are half of it
    assert occupancy(Resources("k", registers=76), sm86, Geometry(256)).fraction == 0.5
    # sm_86, 48 KiB dynamic + 1032 B static shared + 1 KiB reserved = 51208 -> 51328 (unit
    # 128); 100 KiB // 51328 = 1 block of 8 warps
    o = occupancy(Resources("k", registers=16, shared=1032), sm86, Geometry(256, dynamic_shared=48 * 1024))
    assert (o.blocks, o.warps, o.limiter) == (1, 8, "shared")
    # 32 registers, 256 threads on sm_80: 8 blocks by registers (1024 a warp: 64 warps), 64 of 64
    assert occupancy(Resources("k", registers=32), sm80, Geometry(256)).fraction == 1.0
    # 255 registers x 1024 threads: 8192 a warp x 32 warps > 65536
    o = occupancy(Resources("k", registers=255), sm80, Geometry(1024))
    assert not o.launchable and "registers of an SM" in o.reason
    # gfx942, 70 VGPRs -> 72 (unit 8): 512 // 72 = 7 waves a SIMD, 28 a CU; 256 threads = 4
    # waves a workgroup -> 7 workgroups, 28 of 32 waves
    o = occupancy(Resources("k", registers=70, sgprs=20, wave_size=64), gfx942, Geometry(256))
    assert (o.blocks, o.warps, o.max_warps, o.limiter, o.fraction) == (7, 28, 32, "registers", 0.875)
    # gfx942, 100 SGPRs -> 112 (unit 16): 800 // 112 = 7 waves a SIMD, the same 28
    assert occupancy(Resources("k", registers=8, sgprs=100), gfx942, Geometry(256)).limiter == "sgprs"
    # gfx1100 (wave32, 2 SIMDs, 1536 VGPRs): 93 -> 96 (unit 24), 16 waves a SIMD, 32 a CU;
    # 256 threads = 8 waves -> 4 workgroups, full
    o = occupancy(Resources("k", registers=93, wave_size=32), gfx1100, Geometry(256))
    assert (o.blocks, o.warps, o.max_warps, o.fraction) == (4, 32, 32, 1.0)
    # LDS: 40 KiB a workgroup, 64 KiB a CU -> 1 workgroup of 4 waves: 4 of 32
    o = occupancy(Resources("k", registers=8, shared=40 * 1024), gfx942, Geometry(256))
    assert (o.blocks, o.warps, o.limiter) == (1, 4, "shared")


def test_gpu_targets_key_spack_variants():
    assert [t.spack_variant for t in parse_targets("sm_80,90,gfx942")] == [
        "cuda_arch=80",
        "cuda_arch=90",
        "amdgpu_target=gfx942",
    ]
    assert variant_key("zen3", gpu_target("sm_90")) == "target=zen3 cuda_arch=90"
    plan = Plan("zen3", gpu="gfx942")
    assert plan.spec_keys() == "target=zen3 amdgpu_target=gfx942"
    assert Plan.from_json(plan.to_json()).gpu == "gfx942"
    host = Plan("zen3")
    assert "gpu" not in host.to_json() and host.build_digest() != plan.build_digest()
    with pytest.raises(R3Error, match="unknown GPU target 'sm_100'"):
        parse_targets("sm_80,sm_100")


def test_retarget_source_prints_the_table(ptxas, capsys):
    rc = cli.main(
        [
            "retarget",
            "--source",
            os.path.join(TREE, "kernels.cu"),
            "--compile=-nocudainc",
            "--gpu",
            "sm_90,gfx942",
            "--max-registers",
            "32",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "kernel",
        "gpu",
        "regs",
        "spill",
        "st/ld",
        "stack",
        "shared",
        "occupancy",
        "limit",
        "verdict",
    ]
    moments = [l for l in lines if l.startswith("moments(int") and " sm_90 " in l]
    assert len(moments) == 1 and "tune again: spills on sm_90 with at most 32 registers" in moments[0]
    assert any(l.startswith("stencil(int") and " gfx942 " in l and l.rstrip().endswith(" ok") for l in lines)


def test_unknown_gpu_is_one_line_exit_2(capsys):
    assert cli.main(["retarget", "--source", os.path.join(TREE, "saxpy.cu"), "--gpu", "sm_80,gfx9000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "r3 retarget: error: unknown GPU target 'gfx9000'; known: sm_70, sm_75, sm_80, sm_86, sm_89, "
        "sm_90, gfx90a, gfx942, gfx1100"
    ]
    assert cli.main(["tune", "--gpu", "sm_80,,"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def offload_ws(tmp_path_factory):
    """heat-offload recorded on libomptarget's host plugin: captures of OpenMP target regions."""
    import subprocess

    libdir = subprocess.run(["llvm-config-19", "--libdir"], capture_output=True, text=True).stdout.strip()
    if not os.path.exists(os.path.join(libdir, "libomptarget.so")):
        pytest.skip("libomptarget (its host plugin) is not installed")
    ws = str(tmp_path_factory.mktemp("ws"))
    demo = os.path.join(REPO_ROOT, "repos", "r3", "sources", "heat-offload")
    assert (
        cli.main(["--workspace", ws, "record", "--source", demo, "--run", "LD_LIBRARY_PATH=%s ./heat 64 20" % libdir])
        == 0
    )
    return ws


def test_retarget_a_recorded_offload_workspace(offload_ws, ptxas, capsys):
    """An offload application recorded on the host plugin, reported for GPUs it never ran
    on: its regions compiled again from the captures' sources and compile commands."""
    import json

    capsys.readouterr()
    assert cli.main(["--workspace", offload_ws, "retarget", "--gpu", "sm_90,gfx942", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    kernels = {k["kernel"]: k for k in report["kernels"]}
    step = next(k for k in kernels if "jacobi_step" in k)
    assert report["host_kernels"] == []
    for k in kernels.values():
        assert [v["target"] for v in k["verdicts"]] == ["sm_90", "gfx942"]
        for v in k["verdicts"]:
            assert v["ok"], v["reason"]
            assert v["resources"]["registers"] > 0 and v["occupancy"]["launchable"]
    assert not kernels[step]["tuned"]


def test_tune_gpu_screens_a_device_kernels_candidates(offload_ws, ptxas):
    """What r3 tune --gpu hangs on each device kernel's search target: a candidate whose
    geometry no GPU named can launch is a compile error before any run (no server is
    asked: None here), one that fits is left to the replay."""
    from spack_r3.capture import list_captures
    from spack_r3.data import COMPILE_ERROR, Launch, Variant
    from spack_r3.device import hook
    from spack_r3.search.tune import plan_targets
    from spack_r3.workspace import Workspace

    ws = Workspace(offload_ws)
    captures = list_captures(ws)
    plan = plan_targets(ws, captures, min_share=0.0)
    assert hook.attach(plan.targets, captures, parse_targets("sm_90,gfx942")) == []
    step = next(t for t in plan.targets if "jacobi_step" in t.kernel)
    ev = step.submit(None, Variant(launch=Launch(thread_limit=2048)))
    assert ev.status == COMPILE_ERROR
    assert ev.diagnostics == (
        "rejected before any run: %s: cannot launch on sm_90 at 2048 threads: a block of 2048 "
        "threads is over sm_90 (1024)" % step.kernel
    )
    assert step.screen(Variant(launch=Launch(thread_limit=1024))) is None  # compiled with thread_limit(1024)
    assert step.screen(Variant(pipeline=parse("O2,unroll=0,noalias=1"))) is None
    # the report's table of a winner on each GPU
    from spack_r3.search.results import KernelResult

    won = KernelResult(
        step.kernel,
        step.captures,
        0.5,
        1e-5,
        1e-5,
        1.0,
        1.0,
        1.0,
        3,
        {},
        False,
        True,
        Variant(pipeline=parse("O2,unroll=0,noalias=1")),
    )
    text = hook.winners_table(plan.targets, [won]).splitlines()
    assert text[0] == "the winners on the GPUs (--gpu; static figures, not measured):"
    assert [l.split()[1] for l in text[3:]] == ["sm_90", "gfx942"] and all(l.endswith(" ok") for l in text[3:])


def test_an_openmp_thread_limit_is_compiled_in_as_the_launch_bound(ptxas):
    unit = DeviceUnit(os.path.join(TREE, "offload.c"), ("clang", "-fopenmp", "-O2", "-c"))
    default = screen(unit, parse("O3"), Geometry(), parse_targets("sm_80,gfx942"))
    assert [v.resources.max_threads for v in default] == [128, 256]  # clang-19's defaults
    wide = screen(unit, parse("O3"), Geometry(1024), parse_targets("sm_80,gfx942"))
    assert all(v.ok and v.resources.max_threads == 1024 for v in wide)


@pytest.mark.gpu
def test_cuda_replay_at_fixed_device_addresses(ptxas):
    """On a CUDA GPU only (skipped with "no CUDA device" elsewhere): the saxpy's PTX from
    this package, loaded through the driver API; x and y mapped at device addresses chosen
    before (as a recording's would be), the kernel launched and timed by device events,
    y read back and compared."""
    import ctypes

    import numpy as np

    from spack_r3.device.codegen import generate
    from spack_r3.device.cuda import POINTER, CudaDevice, CudaUnavailable
    from spack_r3.device.targets import LIMITS

    try:
        dev = CudaDevice()
    except CudaUnavailable as err:
        pytest.skip(str(err))
    with dev:
        target = gpu_target(dev.arch if dev.arch in LIMITS else "sm_90")  # newer GPUs JIT sm_90's PTX
        code = generate(DeviceUnit(os.path.join(TREE, "saxpy.cu"), NO_HEADERS).ir(target), parse("O3"))
        n = 1 << 20
        x = np.arange(n, dtype=np.float32)
        y = np.full(n, 3.0, dtype=np.float32)
        addr_x = dev.map_at(dev.free_address(x.nbytes), x.nbytes)
        addr_y = dev.map_at(dev.free_address(y.nbytes), y.nbytes)
        dev.write(addr_x, x.tobytes())
        dev.write(addr_y, y.tobytes())
        fn = dev.function(code.code, "_Z5saxpyifPKfPf")
        args = [(n, ctypes.c_int), (2.0, ctypes.c_float), (addr_x, POINTER), (addr_y, POINTER)]
        times = dev.time(fn, (n // 256, 1, 1), (256, 1, 1), args, repeat=1)
        out = np.frombuffer(dev.read(addr_y, y.nbytes), dtype=np.float32)
        assert np.allclose(out, 2.0 * x + y, rtol=1e-6)
        assert times[0] > 0


def test_tune_gpu_reports_the_winners_figures_per_gpu(offload_ws, ptxas, capsys):
    """r3 tune --gpu on an offload capture: the winner's registers and occupancy on each GPU
    named, in the JSON and in the report file (static figures: no GPU ran)."""
    import json

    capsys.readouterr()
    argv = [
        "--workspace",
        offload_ws,
        "tune",
        "--kernel",
        "jacobi_step_l8",
        "--gpu",
        "sm_90,gfx942",
        "--budget",
        2,
        "--pairs",
        1,
        "--confirm-pairs",
        1,
        "--confirm-rounds",
        1,
        "--mutator",
        "none",
        "--seed",
        1,
        "--json",
    ]
    assert cli.main([str(a) for a in argv]) == 0
    out = json.loads(capsys.readouterr().out)
    [(kernel, verdicts)] = out["gpus"].items()
    assert kernel.endswith("_jacobi_step_l8") and [v["target"] for v in verdicts] == ["sm_90", "gfx942"]
    assert all(v["resources"]["registers"] > 0 for v in verdicts)
    report = open(out["report"]["text"]).read()
    assert "the winners on the GPUs (--gpu; static figures, not measured):" in report
    table = report.split("static figures, not measured):\n", 1)[1].splitlines()
    rows = [l.split() for l in table[2:] if l.strip()]  # under the header and its rule
    assert [r[1] for r in rows] == ["sm_90", "gfx942"] and all(r[0] in kernel for r in rows)

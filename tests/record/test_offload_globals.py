"""OpenMP offload regions that use `declare target` globals and firstprivate aggregates,
recorded and replayed for real on libomptarget's host plugin (as tests/record/test_offload.py):
the globals' device copies are captured at their device addresses, a `declare target link`
variable through its reference pointer and the mapped copy it points at, a firstprivate
struct's bytes are passed to the replayed region as a copy."""

import json
import os

import pytest

from spack_r3.data import OK
from spack_r3.memimage import KIND_GLOBAL, read_regions, region_bytes
from r3cli import flags, r3
from test_offload import captures, offload_run  # noqa: F401 (a fixture)

N = 256
PROGRAM = (
    r"""
#include <stdio.h>
#include <stdlib.h>

#define N %d
#pragma omp declare target
double table[N];
static int launches;
#pragma omp end declare target

/* a `declare target link` variable: the device reaches the copy its map made through a
   reference pointer (big_decl_tgt_ref_ptr) */
double big[N];
#pragma omp declare target link(big)

typedef struct { int n; double scale; double shift; } params_t;

void fill(void)
{
#pragma omp target teams distribute parallel for
    for (int i = 0; i < N; i++) table[i] = i * 0.5;
}

/* reads and writes the global, each iteration its own element (an element another
   iteration also wrote would make out depend on the threads' order); its parameters
   come as a firstprivate struct */
void use(params_t p, double *out)
{
#pragma omp target teams distribute parallel for map(from: out[0:p.n]) firstprivate(p)
    for (int i = 0; i < p.n; i++) {
        out[i] = table[i %% N] * p.scale + p.shift;
#pragma omp atomic
        table[i %% N] += 1.0;
    }
}

void scale(double s)
{
#pragma omp target teams distribute parallel for map(tofrom: big)
    for (int i = 0; i < N; i++) big[i] = big[i] * s + i;
}

/* a static device global: no offload entry, found in the host plugin's device image */
void count(void)
{
#pragma omp target
    launches += 1;
}

int main(void)
{
    params_t p = {N, 2.0, 1.0};
    double *out = calloc(p.n, sizeof(double)), sum = 0;
    for (int i = 0; i < N; i++) big[i] = 1.0;
    fill();
    use(p, out);
    count();
    count();
    scale(0.5);
    for (int i = 0; i < p.n; i++) sum += out[i] + big[i];
    int seen = 0;
#pragma omp target map(from: seen)
    seen = launches;
    printf("sum %%.1f launches %%d\n", sum, seen);
    return 0;
}
"""
    % N
)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, offload_run):  # noqa: F811
    src = tmp_path_factory.mktemp("src")
    (src / "globals.c").write_text(PROGRAM)
    (src / "Makefile").write_text(
        "globals: globals.c\n\t$(CC) -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -o globals globals.c\n"
    )
    ws = str(tmp_path_factory.mktemp("ws"))
    assert r3("--workspace", ws, "record", "--source", src, "--run", offload_run + "./globals") == 0
    return ws


def region(ws, function):
    """The capture of the region in ``function`` (its device function ``..._<function>_l<line>``)."""
    return next(c for k, c in captures(ws).items() if "_%s_l" % function in k)


def test_a_declare_target_global_is_captured_at_its_device_address(recorded):
    fill, use = region(recorded, "fill"), region(recorded, "use")
    for cap in (fill, use):
        assert cap.unreplayable is None
        [g] = cap.globals
        assert g["name"] == "table" and g["size"] == N * 8
    assert fill.globals == use.globals  # one device copy, wherever the image was loaded
    addr = int(use.globals[0]["addr"], 16)
    cdir = os.path.join(recorded, "captures", use.id)
    images = {}
    for name in ("pre.bin", "post.bin"):
        path = os.path.join(cdir, name)
        [r] = [r for r in read_regions(path) if r.addr == addr]
        assert r.kind == KIND_GLOBAL and r.size == N * 8
        images[name] = bytes(region_bytes(path, r))
    import numpy as np

    before, after = (np.frombuffer(images[n], dtype=np.float64) for n in ("pre.bin", "post.bin"))
    assert list(before[:3]) == [0.0, 0.5, 1.0]  # as fill left it
    hits = np.ones(N)  # each element once
    assert np.array_equal(after, before + hits)  # as use left it


def test_a_firstprivate_struct_is_passed_as_a_copy_of_its_bytes(recorded):
    import struct

    use = region(recorded, "use")
    [data] = [b for b in use.byval_data if b]
    assert struct.unpack("<i4xdd", bytes.fromhex(data)) == (N, 2.0, 1.0)


def test_regions_with_device_globals_replay_verified_and_tune(recorded, capsys):
    for function in ("fill", "use"):
        cap = region(recorded, function)
        assert r3("--workspace", recorded, "replay", cap.id, "--repeat", 2, "--json") == 0
        out = json.loads(capsys.readouterr().out)
        assert out["status"] == OK and out["verified"] is True, (function, out.get("diagnostics"))
    use = region(recorded, "use")
    quick = flags(budget=2, pairs=2, confirm_pairs=2, confirm_rounds=1, mutator="none", seed=1)
    assert r3("--workspace", recorded, "tune", "--kernel", use.kernel, *quick, "--json") == 0
    [k] = json.loads(capsys.readouterr().out)["kernels"]
    assert k["kernel"] == use.kernel and k["evaluations"] == 2


def test_a_static_device_global_is_found_in_the_device_image_and_replays(recorded, capsys):
    """`launches` has no offload entry: the runtime finds it as a local object of the host
    plugin's device image (its symbol table) and captures it as any device global."""
    count = region(recorded, "count")
    assert count.unreplayable is None
    [g] = count.globals
    assert g["name"] == "launches" and g["size"] == 4
    cdir = os.path.join(recorded, "captures", count.id)
    for name, value in (("pre.bin", 0), ("post.bin", 1)):
        path = os.path.join(cdir, name)
        [r] = [r for r in read_regions(path) if r.addr == int(g["addr"], 16)]
        assert r.kind == KIND_GLOBAL and int.from_bytes(bytes(region_bytes(path, r))[:4], "little") == value
    capsys.readouterr()
    assert r3("--workspace", recorded, "replay", count.id, "--pipeline", "O1", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == OK and out["verified"] is True and out["mismatched_bytes"] == 0


def test_a_static_device_global_whose_name_another_unit_shares_is_refused_in_one_line(tmp_path, offload_run, capsys):  # noqa: F811
    """Two units of one device image each have a static `hits`: the image's symbol table
    names two local objects `hits`, and nothing there says which is whose. The regions are
    recorded, marked with the reason, and replay refuses them."""
    unit = (
        "#pragma omp declare target\nstatic int hits;\n#pragma omp end declare target\n"
        "int %s(void)\n{\n    int seen = 0;\n#pragma omp target map(from: seen)\n    seen = ++hits;\n"
        "    return seen;\n}\n"
    )
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.c").write_text(unit % "hit_a")
    (src / "b.c").write_text(unit % "hit_b")
    (src / "main.c").write_text(
        '#include <stdio.h>\nint hit_a(void);\nint hit_b(void);\nint main(void)\n{\n    printf("%d\\n", hit_a() + hit_b());\n'
        "    return 0;\n}\n"
    )
    flags_ = "-O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu"
    (src / "Makefile").write_text(
        "two: a.o b.o main.o\n\t$(CC) %s -o two a.o b.o main.o\n%%.o: %%.c\n\t$(CC) %s -c $< -o $@\n" % (flags_, flags_)
    )
    ws = str(tmp_path / "ws")
    assert r3("--workspace", ws, "record", "--source", src, "--run", offload_run + "./two") == 0
    caps = captures(ws).values()
    assert len(caps) == 2
    for cap in caps:
        assert cap.unreplayable == (
            "its static device global hits is not the only local object of that name in the device image's symbol table"
        )
    capsys.readouterr()
    cap = next(iter(caps))
    assert r3("--workspace", ws, "replay", cap.id) != 0
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.endswith("cannot replay: " + cap.unreplayable)


def test_r3_apply_builds_a_tuned_region_that_shares_the_images_globals(recorded, tmp_path, offload_run):  # noqa: F811
    """The tuned regions, built by r3-apply into the device image, use the image's own
    `table` (which the untuned fill region writes), `big`'s reference pointer (which the
    launch's map sets) and the static `launches`: the application prints what it printed."""
    import shutil
    import subprocess
    import sys

    from spack_r3.data import Launch, Pipeline
    from spack_r3.emit.plan import Plan, PlannedKernel, PlannedUnit

    src = tmp_path / "src"
    src.mkdir()
    (src / "globals.c").write_text(PROGRAM)
    kernels = [  # (count's plain `target` forks no teams: no geometry)
        PlannedKernel(region(recorded, function).kernel, Pipeline(opt="2"), launch)
        for function, launch in (("use", Launch(num_teams=2)), ("scale", Launch(num_teams=2)), ("count", Launch()))
    ]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(Plan("any", [PlannedUnit("globals.c", kernels)]).to_json()))
    clang = shutil.which("clang-19") or "clang-19"
    compile_line = ["-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-o", "globals", "globals.c"]

    def build_and_run(command, env):
        built = subprocess.run(command + compile_line, cwd=src, env=env, capture_output=True, text=True)
        assert built.returncode == 0, built.stderr
        ran = subprocess.run(offload_run + "./globals", shell=True, cwd=src, capture_output=True, text=True)
        assert ran.returncode == 0, ran.stderr
        return ran.stdout

    plain = build_and_run([clang], dict(os.environ))
    apply = os.path.join(os.path.dirname(sys.executable), "r3-apply")
    assert build_and_run([apply, clang], dict(os.environ, R3_APPLY_PLAN=str(plan))) == plain


def test_a_declare_target_link_variable_is_captured_through_its_reference_pointer(recorded):
    """The region reads `big` through big_decl_tgt_ref_ptr, which libomptarget pointed at the
    device copy the launch's map made: the pointer is a device global, the copy a mapped
    section, and the pointer's recorded value is the copy's address."""
    import struct

    import numpy as np

    cap = region(recorded, "scale")
    assert cap.unreplayable is None
    [g] = cap.globals
    assert g["name"] == "big_decl_tgt_ref_ptr" and g["size"] == 8
    cdir = os.path.join(recorded, "captures", cap.id)
    images = {}
    for name in ("pre.bin", "post.bin"):
        path = os.path.join(cdir, name)
        regions = read_regions(path)
        [ref] = [r for r in regions if r.addr == int(g["addr"], 16)]
        assert ref.kind == KIND_GLOBAL
        [copy] = [r for r in regions if r.addr == struct.unpack("<Q", bytes(region_bytes(path, ref)))[0]]
        assert copy.size == N * 8
        images[name] = np.frombuffer(bytes(region_bytes(path, copy)), dtype=np.float64)
    assert np.array_equal(images["pre.bin"], np.ones(N))  # as main set it on the host
    assert np.array_equal(images["post.bin"], 0.5 + np.arange(N))


def test_a_link_variables_region_replays_bit_for_bit_and_tunes(recorded, capsys):
    cap = region(recorded, "scale")
    for pipeline in ("O3", "O1,vectorize=0,unroll=0"):
        assert r3("--workspace", recorded, "replay", cap.id, "--pipeline", pipeline, "--json") == 0
        out = json.loads(capsys.readouterr().out)
        assert out["status"] == OK and out["verified"] is True, (pipeline, out.get("diagnostics"))
        assert out["mismatched_bytes"] == 0 and out["max_rel_error"] == 0.0
    quick = flags(budget=2, pairs=2, confirm_pairs=2, confirm_rounds=1, mutator="none", seed=1)
    assert r3("--workspace", recorded, "tune", "--kernel", cap.kernel, *quick, "--json") == 0
    [k] = json.loads(capsys.readouterr().out)["kernels"]
    assert k["kernel"] == cap.kernel and k["evaluations"] == 2

"""OpenMP target offload kernels, recorded and replayed for real on libomptarget's host
plugin (clang-19 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu; the regions run on this CPU
as device kernels). Each test reads as one thing a user does with an offload application.
"""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest

from conftest import REPO_ROOT
from spack_r3 import backends
from spack_r3.compile.module import apply_geometry
from spack_r3.capture import list_captures
from spack_r3.data import OK, WRONG_OUTPUT, Launch, Pipeline, Variant
from spack_r3.emit.plan import Plan, PlannedKernel, PlannedUnit
from spack_r3.memimage import read_regions
from spack_r3.compile.pipeline import parse
from spack_r3.replay.server import ReplayServer
from spack_r3.compile.stages import polly_available
from spack_r3.roundtrip.check import _kernel_times
from spack_r3.workspace import Workspace
from r3cli import flags, r3

DEMO = os.path.join(REPO_ROOT, "repos", "r3", "sources", "heat-offload")
R3_APPLY = os.path.join(os.path.dirname(sys.executable), "r3-apply")


def libomptarget_dir():
    """Where libomptarget and its host plugin are (llvm-config-19 --libdir), or None."""
    try:
        libdir = subprocess.run(["llvm-config-19", "--libdir"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return None
    return libdir if libdir and os.path.exists(os.path.join(libdir, "libomptarget.so")) else None


@pytest.fixture(scope="module")
def offload_run(clang):
    libdir = libomptarget_dir()
    if libdir is None:
        pytest.skip("libomptarget (its host plugin) is not installed: llvm-config-19 --libdir has no libomptarget.so")
    return "LD_LIBRARY_PATH=%s " % libdir


def captures(ws):
    return {c.kernel: c for c in list_captures(Workspace(ws))}


def record_program(tmp_path, name, text, offload_run, workspace="ws"):
    """``r3 record`` of a one-file offload program ``name``.c built by its Makefile in
    tmp_path/src, into the workspace tmp_path/``workspace``: (its source folder, the workspace)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / (name + ".c")).write_text(text)
    (src / "Makefile").write_text(
        "{0}: {0}.c\n\t$(CC) -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -o {0} {0}.c\n".format(name)
    )
    ws = str(tmp_path / workspace)
    assert r3("--workspace", ws, "record", "--source", src, "--run", offload_run + "./" + name) == 0
    return src, ws


def build_with_plan(src, units=None, timed=False):
    """``make`` in ``src`` through r3-apply, as Spack's +r3 build runs it: with a plan of
    ``units`` (none: the untuned build), timed (R3_APPLY_PROBES=1) as the check's builds are."""
    env = dict(os.environ)
    if units is not None:
        plan = src.parent / "plan.json"
        plan.write_text(json.dumps(Plan("any", units).to_json()))
        env["R3_APPLY_PLAN"] = str(plan)
    if timed:
        env["R3_APPLY_PROBES"] = "1"
    clang = shutil.which("clang-19") or "clang-19"
    built = subprocess.run(
        ["make", "-s", "-B", "CC=%s %s" % (R3_APPLY, clang)], cwd=src, env=env, capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr


def run_timed(src, command, offload_run):
    """Run a timed build as the check does: its stdout, and each region's calls and time from
    the offload runtime's profile. Regions are timed, never captured."""
    out = src.parent / "timed"
    ran = subprocess.run(
        offload_run + command,
        shell=True,
        cwd=src,
        capture_output=True,
        text=True,
        env=dict(os.environ, R3_RECORD_DIR=str(out), R3_CAPTURE="none"),
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert not list(out.glob("captures/*"))
    return ran.stdout, _kernel_times(str(out))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, offload_run):
    ws = str(tmp_path_factory.mktemp("ws"))
    assert r3("--workspace", ws, "record", "--source", DEMO, "--run", offload_run + "./heat 64 20") == 0
    return ws


def test_record_captures_target_regions_as_offload_kernels(recorded, capsys):
    assert r3("--workspace", recorded, "kernels", "--json") == 0
    entries = {e["kernel"]: e for e in json.loads(capsys.readouterr().out)}
    step = next(k for k in entries if k.startswith("__omp_offloading_") and "jacobi_step" in k)
    assert entries[step]["calls"] == 20 and 0 < entries[step]["share"] <= 1
    cap = captures(recorded)[step]
    assert backends.of_capture(cap) is backends.OFFLOAD
    assert cap.launch["device"] >= 0 and "num_teams" in cap.launch and "thread_limit" in cap.launch
    # the unit's device IR and its compile command: the region can be compiled again for a GPU
    assert "-fopenmp-targets=x86_64-pc-linux-gnu" in cap.compile_command
    assert cap.target["triple"] == "x86_64-pc-linux-gnu"
    # the device function takes a dyn_ptr (null), then n (a literal), u and v (device addresses)
    assert cap.signature["params"][0] == "ptr" and int(cap.args[0], 16) == 0
    n = 64
    regions = read_regions(os.path.join(recorded, "captures", cap.id, "pre.bin"))
    assert sum(r.size for r in regions) == 2 * n * n * 8  # u and v as mapped, nothing else
    assert cap.memory["mode"] == "mapped" and cap.memory["mapped_bytes"] == 2 * n * n * 8
    pointers = {int(a, 16) for a in cap.args[1:]}
    assert {r.addr for r in regions} <= pointers  # the sections start where the arguments point


def test_replay_runs_the_device_function_and_verifies(recorded, capsys):
    step = next(c for k, c in captures(recorded).items() if "jacobi_step" in k)
    assert r3("--workspace", recorded, "replay", step.id, "--repeat", 3, "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == OK and out["verified"] is True and out["repeat"] == 3


def test_launch_geometry_is_a_launch_setting_that_still_verifies(recorded):
    step = next(c for k, c in captures(recorded).items() if "jacobi_step" in k)
    cdir = os.path.join(recorded, "captures", step.id)
    with ReplayServer() as server:
        base = server.submit(cdir, Variant(), repeat=1)
        for launch in (Launch(num_teams=2, thread_limit=1), Launch(num_teams=3), Launch(thread_limit=1)):
            ev = server.submit(cdir, Variant(launch=launch), pairs=2)
            assert ev.status == OK and ev.verified, (launch, ev.diagnostics)
            assert ev.code != base.code  # another launch is another candidate
            assert ev.speedup_min <= ev.speedup <= ev.speedup_max


TEAMS = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

/* each team counts itself: out[0] ends as the number of teams the region ran with */
void count_teams(int *out)
{
#pragma omp target teams map(tofrom: out[0:1])
    {
#pragma omp atomic
        out[0] += 1;
    }
}

int main(void)
{
    int *out = calloc(1, sizeof *out);
    count_teams(out);
    printf("teams %d\n", out[0]);
    return 0;
}
"""


@pytest.fixture
def any_teams(monkeypatch):
    """libomp forms at most as many teams x threads on the host as there are CPUs
    (KMP_TEAMS_THREAD_LIMIT): lifted, so that what these tests ask for is what runs."""
    monkeypatch.setenv("KMP_TEAMS_THREAD_LIMIT", "64")


def test_geometry_reaches_the_device_function(tmp_path, offload_run, any_teams):
    """The recorded region ran with the runtime's number of teams; replayed with two more,
    it counts them: a wrong output, which shows the setting is what ran."""
    _, ws = record_program(tmp_path, "teams", TEAMS, offload_run)
    cap = next(c for k, c in captures(ws).items() if "count_teams" in k)
    cdir = os.path.join(ws, "captures", cap.id)
    recorded_teams = int.from_bytes(_post_bytes(cdir), "little")
    assert recorded_teams >= 1
    with ReplayServer() as server:
        same = server.submit(cdir, Variant(launch=Launch(num_teams=recorded_teams)), repeat=1)
        other = server.submit(cdir, Variant(launch=Launch(num_teams=recorded_teams + 2)), repeat=1)
    assert same.status == OK and same.verified
    assert other.status == WRONG_OUTPUT


def _post_bytes(cdir):
    from spack_r3.memimage import region_bytes

    post = os.path.join(cdir, "post.bin")
    (region,) = read_regions(post)
    return bytes(region_bytes(post, region))[:4]


def test_apply_geometry_sets_or_replaces_the_push():
    text = (
        "define void @k(ptr %0) {\n  call void (ptr, i32, ptr, ...) @__kmpc_fork_teams(ptr @1, i32 0, ptr @f)\n"
        "  ret void\n}\n"
    )
    out = apply_geometry(text, "k", Launch(num_teams=4, thread_limit=8))
    assert "@__kmpc_push_num_teams(ptr @1, i32 %r3.gtid.1, i32 4, i32 8)" in out
    assert out.index("push_num_teams(ptr @1") < out.index("@__kmpc_fork_teams(ptr @1")
    assert "declare void @__kmpc_push_num_teams(ptr, i32, i32, i32)" in out
    again = apply_geometry(out, "k", Launch(num_teams=2))
    assert "i32 %r3.gtid.1, i32 2, i32 0)" in again and again.count("push_num_teams(ptr @1") == 1
    assert apply_geometry(text, "k", Launch()) == text
    with pytest.raises(ValueError, match="forks no teams"):
        apply_geometry("define void @k() {\n  ret void\n}\n", "k", Launch(num_teams=2))


def test_tune_searches_launch_geometry_with_the_pipeline(recorded, capsys):
    import optuna

    from spack_r3.search.store import storage

    step = next(k for k in captures(recorded) if "jacobi_step" in k)
    # a region named by its function and line: its full name holds its source file's ids
    quick = flags(budget=8, pairs=2, confirm_pairs=3, confirm_rounds=1, mutator="none", seed=1)
    assert r3("--workspace", recorded, "tune", "--kernel", "jacobi_step_l8", *quick, "--json") == 0
    out = json.loads(capsys.readouterr().out)
    [k] = out["kernels"]
    assert k["kernel"] == step and k["evaluations"] == 8
    assert set(k["variant"]["launch"]) >= {"num_teams", "thread_limit"}  # the winner's geometry, applied by emit
    study = optuna.load_study(study_name=k["study"], storage=storage(Workspace(recorded)))
    trials = study.get_trials()
    assert all({"num_teams", "thread_limit"} <= set(t.params) for t in trials)
    # candidates with a geometry of their own ran, verified, and were measured
    ran = [
        t
        for t in trials
        if "evaluation" in t.user_attrs and t.user_attrs["evaluation"]["variant"]["launch"]["num_teams"]
    ]
    assert ran and all(t.user_attrs["status"] == OK and t.value > 0 for t in ran)


def test_r3_apply_builds_the_tuned_region_into_the_device_image(tmp_path, offload_run, any_teams):
    """The plan's geometry and pipeline for a region, built by r3-apply into the unit's
    device image: the application itself now runs its region with three teams."""
    src, ws = record_program(tmp_path, "teams", TEAMS, offload_run)
    kernel = next(k for k in captures(ws) if "count_teams" in k)

    def run():
        return subprocess.run(offload_run + "./teams", shell=True, cwd=src, capture_output=True, text=True).stdout

    build_with_plan(src)
    untuned = run()
    build_with_plan(
        src,
        [PlannedUnit("teams.c", [PlannedKernel(kernel, Pipeline(opt="2", loop_vectorize=False), Launch(num_teams=3))])],
    )
    assert run().strip() == "teams 3" != untuned.strip()


def test_a_timed_build_reports_each_region_as_the_check_reads_it(tmp_path, offload_run):
    """The +r3 check's timed builds (R3_APPLY_PROBES=1) link the offload runtime, whose
    profile gives each region's time under its function and line, whatever copy of the
    source built it: what the check pairs with the plan's kernels."""
    from spack_r3.emit.apply import planned_symbol

    src = tmp_path / "src"
    shutil.copytree(DEMO, src)
    recorded_name = "__omp_offloading_fe00_1234ab_jacobi_step_l8"  # as another copy of jacobi.c named it
    assert planned_symbol(recorded_name) == "jacobi_step_l8" == planned_symbol("jacobi_step_l8")
    build_with_plan(
        src,
        [PlannedUnit("jacobi.c", [PlannedKernel(recorded_name, Pipeline(opt="3"), Launch(num_teams=1))])],
        timed=True,
    )
    stdout, times = run_timed(src, "./heat 64 20", offload_run)
    assert "PASSED" in stdout
    assert times["jacobi_step_l8"].calls == 20 and times["jacobi_step_l8"].seconds > 0
    assert times["residual2_l25"].calls == 2


MEMBERS = r"""
#include <stdio.h>
#include <stdlib.h>

typedef struct { int n; double *a; double *b; } data_t;

/* XSBench's shape: a struct whose arrays are mapped as members, results mapped from */
void combine(data_t d, double *out)
{
    int n = d.n;
#pragma omp target teams distribute parallel for map(to: d.n) map(to: d.a[:n]) map(to: d.b[:n]) map(from: out[:n])
    for (int i = 0; i < n; i++)
        out[i] = d.a[i] * 2.0 + d.b[i];
}

int main(void)
{
    data_t d = {1000, malloc(1000 * sizeof(double)), malloc(1000 * sizeof(double))};
    double *out = calloc(1000, sizeof(double)), sum = 0;
    for (int i = 0; i < d.n; i++) { d.a[i] = i; d.b[i] = 1; }
    combine(d, out);
    for (int i = 0; i < d.n; i++) sum += out[i];
    printf("sum %.0f %s\n", sum, sum == 1000.0 * 999 + 1000 ? "PASSED" : "FAILED");
    return sum == 1000.0 * 999 + 1000 ? 0 : 1;
}
"""


def test_struct_members_mapped_record_and_replay(tmp_path, offload_run):
    """Arrays mapped as members of a struct argument (XSBench's way): the recorded run still
    gets its results back, and the region replays verified from what it mapped."""
    _, ws = record_program(tmp_path, "members", MEMBERS, offload_run)
    cap = next(c for k, c in captures(ws).items() if "combine" in k)
    assert cap.unreplayable is None
    with ReplayServer() as server:
        ev = server.submit(os.path.join(ws, "captures", cap.id), Variant(), repeat=2)
    assert ev.status == OK and ev.verified, ev.diagnostics


def test_a_capture_of_a_backend_this_r3_lacks_is_refused_in_one_line(recorded, tmp_path, capsys):
    step = next(c for k, c in captures(recorded).items() if "jacobi_step" in k)
    other = tmp_path / "capture"
    shutil.copytree(os.path.join(recorded, "captures", step.id), other)
    data = json.loads((other / "capture.json").read_text())
    data["launch"]["backend"] = "sycl"
    (other / "capture.json").write_text(json.dumps(data))
    assert r3("--workspace", recorded, "replay", str(other)) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.endswith("names backend 'sycl', which this r3 does not have (cuda, hip, host, offload)") and "\n" not in err
    )


def test_record_top_captures_only_the_hottest_region(tmp_path, offload_run):
    """Hot regions are chosen by their share of the run, as host kernels are: a first run
    with probes only, then the hottest region alone is captured (heat's 400 Jacobi steps
    against 2 residuals)."""
    ws = str(tmp_path / "ws")
    assert r3("--workspace", ws, "record", "--source", DEMO, "--run", offload_run + "./heat 128 400", "--top", 1) == 0
    names = list(captures(ws))
    assert len(names) == 1 and "jacobi_step" in names[0], names


def test_a_workspace_path_with_quotes_records(tmp_path, offload_run):
    """The offload runtime writes the unit's folder into JSON escaped, as r3rt.c does."""
    _, ws = record_program(tmp_path, "teams", TEAMS, offload_run, workspace='a "quoted" workspace')
    assert any("count_teams" in k for k in captures(ws))


def test_emit_keys_a_device_variant_to_its_gpu(recorded, tmp_path, capsys):
    """A tuned region emitted for sm_90: its plan and the package's patch carry
    ``cuda_arch=90`` beside the CPU target, in files of their own; a host plan of the same
    package keeps its name, keys and digest."""
    import glob

    from spack_r3.emit.plan import Plan, PlannedKernel, PlannedUnit, load_plan
    from spack_r3.search.results import KernelResult, save_results

    ws = Workspace(recorded)
    step = next(c for k, c in captures(recorded).items() if "jacobi_step" in k)
    # The heat demo's record as one through Spack records it (its facts beside the captures)
    [record_json] = glob.glob(os.path.join(recorded, "runs", "*", "record.json"))
    data = json.load(open(record_json))
    tree = os.path.dirname(step.source_file)
    data["spack"] = {
        "package": "heat-offload",
        "namespace": "r3",
        "spec": "heat-offload",
        "target": "zen3",
        "version": "1.0",
        "source_root": tree,
        "layout": "v1",
    }
    spack_run = os.path.join(recorded, "runs", "99999999-spack-heat-offload")
    os.makedirs(spack_run)
    json.dump(data, open(os.path.join(spack_run, "record.json"), "w"))
    # A tune's result for the region: its geometry and a source rewrite (the variant is what
    # emit keys; the speedup only has to be one emit builds)
    source = open(step.source_file).read()
    patch = make_patch_text(source, source.replace("double lap =", "const double lap =", 1), step.source_file)
    variant = Variant(launch=Launch(num_teams=2, thread_limit=8), source_patch=patch, source_rule="test")
    save_results(
        ws,
        [KernelResult(step.kernel, [step.id], 0.9, 1e-3, 5e-4, 2.0, 1.9, 2.1, 8, {}, False, True, variant)],
    )
    repo = tmp_path / "repo"
    assert r3("--workspace", recorded, "emit", "heat-offload", "--repo", repo, "--gpu", "sm_90", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gpu"] == "sm_90" and out["keys"] == "target=zen3 cuda_arch=90"
    directory = repo / "packages" / "heat-offload"
    plan = load_plan(directory / "r3-zen3-sm_90.json")
    assert plan.gpu == "sm_90" and plan.spec_keys() == "target=zen3 cuda_arch=90"
    [unit] = plan.units
    assert unit.patch == "r3-zen3-sm_90-0.patch" and (directory / unit.patch).exists()
    assert unit.kernels[0].launch.num_teams == 2
    text = (directory / "package.py").read_text()
    assert 'patch("r3-zen3-sm_90-0.patch", when="+r3 target=zen3 cuda_arch=90")' in text
    assert "'r3-zen3-sm_90.json'" in text and "self.spec.satisfies(keys)" in text
    # emitted again keyed to no GPU (the recorded spec names none): it replaces the keyed plan,
    # whose patch would otherwise apply beside its own to a spec with cuda_arch=90
    assert r3("--workspace", recorded, "emit", "heat-offload", "--repo", repo, "--json") == 0
    again = json.loads(capsys.readouterr().out)
    assert again["keys"] == "target=zen3" and again["targets"] == ["zen3"]
    assert sorted(p.name for p in directory.glob("r3-*")) == ["r3-zen3-0.patch", "r3-zen3.json"]
    assert again["skipped"] == ["the plan for target=zen3 cuda_arch=90 is replaced by this one for target=zen3"]
    # a host plan: named, keyed and digested as host plans were before GPU keys and before
    # the plan held its pipelines typed (the digest below is what r3 computed then for this
    # plan as emit writes it, every setting spelled out: +r3 installs of host plans stay valid)
    host = Plan(
        "zen3",
        [
            PlannedUnit(
                "a.c",
                [PlannedKernel("k", Pipeline(opt="3"), Launch(num_teams=2))],
                {"R3_TILE_1": 32},
                "r3-zen3-0.patch",
            )
        ],
    )
    assert host.name() == "zen3" and host.spec_keys() == "target=zen3" and "gpu" not in host.to_json()
    assert host.build_digest() == "724a5067efbfdd92"
    host.gpu = "sm_90"
    assert host.build_digest() != "724a5067efbfdd92"
    # a GPU this r3 does not know: one line
    assert r3("--workspace", recorded, "emit", "heat-offload", "--repo", repo, "--gpu", "sm_100") == 2
    assert capsys.readouterr().err.strip().startswith("r3 emit: error: unknown GPU target 'sm_100'")


def make_patch_text(original, changed, path):
    from spack_r3.sourcepatch import make_patch

    return make_patch(original, changed, os.path.basename(path))


def test_replay_takes_a_regions_launch_geometry(tmp_path, offload_run, any_teams, capsys):
    """r3 replay --teams N --thread-limit N runs the region at that geometry: the teams
    counter comes out as the number of teams asked for (a wrong output for any other);
    for a host kernel the options are refused in one line."""
    _, ws = record_program(tmp_path, "teams", TEAMS, offload_run)
    cap = next(c for k, c in captures(ws).items() if "count_teams" in k)
    recorded_teams = int.from_bytes(_post_bytes(os.path.join(ws, "captures", cap.id)), "little")
    capsys.readouterr()
    assert (
        r3("--workspace", ws, "replay", cap.id, "--repeat", 1, "--teams", recorded_teams, "--thread-limit", 1, "--json")
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == OK and out["launch"] == {"num_teams": recorded_teams, "thread_limit": 1}
    assert r3("--workspace", ws, "replay", cap.id, "--repeat", 1, "--teams", recorded_teams + 2, "--json") == 1
    assert json.loads(capsys.readouterr().out)["status"] == WRONG_OUTPUT
    assert r3("--workspace", ws, "replay", cap.id, "--teams", 0) == 2
    assert capsys.readouterr().err.strip() == "r3 replay: error: --teams must be at least 1"


def test_replay_geometry_for_a_host_kernel_is_one_line(tmp_path, clang, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "scale.c").write_text(
        "void scale(double *a, int n) { for (int i = 0; i < n; i++) a[i] *= 2; }\n"
        "int main(void) { static double a[64]; scale(a, 64); return 0; }\n"
    )
    (src / "Makefile").write_text("scale: scale.c\n\t$(CC) -O2 -o scale scale.c\n")
    ws = str(tmp_path / "ws")
    assert r3("--workspace", ws, "record", "--source", src, "--run", "./scale") == 0
    capsys.readouterr()
    assert r3("--workspace", ws, "replay", "scale", "--teams", 4) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "r3 replay: error: --teams and --thread-limit set an OpenMP target region's launch geometry: "
        "scale is a host kernel"
    )


def test_record_kernel_names_a_region_by_its_function_and_line(tmp_path, offload_run, capsys):
    """r3 record --kernel jacobi_step_l8: the region by its function and line, as r3 tune
    --kernel takes it (its full name holds the copied tree's file ids); only it is captured."""
    ws = str(tmp_path / "ws")
    assert (
        r3(
            "--workspace",
            ws,
            "record",
            *flags(source=DEMO, run=offload_run + "./heat 64 4", kernel="jacobi_step_l8"),
        )
        == 0
    )
    [kernel] = captures(ws)
    assert kernel.startswith("__omp_offloading_") and kernel.endswith("_jacobi_step_l8")
    capsys.readouterr()
    assert (
        r3(
            "--workspace",
            ws,
            "record",
            *flags(source=DEMO, run=offload_run + "./heat 64 4", kernel="jacobi_step_l99"),
        )
        == 2
    )
    assert "no function named jacobi_step_l99 was compiled through r3-record" in capsys.readouterr().err


NEST = r"""
#include <stdio.h>
#include <stdlib.h>

/* a perfect nest of two loops in an offload region: rows x columns */
void scale2d(int n, int m, const double *restrict a, double *restrict b)
{
#pragma omp target teams distribute parallel for map(to: a[0:n * m]) map(from: b[0:n * m])
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++)
            b[i * m + j] = 2.0 * a[i * m + j] + 1.0;
}

int main(void)
{
    int n = 64, m = 48;
    double *a = malloc(n * m * sizeof(double)), *b = calloc(n * m, sizeof(double)), sum = 0;
    for (int k = 0; k < n * m; k++) a[k] = k % 7;
    scale2d(n, m, a, b);
    for (int k = 0; k < n * m; k++) sum += b[k];
    printf("sum %.0f\n", sum);
    return 0;
}
"""


def test_rules_rewrite_inside_a_target_region_and_the_rewrites_replay(tmp_path, offload_run):
    """The rules find an offload region's loops in the function it is in (scale2d, from its
    region's name): collapse(2) on its directive, simd on the inner loop, a pragma whose knob
    is defined at the top of the unit. Each rewrite keeps the directive at its recorded line
    (a #line before it where a knob moved it), so the variant's region has the capture's
    name, and each replays verified."""
    from spack_r3.search.mutators import Feedback
    from spack_r3.search.mutators.ruleset import RulesMutator
    from spack_r3.search.remix import keep_region_lines, kernel_source
    from spack_r3.sourcepatch import make_patch

    src, ws = record_program(tmp_path, "nest", NEST, offload_run)
    cap = next(c for k, c in captures(ws).items() if "scale2d" in k)
    cdir = os.path.join(ws, "captures", cap.id)
    source = kernel_source(cap, cdir)
    assert source.function == "scale2d" and source.openmp
    proposals = {p.rule: p for p in RulesMutator().propose(source, Feedback())}
    assert "collapse(2)" in proposals["omp-collapse"].text
    assert {"omp-collapse", "omp-simd", "vectorize-pragma"} <= set(proposals)
    line = next(i for i, l in enumerate(NEST.splitlines(), 1) if "omp target" in l)
    assert cap.kernel.endswith("_scale2d_l%d" % line)
    with ReplayServer() as server:
        for rule in ("omp-collapse", "omp-simd", "vectorize-pragma"):
            p = proposals[rule]
            text = keep_region_lines(source.text, p.text)
            moved = text != p.text  # the knob's #define above the region: a #line puts it back
            assert moved == (rule == "vectorize-pragma"), rule
            variant = Variant(
                source_patch=make_patch(source.text, text, "nest.c"),
                source_rule=rule,
                source_defines={k: v[0] for k, v in p.knobs.items()},
            )
            ev = server.submit(cdir, variant, repeat=1)
            assert ev.status == OK and ev.verified, (rule, ev.diagnostics)
        if polly_available():  # a rewrite with Polly: its stage (opt-19) reads the variant's bitcode
            ev = server.submit(cdir, replace(variant, pipeline=parse("O3,polly=1")), repeat=1)
            assert ev.status == OK and ev.verified, ev.diagnostics
    # The +r3 build of that rewrite (the patched unit, as Spack's patch() leaves it): r3-apply
    # finds the planned region at its recorded line, and the timed run names it so
    staged = tmp_path / "stage"
    shutil.copytree(src, staged)
    (staged / "nest.c").write_text(text)
    knobs = {k: v[0] for k, v in p.knobs.items()}
    build_with_plan(staged, [PlannedUnit("nest.c", [PlannedKernel(cap.kernel, Pipeline(opt="3"))], knobs)], timed=True)
    stdout, times = run_timed(staged, "./nest", offload_run)
    assert stdout == "sum %d\n" % sum(2 * (k % 7) + 1 for k in range(64 * 48))
    assert times["scale2d_l%d" % line].calls == 1

"""The Spack round trip with a real Spack (no mocks): record a package through Spack ->
tune (small budget) -> emit the tuned variant -> ``spack install <package>+r3`` and
``~r3`` -> run both; for a demo (Make) and a CMake package written here. Then the bad
inputs, and ``spack r3 -h`` through Spack's extension mechanism.

Concretization costs ~30 s on this machine: the tests share one workspace (one sandbox,
one install tree) per module, and keep the Spack calls few.
"""

import contextlib
import glob
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile

import pytest

from spack_r3 import cli
from spack_r3.capture import list_captures
from spack_r3.workspace import Workspace
from spack_r3.extension import EXTENSION_ROOT
from spack_r3.sourcepatch import make_patch
from spack_r3.roundtrip import emit as spack_emit
from spack_r3.roundtrip.check import AppCheck, KernelCheck, check_app, fidelity
from spack_r3.roundtrip.verdict import act
from spack_r3.data import Launch, Pipeline, Variant
from spack_r3.search.results import Alternate, KernelResult
from spack_r3.spack.repos import write_scope
from spack_r3.capture import list_captures
from spack_r3.workspace import Workspace
from conftest import REPO_ROOT
from r3cli import flags

ROOT = REPO_ROOT
DEMO_REPO = os.path.join(ROOT, "repos", "r3")

pytestmark = pytest.mark.spack


def r3(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


# A CMake package of our own: a dense loop nest in its own unit (where a searched setting,
# Polly, wins by several times on any x86 machine, so the round trip always has a winner
# to build), a driver that checks it.
CMAKE_KERNEL = r"""
#define N 96
void mxm(const double a[N][N], const double b[N][N], double c[N][N]) {
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      double s = 0.0;
      for (int k = 0; k < N; k++) s += a[i][k] * b[k][j];
      c[i][j] = s;
    }
}
"""
CMAKE_MAIN = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#define N 96
void mxm(const double a[N][N], const double b[N][N], double c[N][N]);
int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 20;
  double (*a)[N] = malloc(sizeof(double[N][N])), (*b)[N] = malloc(sizeof(double[N][N])),
         (*c)[N] = malloc(sizeof(double[N][N]));
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) { a[i][j] = (i == j) ? 2.0 : 0.0; b[i][j] = 1.0 / (1 + i + j); }
  for (int r = 0; r < reps; r++) mxm((const double (*)[N])a, (const double (*)[N])b, c);
  double err = 0;  /* a = 2I: c = 2b */
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) err = fmax(err, fabs(c[i][j] - 2.0 * b[i][j]));
  printf("mxmcm: err=%g %s\n", err, err < 1e-12 ? "PASSED" : "FAILED");
  return !(err < 1e-12);
}
"""
CMAKELISTS = """cmake_minimum_required(VERSION 3.10)
project(mxmcm C)
add_executable(mxmcm main.c mxm.c)
target_link_libraries(mxmcm m)
install(TARGETS mxmcm DESTINATION bin)
"""
RECIPE = '''from spack.package import *


class {cls}({base}):
    """{doc}"""

    homepage = "https://example.org/{name}"
    url = "file://{{tarball}}"

    version("1.0", sha256="{{sha256}}")

    depends_on("c", type="build")
'''
CMAKE_RECIPE = RECIPE.format(
    cls="R3tMxmcm",
    base="CMakePackage",
    name="r3t-mxmcm",
    doc="A dense matrix product, built with CMake (spack-r3's round-trip test).",
)
BROKEN_RECIPE = RECIPE.format(
    cls="R3tBroken", base="MakefilePackage", name="r3t-broken", doc="A build that fails (spack-r3's bad-input test)."
)
# Spack's rsbench recipe, as it is: ``cflags += self.compiler.openmp_flag`` after "-O3",
# with no space (harmless for compilers whose flag starts with one; clang reads -O3-fopenmp)
GLUED_RECIPE = (
    RECIPE.format(
        cls="R3tGlued",
        base="MakefilePackage",
        name="r3t-glued",
        doc="A recipe that glues its OpenMP flag to -O3 (spack-r3's recipe repair test).",
    )
    + """
    @property
    def build_targets(self):
        cflags = "-O3"
        cflags += self.compiler.openmp_flag
        return ["CC={{0}}".format(spack_cc), "CFLAGS={{0}}".format(cflags)]

    def install(self, spec, prefix):
        mkdirp(prefix.bin)
        install("glued", prefix.bin)
"""
)
GLUED_MAKEFILE = """glued: main.o mxm.o
\t$(CC) $(CFLAGS) -o $@ main.o mxm.o -lm

%.o: %.c
\t$(CC) $(CFLAGS) -c -o $@ $<
"""


def _package(repo, name, recipe, files, tmp):
    src = tmp / ("%s-1.0" % name)
    src.mkdir()
    for fname, text in files.items():
        (src / fname).write_text(text)
    tarball = tmp / ("%s-1.0.tar.gz" % name)
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(src, arcname=src.name)
    sha = hashlib.sha256(tarball.read_bytes()).hexdigest()
    pkg = repo / "packages" / name
    pkg.mkdir(parents=True)
    (pkg / "package.py").write_text(recipe.format(tarball=tarball, sha256=sha))


@pytest.fixture(scope="module")
def site(spack_root, clang, tmp_path_factory):
    """One workspace, and a scope with the demo repository and a repository of test packages."""
    tmp = tmp_path_factory.mktemp("spack-roundtrip")
    repo = tmp / "testrepo"
    (repo / "packages").mkdir(parents=True)
    (repo / "repo.yaml").write_text("repo:\n  namespace: r3test\n")
    _package(
        repo,
        "r3t-mxmcm",
        CMAKE_RECIPE,
        {"CMakeLists.txt": CMAKELISTS, "main.c": CMAKE_MAIN, "mxm.c": CMAKE_KERNEL},
        tmp,
    )
    _package(repo, "r3t-broken", BROKEN_RECIPE, {"Makefile": "all:\n\t$(CC) -c missing.c\n"}, tmp)
    _package(
        repo, "r3t-glued", GLUED_RECIPE, {"Makefile": GLUED_MAKEFILE, "main.c": CMAKE_MAIN, "mxm.c": CMAKE_KERNEL}, tmp
    )
    scope = write_scope(str(tmp / "scope"), repos=[DEMO_REPO, str(repo)])
    return {"ws": str(tmp / "ws"), "scope": scope, "tmp": tmp}


def tune(site, spec, run, *extra):
    return r3(
        "--workspace",
        site["ws"],
        "tune",
        spec,
        "--run",
        run,
        "--spack-config",
        site["scope"],
        "--mutator",
        "none",
        "--budget",
        "6",
        "--confirm-rounds",
        "1",
        "--confirm-pairs",
        "3",
        "--check-pairs",
        "2",
        "--check-kernel-pairs",
        "1",
        # (these test the round trip's builds; the check that acts on what it measures is
        # tests/roundtrip/test_verdict.py's)
        "--keep-variant",
        "--json",
        *extra,
    )


def _installed_run(prefix, command):
    exe, *args = command.split()
    return subprocess.run([os.path.join(prefix, "bin", exe)] + args, capture_output=True, text=True, timeout=300)


def test_demo_round_trip_record_tune_emit_install_run(site):
    rc, out, err = tune(site, "r3-dense", "dense 120 1", "--kernel", "matmul")
    assert rc == 0, err
    res = json.loads(out)
    [kernel] = res["kernels"]
    assert kernel["kernel"] == "matmul" and kernel["evaluations"] >= 6
    emitted = res["emitted"]
    # Polly on a matrix product wins on any x86 machine (and is among the first settings tried).
    assert kernel["winner"] != "baseline" and emitted, kernel
    recipe = emitted["recipe"]
    text = open(recipe).read()
    assert "from spack.pkg.r3.r3_dense import *" in text and 'variant("r3"' in text
    plan = json.load(open(os.path.join(os.path.dirname(recipe), "r3-%s.json" % emitted["target"])))
    assert [k["symbol"] for u in plan["units"] for k in u["kernels"]] == ["matmul"]
    assert plan["facts"]["package"] == "r3-dense" and plan["facts"]["target"] == emitted["target"]
    # Both builds ran and passed their self-check (the tuned matmul computes the right product).
    check = res["check"]
    assert check["pairs"] == 2 and check["app_speedup_min"] > 0
    for prefix in (check["tuned_prefix"], check["untuned_prefix"]):
        proc = _installed_run(prefix, "dense 120 1")
        assert proc.returncode == 0 and "PASSED" in proc.stdout, proc.stdout + proc.stderr
    # The +r3 build's matmul is the tuned one: r3-apply's split leaves its own object file.
    spec = json.load(open(os.path.join(check["tuned_prefix"], ".spack", "spec.json")))
    assert spec["spec"]["nodes"][0]["parameters"]["r3"] is True
    # matmul inside the application, from the timed builds (+r3probes), beside replay's speedup.
    [timed] = check["kernels"]
    assert timed["kernel"] == "matmul" and timed["calls"] >= 1
    assert timed["untuned_s"] > 0 and timed["tuned_s"] > 0 and timed["replay_speedup"] == kernel["speedup"]
    # The prediction weighs replay's speedup by matmul's share of the untuned run (Amdahl), as
    # the outermost tuned kernel: matmul calls no other, so the same as its own code's share.
    assert 0 < timed["share"] <= timed["outer_share"] <= 1 and check["shares_from"] == "timed untuned build"
    assert check["predicted_app_speedup"] == pytest.approx(1 / (1 - timed["outer_share"] * (1 - 1 / kernel["speedup"])))
    assert check["predicted_from_recorded_shares"] == pytest.approx(emitted["predicted_app_speedup"])

    # status: one current target, with the application's measured speedup.
    rc, out, err = r3("--workspace", site["ws"], "status", "r3-dense", "--spack-config", site["scope"], "--json")
    assert rc == 0, out + err
    [row] = json.loads(out)["packages"]
    assert row["target"] == emitted["target"] and row["stale"] == [] and row["measured_app_speedup"] > 0
    assert row["predicted_app_speedup"] == pytest.approx(check["predicted_app_speedup"])  # the check's, once it ran
    # ... and matmul's speedup in replay beside the one measured inside the application.
    [k] = row["kernel_speedups"]
    assert k["kernel"] == "matmul" and k["predicted"] == kernel["speedup"]
    assert k["measured"] == timed["app_speedup"] and k["measured_min"] <= k["measured"] <= k["measured_max"]

    # A source rewrite reaches the +r3 build through Spack's own patch(): matmul's winner,
    # given a rewrite of its unit, is emitted as patch(..., when="+r3 target=<uarch>"), and
    # Spack's +r3 build compiles the patched unit while ~r3 compiles the original.
    [result_json] = glob.glob(os.path.join(site["ws"], "results", "*.json"))
    result = json.load(open(result_json))
    [unit] = plan["units"]
    original = open(os.path.join(plan["facts"]["source_root"], unit["source"])).read()
    marker = 'static const char r3_rewrite_marker[] __attribute__((used)) = "r3-rewritten-unit";\n'
    result["variant"].update(source_patch=make_patch(original, original + marker, unit["source"]), source_rule="marker")
    # ... and matmul specialized on the size the check runs (n=120): a guarded clone in +r3
    result["variant"]["pipeline"]["specialize"] = [[0, 120]]
    json.dump(result, open(result_json, "w"))
    done = spack_emit.emit(Workspace(site["ws"]), "r3-dense")
    patch_name = "r3-%s-0.patch" % done.target
    assert 'patch("%s", when="+r3 target=%s")' % (patch_name, done.target) in open(recipe).read()
    assert os.path.isfile(os.path.join(os.path.dirname(recipe), patch_name))
    rewritten = check_app(
        Workspace(site["ws"]), done, "r3-dense", "dense 120 1", pairs=2, user_scopes=[site["scope"]], kernel_pairs=1
    )
    spack_emit.record_check(done, rewritten)
    for prefix, built in ((rewritten.tuned_prefix, True), (rewritten.untuned_prefix, False)):
        proc = _installed_run(prefix, "dense 120 1")
        assert proc.returncode == 0 and "PASSED" in proc.stdout, proc.stdout + proc.stderr
        assert (b"r3-rewritten-unit" in open(os.path.join(prefix, "bin", "dense"), "rb").read()) is built, prefix
    # The check's runs of the +r3 install counted the guard: every call matched, the clone ran.
    [guard] = rewritten.guards
    assert guard["kernel"] == "matmul" and guard["calls"] > 0 and guard["hits"] == guard["calls"], guard
    proc = _installed_run(rewritten.tuned_prefix, "dense 64 1")  # another size: the original, right answer
    assert proc.returncode == 0 and "PASSED" in proc.stdout, proc.stdout + proc.stderr
    plan = json.load(open(os.path.join(os.path.dirname(recipe), "r3-%s.json" % emitted["target"])))

    # A stale variant: tuned with another compiler than this machine's, on another version,
    # and emitted by an r3 whose build stages differ from this one's.
    path = os.path.join(os.path.dirname(recipe), "r3-%s.json" % emitted["target"])
    data = json.load(open(path))
    data["facts"]["compiler"] = "clang@7.0.0"
    data["facts"]["version"] = "0.9"
    json.dump(data, open(path, "w"))
    text = open(recipe).read()
    open(recipe, "w").write(re.sub(r"^R3_TOOLCHAIN = .*$", "R3_TOOLCHAIN = '0123456789abcdef'", text, flags=re.M))
    [unit] = data["units"]  # ... and the tuned unit's source changed (in the record build's kept stage)
    with open(os.path.join(data["facts"]["source_root"], unit["source"]), "a") as f:
        f.write("/* changed */\n")
    rc, out, err = r3("--workspace", site["ws"], "status", "--spack-config", site["scope"])
    assert rc == 1
    assert "is stale: source: %s changed since tuning" % unit["source"] in out, out
    assert re.search(r"r3-dense +\S+ +matmul +[\d.]+x +[\d.]+x \[", out), out
    assert re.search(r"r3-dense target=\S+ is stale: compiler: tuned with clang 7\.0\.0", out), out
    assert "is stale: version: tuned on 0.9, the recipe now prefers 1.0" in out
    assert "is stale: r3: emitted by an r3 that builds tuned units differently (toolchain 0123456789abcdef" in out

    # Emitting for a second target adds to the package: the same record, as if made on
    # another microarchitecture, and the first target's plan (with its check) stays.
    first, other = emitted["target"], "x86_64_v2" if emitted["target"] != "x86_64_v2" else "x86_64_v3"
    [record_json] = [
        p
        for p in glob.glob(os.path.join(site["ws"], "runs", "*", "record.json"))
        if json.load(open(p)).get("spack", {}).get("package") == "r3-dense"
    ]
    data = json.load(open(record_json))
    data["spack"]["target"] = other
    json.dump(data, open(record_json, "w"))
    rc, out, err = r3("--workspace", site["ws"], "emit", "r3-dense", "--json")
    assert rc == 0, err
    again = json.loads(out)
    assert again["target"] == other and again["targets"] == sorted([first, other]) and again["recipe"] == recipe
    text = open(recipe).read()
    assert "'r3-%s.json'" % first in text and "'r3-%s.json'" % other in text
    assert json.load(open(path))["facts"]["check"]["pairs"] == 2

    # Emit with nothing worth building: a result that did not win, then one an older r3 wrote
    # (no "won": its winner within noise of the build, 1.03x, is judged as tune judges it now).
    [result_json] = glob.glob(os.path.join(site["ws"], "results", "*.json"))
    written = json.load(open(result_json))
    older = {k: v for k, v in written.items() if k != "won"}
    for result in (dict(written, won=False, winner="baseline", speedup=1.0), dict(older, speedup=1.03)):
        json.dump(result, open(result_json, "w"))
        rc, out, err = r3("--workspace", site["ws"], "emit", "r3-dense")
        why = "nothing beat the baseline"
        assert rc != 0 and err.strip() == "r3 emit: error: no tuned kernel of r3-dense to build: matmul: " + why, err


def _measured(app_speedup, kernel_speedups):
    """What a check of the application measured (``check.AppCheck``): scripted, since no
    test may depend on timing; the verdict is what is under test."""
    kernels = [
        KernelCheck(name, 10, 1.0, 1.0 / s, s, s * 0.97, s * 1.03, 2.0, fidelity(s, 2.0), 0.5, 0.5)
        for name, s in kernel_speedups.items()
    ]
    return AppCheck(
        "r3-dense",
        "t",
        3,
        1.0,
        1.0 / app_speedup,
        app_speedup,
        app_speedup * 0.97,
        app_speedup * 1.03,
        1.5,
        fidelity(app_speedup, 1.5),
        "",
        "",
        "dense 120 1",
        kernels,
    )


def test_the_check_takes_a_kernel_slower_in_the_application_out_of_the_variant(site):
    """After the check (roundtrip.verdict): a kernel measured slower inside the application
    leaves the variant; with none left, the variant is withdrawn and the verdict says why.
    A variant that holds stays, and ``--keep-variant`` keeps one whatever it measured."""
    ws = Workspace(site["ws"])
    [result_json] = glob.glob(os.path.join(site["ws"], "results", "*.json"))
    result = json.load(open(result_json))
    # (the tune confirmed other candidates too: none here, so a slower kernel leaves)
    assert all(a["speedup"] > 1.0 for a in result.get("alternates", []))
    json.dump(dict(result, won=True, speedup=2.0, winner="O3", alternates=[]), open(result_json, "w"))
    results = {"matmul": KernelResult.from_json(json.load(open(result_json)))}
    emitted = []

    def emit_once(exclude, alternate):
        emitted.append(spack_emit.emit(ws, "r3-dense", exclude=exclude, alternate=alternate))
        return emitted[-1]

    verdict = act(emit_once, lambda e: _measured(0.9, {"matmul": 0.8}), results)
    assert not verdict.emitted and len(verdict.checks) == 1
    [taken] = verdict.taken_out
    assert taken.kernel == "matmul" and taken.round == 1 and taken.app_speedup == 0.8
    assert verdict.why.startswith("every tuned kernel was taken out of the variant: matmul taken out after check 1")
    plan = emitted[0]
    assert not os.path.exists(plan.plan_path)  # this target's plan is gone, and the recipe does not name it
    assert not os.path.exists(plan.recipe) or "r3-%s.json" % plan.target not in open(plan.recipe).read()

    # the application not faster, its one kernel not slower inside it: withdrawn all the same
    verdict = act(emit_once, lambda e: _measured(0.98, {"matmul": 1.01}), results)
    assert not verdict.emitted and "not faster" in verdict.why and not os.path.exists(emitted[-1].plan_path)

    # what holds stays; a kernel far from replay's figure is flagged with a likely cause
    verdict = act(emit_once, lambda e: _measured(1.3, {"matmul": 1.5}), results)
    assert verdict.emitted and not verdict.taken_out and os.path.exists(emitted[-1].plan_path)
    [flag] = verdict.flagged
    assert flag.kernel == "matmul" and flag.replay_speedup == 2.0 and flag.cause

    verdict = act(emit_once, lambda e: _measured(0.5, {"matmul": 0.5}), results, acting=False)
    assert verdict.emitted and os.path.exists(emitted[-1].plan_path)

    # slower in the application, with a confirmed alternate: the alternate takes its place,
    # and the plan built and predicted is the alternate's
    alternate = Alternate(Variant(pipeline=Pipeline(opt="2", unroll=False), launch=Launch()), 1.6, 1.5, 1.7)
    json.dump(dict(result, won=True, speedup=2.0, alternates=[alternate.to_json()]), open(result_json, "w"))
    results = {"matmul": KernelResult.from_json(json.load(open(result_json)))}

    def measure(e):
        [kernel] = [k for u in e.plan.units for k in u.kernels]
        return _measured(1.2, {"matmul": 1.3}) if kernel.pipeline.opt == "2" else _measured(0.9, {"matmul": 0.8})

    verdict = act(emit_once, measure, results)
    assert verdict.emitted and not verdict.taken_out and len(verdict.checks) == 2
    [swap] = verdict.replaced
    assert swap.kernel == "matmul" and swap.round == 1 and swap.app_speedup == 0.8
    assert swap.now.startswith("O2") and swap.replay_speedup == 1.6
    plan = json.load(open(emitted[-1].plan_path))
    [kernel] = [k for u in plan["units"] for k in u["kernels"]]
    assert kernel["pipeline"]["opt"] == "2" and kernel["speedup"] == 1.6
    # the alternate slower too: nothing left to try, the kernel leaves and the variant goes
    verdict = act(emit_once, lambda e: _measured(0.9, {"matmul": 0.8}), results)
    assert not verdict.emitted and len(verdict.replaced) == 1 and verdict.taken_out[0].round == 2


def test_cmake_package_round_trip(site):
    rc, out, err = tune(site, "r3t-mxmcm", "mxmcm 20", "--kernel", "mxm")
    assert rc == 0, err
    res = json.loads(out)
    [kernel] = res["kernels"]
    assert kernel["kernel"] == "mxm" and kernel["winner"] != "baseline", kernel
    text = open(res["emitted"]["recipe"]).read()
    assert "from spack.pkg.r3test.r3t_mxmcm import *" in text  # CMakeBuilder comes with it
    for prefix in (res["check"]["tuned_prefix"], res["check"]["untuned_prefix"]):
        proc = _installed_run(prefix, "mxmcm 20")
        assert proc.returncode == 0 and "PASSED" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (["record", "r3-no-such-package", "--run", "true"], r"unknown package r3-no-such-package"),
        (["record", "r3-dense@9.9", "--run", "dense 8 1"], r"r3-dense@9\.9.* does not concretize: .*reasons: .*\S"),
        (["record", "r3t-broken", "--run", "true"], r"the record build of r3t-broken.* failed: .*\(log: \S+\)"),
        (["record", "r3-heat"], r"r3-heat declares no stand-alone test to run: give --run CMD"),
        (["emit", "r3-cg"], r"nothing recorded for r3-cg"),
    ],
)
def test_bad_input_is_one_line_and_touches_nothing(site, spack_root, tmp_path, argv, message):
    ws = str(tmp_path / "ws")
    extra = ["--spack-config", site["scope"]] if argv[0] == "record" else []
    before = _user_spack_state(spack_root)
    rc, out, err = r3("--workspace", ws, *argv, *extra)
    assert rc != 0
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and re.search(message, lines[0]), err
    assert "Traceback" not in err
    assert _user_spack_state(spack_root) == before  # the user's installs and configuration


def _user_spack_state(spack_root):
    """What a run must leave alone: the files of the user's Spack configuration and of
    Spack's own install tree and configuration, with their sizes and times."""
    state = {}
    for top in (
        os.path.expanduser("~/.spack"),
        os.path.join(spack_root, "opt", "spack"),
        os.path.join(spack_root, "etc", "spack"),
    ):
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if d not in ("cache", "bootstrap")]  # Spack's own caches
            for name in filenames:
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                state[path] = (st.st_size, st.st_mtime_ns)
    return state


def test_spack_r3_help_lists_the_subcommands(site, spack_root, tmp_path):
    ext = write_scope(str(tmp_path / "ext"), config={"extensions": [EXTENSION_ROOT]})
    env = dict(os.environ, SPACK_PYTHON=os.environ.get("SPACK_PYTHON") or sys.executable)
    proc = subprocess.run(
        [os.path.join(spack_root, "bin", "spack"), "-C", ext, "r3", "-h"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    for sub in ("recipe", "record", "kernels", "replay", "tune", "emit", "status"):
        assert re.search(r"^\s+%s\s" % sub, proc.stdout, re.M), (sub, proc.stdout)


def test_package_without_a_recipe_gets_one_then_records(site, tmp_path):
    """The recipe stage first (rule-based generator, refined against real installs), then
    the same record path through Spack."""
    tree = os.path.join(ROOT, "tests", "trees", "r3tvec")
    rc, out, err = r3(
        "--workspace",
        site["ws"],
        "record",
        "r3tvec",
        "--source",
        tree,
        "--run",
        "r3tvec-demo",
        "--spack-config",
        site["scope"],
        "--json",
    )
    assert rc == 0, err
    res = json.loads(out)
    assert res["captures"], res
    assert any(k["source"] == "r3tvec.c" for k in res["kernels"]), res["kernels"]


def test_a_record_build_writes_only_to_the_sandbox_and_its_record(site, tmp_path):
    """The record build runs the tree's own build system, confined as a recipe's trial
    build is (spack.confinement): a Makefile's writes to /tmp and $HOME fail (make goes on
    past them: '-'), the build and the record pass, and the tree given stays as it was."""
    import shutil
    import uuid

    from spack_r3 import sourcetree

    tag = uuid.uuid4().hex[:10]
    escapes = ["/tmp/r3-escape-%s" % tag, os.path.join(os.path.expanduser("~"), "r3-escape-%s" % tag)]
    tree = tmp_path / "dense"
    shutil.copytree(os.path.join(ROOT, "repos", "r3", "sources", "dense"), tree)
    makefile = (tree / "Makefile").read_text()
    hostile = "\t-echo escaped > %s\n\t-echo escaped >> %s\n" % tuple(escapes)
    (tree / "Makefile").write_text(makefile.replace("$(APP): $(OBJS)\n", "$(APP): $(OBJS)\n" + hostile, 1))
    before = sourcetree.digest(str(tree))
    try:
        rc, out, err = r3(
            "--workspace",
            str(tmp_path / "ws"),
            "record",
            "r3-dense@1.0 dev_path=%s" % tree,
            *flags(run="dense 60 1", kernel="matmul", spack_config=site["scope"], json=True),
        )
        assert rc == 0, err
        res = json.loads(out)
        assert [k["kernel"] for k in res["kernels"] if k["capture"]] == ["matmul"] and len(res["captures"]) == 1
        assert [p for p in escapes if os.path.exists(p)] == []
        assert sourcetree.digest(str(tree)) == before
    finally:
        for p in escapes:
            if os.path.exists(p):
                os.remove(p)


def test_a_recipe_broken_for_clang_is_repaired_in_an_overlay_and_recorded(site, tmp_path):
    """The package's own recipe fails the record build (``-O3-fopenmp``); the failure is
    diagnosed, a copy of the recipe is repaired in the workspace's overlay repository, the
    record goes on from it, and the change is written as a patch for upstream. The
    package's own recipe is untouched."""
    own = site["tmp"] / "testrepo" / "packages" / "r3t-glued" / "package.py"
    before = own.read_text()
    ws = str(tmp_path / "ws")
    rc, out, err = r3("--workspace", ws, "record", "r3t-glued", *flags(run="glued 2", spack_config=site["scope"]))
    assert rc == 0, err
    told = [line for line in out.splitlines() if "is repaired" in line]
    assert len(told) == 1 and "-O3-fopenmp" in told[0] and "put a space before" in told[0], out
    assert [e.kernel for e in list_captures(Workspace(ws))] == ["mxm"]
    assert own.read_text() == before
    repaired = os.path.join(ws, "spack", "overlay", "packages", "r3t-glued", "package.py")
    assert 'cflags += " " + self.compiler.openmp_flag' in open(repaired).read()
    patch = open(os.path.join(ws, "spack", "overlay", "upstream", "r3t-glued.patch")).read()
    assert "-        cflags += self.compiler.openmp_flag\n" in patch
    assert '+        cflags += " " + self.compiler.openmp_flag\n' in patch


def test_a_fortran_package_records_through_spacks_fortran_wrapper(site):
    """r3-fheat (repos/r3) through Spack built %clang: the sandbox's clang has the flang of
    its version as its Fortran compiler, SPACK_FC points at r3-spack-fc, and r3-record
    keeps flang's units; the Fortran kernels and the C one replay verified."""
    rc, out, err = r3(
        "--workspace",
        site["ws"],
        "record",
        "r3-fheat",
        "--run",
        "fheat 64 100",
        "--spack-config",
        site["scope"],
        "--json",
    )
    assert rc == 0, err
    caps = {c.kernel: c for c in list_captures(Workspace(site["ws"])) if c.source_file.endswith((".f90", ".f", ".c"))}
    for kernel, compiler in (("_QMfieldsPsmooth", "flang"), ("relax_", "flang"), ("field_norm", "clang")):
        cap = caps[kernel]
        assert compiler in os.path.basename(cap.compile_command[0]), cap.compile_command
        rc, out, err = r3("--workspace", site["ws"], "replay", cap.id, "--repeat", "2", "--json")
        assert rc == 0 and json.loads(out)["verified"] is True, err

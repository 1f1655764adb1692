"""The demo applications (repos/r3): built with make, checked, packed, installed with Spack."""

import glob
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
R3_REPO = os.path.join(REPO_ROOT, "repos", "r3")
SOURCES = os.path.join(R3_REPO, "sources")
PACK = os.path.join(REPO_ROOT, "scripts", "pack_demos.py")

# app -> (small run arguments, arguments that must make its self-check fail)
DEMOS = {
    "heat": (["64", "200"], ["64", "200", "0.3"]),  # alpha > 1/4: unstable, max principle fails
    "cg": (["32", "500"], ["32", "500", "1e-30"]),  # tolerance below rounding: unreachable
    "nbody": (["128", "20"], ["128", "50", "0.5"]),  # huge time step: energy not conserved
    "dense": (["64", "2"], ["64", "2", "1e-3"]),  # injected error in every product: checks fail
}
RESULT = r"^{app}: .* PASSED$"


def run_app(exe, args, threads="2"):
    env = dict(os.environ, OMP_NUM_THREADS=threads)
    return subprocess.run([exe] + args, capture_output=True, text=True, timeout=120, env=env)


def sh(args, cwd=None, timeout=300):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def build(clang, app, dest, *make_args):
    """A fresh copy of the app's sources in ``dest``, built with ``make CC=clang``."""
    src = os.path.join(str(dest), app)
    shutil.copytree(os.path.join(SOURCES, app), src)
    proc = sh(["make", "CC=" + clang] + list(make_args), cwd=src)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return src


@pytest.mark.parametrize("app", sorted(DEMOS))
def test_demo_builds_runs_and_checks(clang, app, tmp_path):
    src = build(clang, app, tmp_path)
    # compile and link both go through $(CC), each .c separately
    exe = os.path.join(src, app)
    assert os.access(exe, os.X_OK)
    good, bad = DEMOS[app]

    proc = run_app(exe, good)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(RESULT.format(app=app), proc.stdout.strip(), re.M), proc.stdout

    proc = run_app(exe, bad)
    assert proc.returncode != 0, "self-check did not fail: " + proc.stdout
    assert "FAILED" in proc.stdout and "self-check failed" in proc.stderr

    proc = sh(["make", "CC=" + clang, "check"], cwd=src)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASSED" in proc.stdout

    prefix = tmp_path / "prefix"
    proc = sh(["make", "install", "PREFIX=%s" % prefix], cwd=src)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert os.access(str(prefix / "bin" / app), os.X_OK)

    proc = sh(["make", "clean"], cwd=src)
    assert proc.returncode == 0
    assert not glob.glob(os.path.join(src, "*.o")) and not os.path.exists(exe)


@pytest.mark.parametrize("app", sorted(DEMOS))
def test_demo_serial_build(clang, app, tmp_path):
    """OPENMP=0 builds plain C11 with the pragmas ignored, and the result still checks out."""
    src = build(clang, app, tmp_path, "OPENMP=0", "CFLAGS=-O1 -Wall -Werror -Wno-unknown-pragmas")
    proc = run_app(os.path.join(src, app), DEMOS[app][0])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_make_uses_cc_for_compile_and_link(clang, tmp_path):
    """The record tool is a compiler launcher: every compile and the link must go through $(CC)."""
    src = build(clang, "cg", tmp_path)
    proc = sh(["make", "-B", "-n", "CC=LAUNCHER " + clang], cwd=src)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("LAUNCHER " + clang) for ln in lines), proc.stdout
    assert sum(" -c " in ln for ln in lines) == 2 and any(ln.endswith("-lm") for ln in lines)


def _load_pack():
    spec = importlib.util.spec_from_file_location("pack_demos", PACK)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pack_demos_check_passes():
    proc = sh([sys.executable, PACK, "--check"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_pack_demos_is_deterministic_and_detects_staleness(tmp_path, monkeypatch):
    pack = _load_pack()
    src = os.path.join(SOURCES, "heat")
    assert pack.make_tarball(src, "heat-1.0") == pack.make_tarball(src, "heat-1.0")

    repo = tmp_path / "r3"
    shutil.copytree(R3_REPO, str(repo))
    monkeypatch.setattr(pack, "REPO", str(repo))
    monkeypatch.setattr(pack, "ROOT", str(tmp_path))
    assert pack.main(["--check"]) == 0
    with open(str(repo / "sources" / "heat" / "README"), "a") as f:
        f.write("changed\n")
    assert pack.main(["--check"]) == 1
    assert pack.main([]) == 0
    assert pack.main(["--check"]) == 0
    shas = []
    for root in (str(repo), R3_REPO):
        with open(os.path.join(root, "packages", "r3-heat", "package.py")) as f:
            shas.append(pack.recipe_sha(f.read(), "1.0"))
    assert shas[0] != shas[1]


def _spack(spack_root, scope, *args, timeout=600):
    return sh([os.path.join(spack_root, "bin", "spack"), "-C", str(scope)] + list(args), timeout=timeout)


def test_spack_installs_demos(spack_root, clang, tmp_path):
    """One `spack install` of all four recipes into a private install tree, then run them."""
    scope = tmp_path / "scope"
    scope.mkdir()
    opt = tmp_path / "opt"
    version = sh([clang, "-dumpversion"]).stdout.strip()
    arch = _spack(spack_root, scope, "arch", "--operating-system", timeout=120)
    assert arch.returncode == 0, arch.stderr
    cxx = os.path.join(os.path.dirname(clang), os.path.basename(clang).replace("clang", "clang++", 1))
    (scope / "config.yaml").write_text(
        "config:\n"
        "  install_tree:\n    root: %s\n"
        % opt
        + "  source_cache: %s\n" % (tmp_path / "source-cache")
        + "  build_stage: [%s]\n" % (tmp_path / "stage")
    )
    (scope / "repos.yaml").write_text("repos:\n- %s\n" % R3_REPO)
    (scope / "bootstrap.yaml").write_text("bootstrap:\n  enable: false\n")
    (scope / "compilers.yaml").write_text(
        "compilers:\n- compiler:\n"
        "    spec: clang@=%s\n"
        % version
        + "    paths: {cc: %s, cxx: %s, f77: null, fc: null}\n" % (clang, cxx if os.path.exists(cxx) else "null")
        + "    operating_system: %s\n" % arch.stdout.strip()
        + "    target: %s\n" % platform.machine()
        + "    modules: []\n"
    )
    (scope / "packages.yaml").write_text(
        "packages:\n  gmake:\n    buildable: false\n"
        "    externals:\n    - spec: gmake@%s\n      prefix: /usr\n" % _gmake_version()
    )

    specs = ["r3-heat%clang", "r3-cg%clang", "r3-nbody%clang", "r3-dense%clang"]
    proc = _spack(spack_root, scope, "install", "--fail-fast", *specs)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    for app, (good, _) in sorted(DEMOS.items()):
        pattern = os.path.join(str(opt), "**", "r3-%s-1.0-*" % app, "bin", app)
        found = glob.glob(pattern, recursive=True)
        assert len(found) == 1, found
        proc = run_app(found[0], good)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert re.search(RESULT.format(app=app), proc.stdout.strip(), re.M), proc.stdout


def _gmake_version():
    out = sh(["make", "--version"]).stdout
    m = re.search(r"GNU Make (\d+(\.\d+)*)", out)
    if not m:
        pytest.skip("GNU make not found")
    return m.group(1)

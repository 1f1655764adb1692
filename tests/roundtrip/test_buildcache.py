"""Tuned binaries for everyone: ``spack r3 publish`` pushes the +r3 build the check
measured to a build cache, and a second Spack install tree on this machine installs it
from there (``--cache-only``: nothing is built) and runs it; ``spack r3 status --mirror``
says which targets the cache serves and which are stale. Real Spack, real build cache."""

import json
import os
import re
import subprocess

import pytest

from conftest import REPO_ROOT
from spack_r3.emit.targetcheck import FEATURE_MACROS
from spack_r3.roundtrip.publish import INDEX
from spack_r3.spack.repos import write_scope
from test_spack_roundtrip import r3

pytestmark = pytest.mark.spack

DEMO_REPO = os.path.join(REPO_ROOT, "repos", "r3")


@pytest.fixture(scope="module")
def tuned(spack_root, clang, tmp_path_factory):
    """r3-dense tuned (small budget) and checked in one workspace."""
    tmp = tmp_path_factory.mktemp("buildcache")
    ws = str(tmp / "ws")
    rc, out, err = r3(
        "--workspace", ws, "tune", "r3-dense", "--spack-repo", DEMO_REPO, "--run", "dense 120 1",
        "--kernel", "matmul", "--mutator", "none", "--budget", "4", "--confirm-rounds", "1",
        "--confirm-pairs", "3", "--check-pairs", "2", "--check-kernel-pairs", "0", "--keep-variant", "--json",
    )  # fmt: skip
    assert rc == 0, err
    res = json.loads(out)
    assert res["emitted"], res
    return {"ws": ws, "tmp": tmp, "tune": res}


def _spack(spack_root, *argv, cwd=None):
    env = dict(os.environ, SPACK_PYTHON=os.environ.get("SPACK_PYTHON", ""))
    env.pop("SPACK_ENV", None)
    return subprocess.run(
        [os.path.join(spack_root, "bin", "spack"), "--color=never", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=1800,
    )


def test_a_published_tuned_build_installs_from_the_cache_on_another_tree_and_runs(tuned, spack_root):
    ws, tmp = tuned["ws"], tuned["tmp"]
    mirror = str(tmp / "mirror")
    rc, out, err = r3("--workspace", ws, "publish", "r3-dense", "--spack-repo", DEMO_REPO, "--mirror", mirror, "--json")
    assert rc == 0, err
    done = json.loads(out)
    entry = done["entry"]
    target = tuned["tune"]["emitted"]["target"]
    assert entry["package"] == "r3-dense" and entry["target"] == target and not entry["signed"]
    # the build the check measured is the one pushed (not built again)
    assert entry["hash"] in tuned["tune"]["check"]["tuned_prefix"]
    assert entry["measured_app_speedup"] == pytest.approx(tuned["tune"]["check"]["app_speedup"])
    # the cache is Spack's own, and beside it the recipes: the tuned package and the demo one it inherits
    assert os.path.isfile(os.path.join(mirror, "build_cache", "index.json"))
    shipped = sorted(os.path.basename(p) for p in done["repos"])
    assert shipped == ["r3", "r3tuned"], done["repos"]
    assert os.path.isfile(os.path.join(mirror, "r3", "repos", "r3tuned", "packages", "r3-dense", "r3-%s.json" % target))

    # Another install tree (as another user's, or another node's): its own root and caches,
    # the published scope, and --cache-only: it installs the binary or fails, never builds.
    tree = tmp / "tree2"
    scope = write_scope(
        str(tree / "scope"),
        config={
            "install_tree": {"root": str(tree / "opt")},
            "misc_cache": str(tree / "misc"),
            "build_stage": [str(tree / "stage")],
        },
    )
    # the line publish printed: the measured build, by its hash
    line = done["install"].split()
    assert line[:3] == ["spack", "-C", done["scope"]] and line[3:] == [
        "install", "--cache-only", "--no-check-signature", "/" + entry["hash"]
    ]  # fmt: skip
    proc = _spack(spack_root, "-C", scope, *line[1:])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "from binary cache" in proc.stdout
    # ... and by spec, where the consumer's solve agrees (the same compiler here): the same build
    proc = _spack(spack_root, "-C", scope, "-C", done["scope"], "install", "--cache-only", "--no-check-signature",
                  "r3-dense+r3")  # fmt: skip
    assert proc.returncode == 0 and entry["hash"][:7] in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    where = _spack(spack_root, "-C", scope, "-C", done["scope"], "location", "-i", "/" + entry["hash"])
    prefix = where.stdout.strip()
    assert where.returncode == 0 and prefix.startswith(str(tree / "opt")), where.stderr
    spec = json.load(open(os.path.join(prefix, ".spack", "spec.json")))["spec"]["nodes"][0]
    assert spec["parameters"]["r3"] is True and spec["namespace"] == "r3tuned"
    ran = subprocess.run([os.path.join(prefix, "bin", "dense"), "120", "1"], capture_output=True, text=True)
    assert ran.returncode == 0 and "PASSED" in ran.stdout, ran.stdout + ran.stderr
    # its tuned units check the CPU at run: one without what they were compiled for is refused
    binary = open(os.path.join(prefix, "bin", "dense"), "rb").read()
    if b"r3: this program was tuned for" in binary:  # (x86, and tuned beyond the baseline: emit/targetcheck.py)
        every = ",".join(name for _, name in FEATURE_MACROS)
        refused = subprocess.run(
            [os.path.join(prefix, "bin", "dense"), "120", "1"],
            capture_output=True,
            text=True,
            env=dict(os.environ, R3_TARGET_CHECK_LACKS=every),
        )
        assert refused.returncode == 1 and "which this CPU lacks" in refused.stderr, refused.stderr

    # status: the target the cache serves, current; then stale once the workspace's tuned
    # package builds another plan, and when the cache was written by another r3.
    rc, out, err = r3("--workspace", ws, "status", "--mirror", mirror, "--json")
    assert rc == 0, out + err
    [row] = json.loads(out)["entries"]
    assert row["target"] == target and row["stale"] == [] and row["runs_here"] is True
    recipe = tuned["tune"]["emitted"]["recipe"]
    text = open(recipe).read()
    open(recipe, "w").write(text.replace(entry["plan_digest"], "0" * len(entry["plan_digest"])))
    index = os.path.join(mirror, INDEX)
    data = json.load(open(index))
    data["entries"][0]["toolchain"] = "0123456789abcdef"
    json.dump(data, open(index, "w"))
    rc, out, err = r3("--workspace", ws, "status", "--mirror", mirror)
    open(recipe, "w").write(text)
    assert rc == 1, out + err
    assert re.search(r"r3-dense +%s +%s .* stale" % (target, entry["hash"][:7]), out), out
    assert (
        "r3-dense target=%s in the cache is stale: plan: the workspace's tuned package builds another plan" % target
        in out
    )
    assert "is stale: r3: built by an r3 that builds tuned units differently (toolchain 0123456789abcdef" in out


def test_publishing_what_was_never_tuned_is_one_line(tuned, tmp_path):
    rc, out, err = r3("--workspace", tuned["ws"], "publish", "r3-stream", "--mirror", str(tmp_path / "m"))
    assert rc != 0 and len(err.strip().splitlines()) == 1
    assert "r3-stream has no tuned variant" in err and not os.path.exists(tmp_path / "m" / "r3")
    rc, out, err = r3("--workspace", tuned["ws"], "status", "--mirror", str(tmp_path))
    assert rc != 0 and "has no spack-r3 index" in err

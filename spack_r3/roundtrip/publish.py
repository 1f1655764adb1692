"""``spack r3 publish <package> --mirror DIR``: a tuned variant's builds, for everyone.

The ``+r3`` build of the package (the one the check measured; built again only if it is
not installed in the workspace's sandbox) goes to a Spack build cache with Spack's own
``spack buildcache push``, its dependencies with it, signed with a key or unsigned. Beside
the cache, under ``DIR/r3/``, goes what another Spack needs to install it from there:

    DIR/r3/repos/<namespace>/   the tuned package (namespace r3tuned) and, where it is not
                                Spack's builtin, the recipe it inherits (the tuned package
                                imports it): copies, as they were when published
    DIR/r3/scope/               a configuration scope naming those repositories and the
                                cache as a mirror: on any other Spack,
                                ``spack -C DIR/r3/scope install --cache-only /<hash>``
    DIR/r3/index.json           what the cache serves: per (package, target) the spec's hash,
                                the plan's build digest, the toolchain, the speedups measured

The install names the build by its hash: exactly what the check measured (a consumer's own
solve of ``<pkg>+r3`` may pick another compiler or variant, a ``dev_path`` one never
matches). The target is checked on the other side: ``spack r3 status --mirror`` says
whether the machine can run each target; an install by spec (``<pkg>+r3``) gets Spack's
check (its concretizer takes only targets the host can run); and at run, the tuned units'
own check (``emit/targetcheck.py``) stops a binary on a CPU without the features its
kernels were compiled for, whichever way it was installed.

``published(mirror)`` reads the index back for ``spack r3 status --mirror``: which targets
the cache serves and which are stale (the workspace's tuned package now builds another plan,
or an r3 that builds tuned units differently emitted it).
"""

import datetime
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from typing import List, Optional

from ..emit.apply import toolchain_digest
from ..errors import R3Error
from ..fileutil import write_atomic
from ..spack.repos import create_repo, open_repo, write_scope
from . import pkgtxn
from .emit import NAMESPACE, default_repo
from .record import install, latest_spack_record, open_site, with_clang
from .status import named_plans, toolchain_of

INDEX = os.path.join("r3", "index.json")


@dataclass
class Entry:
    """One published build: a package's ``+r3`` for one target."""

    package: str
    target: str
    spec: str  # the spec published (with +r3)
    hash: str
    plan_digest: str  # the build digest package.py named for this target's plan
    toolchain: str  # the r3 that built it (emit.apply.toolchain_digest)
    published: str
    signed: bool
    predicted_app_speedup: Optional[float] = None
    measured_app_speedup: Optional[float] = None
    stale: List[str] = field(default_factory=list)  # (filled by ``published``)


@dataclass
class Published:
    mirror: str
    entry: Entry
    scope: str
    repos: List[str]
    pushed: List[str]  # the specs Spack pushed, as it named them


def publish(workspace, package, mirror, key=None, user_scopes=(), extra_repos=(), say=None):
    """Push ``package``'s ``+r3`` build to the build cache at ``mirror`` (a directory),
    with the recipes and the scope another Spack installs it with. ``key``: sign with this
    GPG key (Spack's ``--key``); None: unsigned."""
    say = say or (lambda line: None)
    mirror = os.path.abspath(mirror)
    repo_root = default_repo(workspace)
    repo = open_repo(repo_root)
    recipe = repo.recipe_path(package) if repo else None
    if not recipe or not os.path.isfile(recipe):
        raise R3Error("%s has no tuned variant in %s: run spack r3 tune (or emit) first" % (package, repo_root))
    record, facts = latest_spack_record(workspace, package)
    if record is None:
        raise R3Error("nothing recorded for %s: run spack r3 tune %s first" % (package, package))
    target = facts.get("target") or "unknown"
    files = pkgtxn.snapshot(os.path.dirname(recipe)) or {}
    text = files.get("package.py", b"").decode(errors="surrogateescape")
    plans = named_plans(text)
    if target not in plans:
        raise R3Error(
            "%s's tuned package has no plan for target=%s (it has %s): tune it on this target first"
            % (package, target, ", ".join(sorted(plans)) or "none")
        )
    plan_file, plan_digest = plans[target]
    # what built the +r3 install: the r3 package.py names (Spack's hash follows it), which
    # may be older than this one (status then calls the workspace's variant stale too)
    built_by = toolchain_of(text) or "unknown"
    if built_by != toolchain_digest():
        say(
            "warning: %s's tuned package was emitted by an r3 that builds tuned units differently "
            "(toolchain %s, now %s): the build published is that one; tune again for this r3's"
            % (package, built_by, toolchain_digest())
        )
    plan = json.loads(files[plan_file]) if plan_file in files else {}
    check = (plan.get("facts") or {}).get("check") or {}

    # the repositories the record built from (an overlay with a repaired recipe among them), as the check
    repos = list(extra_repos) + [r for r in facts.get("repos", []) if r not in extra_repos]
    site = open_site(workspace, user_scopes, repos, front_repo=repo_root, say=say)
    spec = with_clang("%s target=%s" % (facts.get("spec") or package, target), "+r3")
    say("building (or finding) %s through Spack" % spec)
    built = install(site, spec, os.path.join(workspace.spack_dir, "publish", package), "the +r3 build")

    os.makedirs(mirror, exist_ok=True)
    args = ["buildcache", "push", "--update-index"]
    args += ["--key", key] if key else ["--unsigned"]
    say("pushing %s (/%s) and its dependencies to %s" % (package, built.hash[:7], mirror))
    res = site.spack.writing(mirror).run(*args, mirror, "/" + built.hash)
    if not res.ok:
        raise R3Error("spack buildcache push failed: %s" % (res.error_lines() or [res.output.strip()[-300:]])[0])
    pushed = [l.split("Pushed", 1)[1].strip() for l in res.output.splitlines() if "Pushed" in l]

    repos = _ship_recipes(site, mirror, package, parent_namespace(text), facts, repo_root)
    scope = write_scope(
        os.path.join(mirror, "r3", "scope"),
        repos=repos,
        extra={
            "mirrors.yaml": {"mirrors": {"r3-" + os.path.basename(mirror.rstrip("/")): {"url": "file://" + mirror}}}
        },
    )
    entry = Entry(
        package,
        target,
        spec,
        built.hash,
        plan_digest,
        built_by,
        datetime.datetime.now().isoformat(timespec="seconds"),
        bool(key),
        check.get("predicted_app_speedup"),
        check.get("app_speedup"),
    )
    _add_to_index(mirror, entry)
    return Published(mirror, entry, scope, repos, pushed)


def parent_namespace(text):
    """The namespace of the recipe a tuned package.py inherits (its import line), or None."""
    found = re.search(r"^from spack(?:\.pkg|_repo)\.(\w+)\.", text, re.M)
    return found.group(1) if found else None


def _ship_recipes(site, mirror, package, parent_ns, facts, repo_root):
    """Copy the tuned package and the recipe it inherits (unless builtin) into
    ``mirror/r3/repos``; the repositories' paths, the tuned one first."""
    layout = facts.get("layout") or "v1"
    out = []
    wanted = [(NAMESPACE, repo_root)]
    if parent_ns and parent_ns != "builtin":
        found = dict(site.spack.repo_list())
        if parent_ns not in found:
            raise R3Error(
                "the recipe %s's tuned package inherits (namespace %s) is not among Spack's repositories"
                % (package, parent_ns)
            )
        wanted.append((parent_ns, found[parent_ns]))
    for namespace, source_root in wanted:
        source = open_repo(source_root)
        recipe = source.recipe_path(package) if source else None
        if not recipe or not os.path.isfile(recipe):
            raise R3Error("%s is not in the repository %s (%s)" % (package, namespace, source_root))
        dest = create_repo(
            os.path.join(mirror, "r3", "repos", namespace),
            namespace,
            layout if namespace != NAMESPACE else (source.layout if source else layout),
        )
        target_dir = os.path.dirname(dest.recipe_path(package))
        files = pkgtxn.snapshot(os.path.dirname(recipe)) or {}
        tmp = target_dir + ".publishing"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        for name, data in files.items():
            path = os.path.join(tmp, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        old = target_dir + ".old"
        shutil.rmtree(old, ignore_errors=True)
        if os.path.isdir(target_dir):
            os.rename(target_dir, old)
        os.rename(tmp, target_dir)
        shutil.rmtree(old, ignore_errors=True)
        out.append(dest.path)
    return out


def _add_to_index(mirror, entry):
    path = os.path.join(mirror, INDEX)
    entries = [e for e in _read_index(path) if (e.package, e.target) != (entry.package, entry.target)]
    entries.append(entry)
    entries.sort(key=lambda e: (e.package, e.target))
    # (``stale`` is what ``published`` finds when read, never stored)
    data = {
        "published_by": "spack-r3",
        "entries": [{k: v for k, v in asdict(e).items() if k != "stale"} for e in entries],
    }
    write_atomic(path, json.dumps(data, indent=1) + "\n")


def _read_index(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as err:
        raise R3Error("%s is not a spack-r3 index: %s" % (path, err))
    fields = set(Entry.__dataclass_fields__)
    return [Entry(**{k: v for k, v in e.items() if k in fields}) for e in data.get("entries", [])]


def runs_here(target):
    """Whether this machine's CPU can run a build for ``target`` (an archspec
    microarchitecture: this host's, or one it descends from); None when archspec does
    not know the name."""
    import archspec.cpu

    known = archspec.cpu.TARGETS.get(target)
    return None if known is None else known <= archspec.cpu.host()


def published(mirror, workspace=None, package=None):
    """The entries of the cache at ``mirror``, each with why it is stale against the
    workspace's tuned package (another plan now) and this r3 (another toolchain)."""
    path = os.path.join(os.path.abspath(mirror), INDEX)
    if not os.path.isfile(path):
        raise R3Error("%s has no spack-r3 index (%s): publish to it with spack r3 publish" % (mirror, INDEX))
    entries = [e for e in _read_index(path) if not package or e.package == package]
    current = toolchain_digest()
    repo = open_repo(default_repo(workspace)) if workspace else None
    for e in entries:
        if e.toolchain != current:
            e.stale.append(
                "r3: built by an r3 that builds tuned units differently (toolchain %s, now %s)" % (e.toolchain, current)
            )
        recipe = repo.recipe_path(e.package) if repo else None
        if recipe and os.path.isfile(recipe):
            with open(recipe) as f:
                plans = named_plans(f.read())
            now = plans.get(e.target)
            if now is None:
                e.stale.append("plan: the workspace's tuned package has no plan for %s now" % e.target)
            elif now[1] != e.plan_digest:
                e.stale.append(
                    "plan: the workspace's tuned package builds another plan for %s now (publish again)" % e.target
                )
    return entries

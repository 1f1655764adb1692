"""Spack package repositories on disk: layouts, the package index, writing recipes.

Two layouts exist:

- ``v1`` (Spack 0.x): ``<repo>/repo.yaml`` + ``<repo>/packages/<name>/package.py``; recipes
  import ``from spack.package import *`` and build systems come from there too.
- ``v2`` (Spack 1.x): ``<root>/spack_repo/<namespace>/{repo.yaml,packages/<dir>/package.py}``
  with ``api: v2.x`` in repo.yaml; ``<dir>`` is the name with ``-`` -> ``_`` (and a leading
  ``_`` for names starting with a digit or being a Python keyword); build systems are
  imported from ``spack_repo.builtin.build_systems.<module>``.
"""

import json
import keyword
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set

from ..errors import R3Error
from ..fileutil import write_atomic

LAYOUTS = ("v1", "v2")


def package_dir_name(name, layout):
    if layout == "v1":
        return name
    d = name.replace("-", "_")
    if d[0].isdigit() or keyword.iskeyword(d):
        d = "_" + d
    return d


def class_name(name):
    """Spack's module-name -> class-name rule (``mod_to_class``)."""
    parts = re.sub(r"[-_]+", "-", name).split("-")
    cls = "".join(p[:1].upper() + p[1:].lower() for p in parts if p)
    if cls[:1].isdigit():
        cls = "_" + cls
    return cls


def _read_namespace(repo_yaml):
    ns, api = None, None
    with open(repo_yaml) as f:
        for line in f:
            m = re.match(r"\s*namespace:\s*['\"]?([\w.]+)['\"]?", line)
            if m:
                ns = m.group(1)
            m = re.match(r"\s*api:\s*['\"]?(v[\d.]+)", line)
            if m:
                api = m.group(1)
    return ns, api


@dataclass
class Repo:
    """One package repository; ``path`` is the directory Spack's ``repos:`` lists."""

    namespace: str
    path: str
    layout: str = "v1"

    @property
    def packages_dir(self):
        return os.path.join(self.path, "packages")

    def recipe_path(self, name):
        return os.path.join(self.packages_dir, package_dir_name(name, self.layout), "package.py")

    def has(self, name):
        return os.path.isfile(self.recipe_path(name))

    def package_names(self):
        if not os.path.isdir(self.packages_dir):
            return []
        out = []
        for d in os.listdir(self.packages_dir):
            if d.startswith("."):
                continue  # (as Spack: an emit's stage beside a package, ``roundtrip.pkgtxn``)
            if os.path.isfile(os.path.join(self.packages_dir, d, "package.py")):
                out.append(d if self.layout == "v1" else d.lstrip("_").replace("_", "-"))
        return sorted(out)

    def write_recipe(self, name, text):
        path = self.recipe_path(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, text)
        return path


def open_repo(path):
    """The repository at ``path`` (either layout), or None."""
    path = os.path.abspath(path)
    if os.path.isfile(os.path.join(path, "repo.yaml")):
        ns, api = _read_namespace(os.path.join(path, "repo.yaml"))
        layout = (
            "v2" if (api and api.startswith("v2")) or os.path.basename(os.path.dirname(path)) == "spack_repo" else "v1"
        )
        return Repo(ns or os.path.basename(path), path, layout)
    sr = os.path.join(path, "spack_repo")
    if os.path.isdir(sr):
        for ns in sorted(os.listdir(sr)):
            if os.path.isfile(os.path.join(sr, ns, "repo.yaml")):
                return open_repo(os.path.join(sr, ns))
    return None


def create_repo(root, namespace, layout):
    """Open the repository at ``root``, creating it in ``layout`` when absent."""
    existing = open_repo(root)
    if existing:
        return existing
    if layout not in LAYOUTS:
        raise R3Error("unknown repository layout %r" % layout)
    if not re.match(r"^[A-Za-z_]\w*$", namespace):
        raise R3Error("invalid repository namespace %r" % namespace)
    if layout == "v1":
        path = os.path.abspath(root)
        yaml_text = "repo:\n  namespace: %s\n" % namespace
    else:
        path = os.path.join(os.path.abspath(root), "spack_repo", namespace)
        yaml_text = "repo:\n  namespace: %s\n  api: v2.0\n" % namespace
    os.makedirs(os.path.join(path, "packages"), exist_ok=True)
    with open(os.path.join(path, "repo.yaml"), "w") as f:
        f.write(yaml_text)
    return Repo(namespace, path, layout)


def detect_layout(spack_version, repos=()):
    """The layout recipes must be written in for this Spack: 1.x (or any ``spack_repo``
    repository in use) means ``v2``; 0.x means ``v1``."""
    m = re.match(r"(\d+)\.", spack_version or "")
    if m and int(m.group(1)) >= 1:
        return "v2"
    for r in repos:
        if r.layout == "v2":
            return "v2"
    return "v1"


def write_scope(directory, repos=(), config=None, packages=None, extra=None):
    """A Spack configuration scope (``spack -C directory``); YAML written as JSON."""
    os.makedirs(directory, exist_ok=True)
    files = {}
    if repos:
        files["repos.yaml"] = {"repos": [os.path.abspath(r) for r in repos]}
    if config:
        files["config.yaml"] = {"config": config}
    if packages:
        files["packages.yaml"] = {"packages": packages}
    for name, data in (extra or {}).items():
        files[name] = data
    for name, data in files.items():
        with open(os.path.join(directory, name), "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
    return directory


# -- the package index: names, virtuals, recipe texts -------------------------------------

BASE_RE = re.compile(r"^class\s+\w+\s*\(([^)]*)\)\s*:", re.M)
DEP_RE = re.compile(r"depends_on\(\s*[\"']([A-Za-z0-9_][\w.-]*)")
VARIANT_RE = re.compile(r"variant\(\s*[\"']([\w-]+)[\"']")
PROVIDES_RE = re.compile(r"provides\(\s*((?:[\"'][^\"']+[\"']\s*,?\s*)+)")

BUILD_SYSTEM_BASES = {
    "CMakePackage": "cmake",
    "CachedCMakePackage": "cmake",
    "AutotoolsPackage": "autotools",
    "MakefilePackage": "makefile",
    "MesonPackage": "meson",
    "PythonPackage": "python",
    "Package": "generic",
    "BundlePackage": "bundle",
}


@dataclass
class RecipeInfo:
    name: str
    namespace: str
    path: str
    build_systems: List[str] = field(default_factory=list)
    dependencies: Set[str] = field(default_factory=set)
    variants: Set[str] = field(default_factory=set)
    provides: Set[str] = field(default_factory=set)
    layout: str = "v1"  # of the repository it is in: how a subclass imports it

    def text(self):
        with open(self.path, errors="replace") as f:
            return f.read()


def recipe_info(name, namespace, path, text=None, layout="v1"):
    if text is None:
        with open(path, errors="replace") as f:
            text = f.read()
    systems = []
    for m in BASE_RE.finditer(text):
        for base in m.group(1).split(","):
            base = base.strip().split(".")[-1]
            if base in BUILD_SYSTEM_BASES and BUILD_SYSTEM_BASES[base] not in systems:
                systems.append(BUILD_SYSTEM_BASES[base])
    for m in re.finditer(r"build_system\(([^)]*)\)", text):
        for bs in re.findall(r"[\"'](\w+)[\"']", m.group(1)):
            if bs in ("cmake", "autotools", "makefile", "meson", "python", "generic") and bs not in systems:
                systems.append(bs)
    provides = set()
    for m in PROVIDES_RE.finditer(text):
        for v in re.findall(r"[\"']([^\"']+)[\"']", m.group(1)):
            provides.add(re.split(r"[@+~ ]", v)[0])
    return RecipeInfo(
        name, namespace, path, systems, set(DEP_RE.findall(text)), set(VARIANT_RE.findall(text)), provides, layout
    )


class PackageIndex:
    """All recipes of a list of repositories (first one wins for a name)."""

    def __init__(self, repos):
        self.repos = list(repos)
        self.recipes: Dict[str, RecipeInfo] = {}
        self.virtuals: Dict[str, List[str]] = {}
        for repo in self.repos:
            for name in repo.package_names():
                if name in self.recipes:
                    continue
                info = recipe_info(name, repo.namespace, repo.recipe_path(name), layout=repo.layout)
                self.recipes[name] = info
                for v in info.provides:
                    self.virtuals.setdefault(v, []).append(name)

    def has(self, name):
        return name in self.recipes or name in self.virtuals

    def find(self, name) -> Optional[RecipeInfo]:
        return self.recipes.get(name)

    def names(self):
        return set(self.recipes) | set(self.virtuals)


def configured_repos(spack):
    """The repositories a Spack is configured with (through its scopes), opened."""
    out = []
    for _ns, path in spack.repo_list():
        r = open_repo(path)
        if r:
            out.append(r)
    return out

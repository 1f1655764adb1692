"""A package's own recipe, repaired where it fails the record build, in an overlay repository.

Spack's recipes break too, often only with the compiler r3 records with: one builtin
proxy app appends ``self.compiler.openmp_flag`` to ``-O3`` without a space, harmless where
that flag begins with one, and clang stops at ``-O3-fopenmp``. When a record build fails,
its diagnostics go through the recipe stage's rules (``recipe.fixes``); a fix they find is
made to a copy of the package's directory in the workspace's overlay repository
(``<ws>/spack/overlay``, namespace ``r3overlay``), which comes before the package's own
repository from then on, and the change is written as a patch to send upstream. The
package's own recipe is never touched.

    repaired = repair(workspace, name, recipe_path, layout, diagnostics, tree)   # Repaired or None
    path = existing(workspace, name)          # the overlay repository, where it has name
"""

import difflib
import os
import shutil
from dataclasses import dataclass, field
from typing import List, Optional

from ..recipe import fixes
from ..spack.repos import create_repo, open_repo

NAMESPACE = "r3overlay"
# the findings whose fix needs nothing but the recipe's text and the tree that was built (the
# rest need the tree's analysis): flags glued together; a compiler the Makefile names that the
# build cannot run (SimpleMOC's `CC = gcc`: the variable gets Spack's compiler)
REPAIRABLE = ("glued-flags", "missing-compiler")


@dataclass
class Repaired:
    repo: str  # the overlay repository (a path Spack's repos: takes)
    recipe: str  # the repaired package.py
    patch: str  # the change as a unified diff of the package's own recipe
    changes: List[str] = field(default_factory=list)


def overlay_root(workspace):
    return os.path.join(workspace.spack_dir, "overlay")


def existing(workspace, name) -> Optional[str]:
    """The overlay repository, where it holds a repaired recipe of ``name``; else None."""
    repo = open_repo(overlay_root(workspace))
    return repo.path if repo and repo.has(name) else None


def repair(workspace, name, recipe_path, layout, diagnostics, tree=None) -> Optional[Repaired]:
    """The recipe at ``recipe_path`` repaired for what ``diagnostics`` (a failed build's
    output and log) say, in the overlay; None where no rule knows a fix. ``tree``: the
    source directory the failed build built (read, never written)."""
    with open(recipe_path) as f:
        text = f.read()
    findings = [f for f in fixes.diagnose(diagnostics) if f.kind in REPAIRABLE]
    new, changes = fixes.apply(text, findings, index=None, tree=tree)
    if not new:
        return None
    repo = create_repo(overlay_root(workspace), NAMESPACE, layout)
    dest = os.path.dirname(repo.recipe_path(name))
    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    # the whole directory: patches and resources beside package.py go with it
    shutil.copytree(os.path.dirname(recipe_path), tmp, ignore=shutil.ignore_patterns("__pycache__"))
    with open(os.path.join(tmp, "package.py"), "w") as f:
        f.write(new)
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(tmp, dest)
    patch = os.path.join(overlay_root(workspace), "upstream", "%s.patch" % name)
    os.makedirs(os.path.dirname(patch), exist_ok=True)
    where = _in_repo(recipe_path)
    with open(patch, "w") as f:
        f.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), "a/" + where, "b/" + where))
    return Repaired(repo.path, repo.recipe_path(name), patch, changes)


def _in_repo(recipe_path):
    """The recipe's path from its repository's root up (``packages/<name>/package.py``,
    and above that what Spack's tree has: ``var/spack/repos/builtin/...``)."""
    parts = os.path.abspath(recipe_path).split(os.sep)
    for top in ("var", "spack_repo", "repos"):
        if top in parts:
            return "/".join(parts[parts.index(top) :])
    return "/".join(parts[-3:])

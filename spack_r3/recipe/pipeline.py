"""The recipe box end to end: retrieve, or analyze -> similar recipes -> generate -> refine.

``make_recipe(request)`` is what ``r3 recipe`` / ``spack r3 recipe`` run (and what ``tune``
calls first for a package Spack does not know).
"""

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Callable, List, Optional

from ..errors import R3Error
from ..fileutil import write_atomic
from ..lifetime import alive
from ..spack import repos as spack_repos
from ..spack.confinement import confinement
from ..spack.runner import Spack
from ..spack.sandbox import make_sandbox
from . import names
from .analyze import analyze
from .generate import ModelGenerator, RuleGenerator
from .refine import Refiner
from .retrieve import find_existing, similar
from .source import acquire, finalize

DEFAULT_NAMESPACE = "r3local"


@dataclass
class RecipeRequest:
    name: str
    source: Optional[str] = None
    repo: Optional[str] = None  # where a generated recipe goes (default <workspace>/repo)
    namespace: str = DEFAULT_NAMESPACE  # for a repository created here
    regenerate: bool = False
    max_attempts: int = 3
    examples: int = 3
    install: bool = True  # False: generate + validate + concretize only
    run_check: bool = True
    model: Optional[object] = None  # a spack_r3.model.client.ModelConfig, or None for rules
    spack_scopes: List[str] = field(default_factory=list)
    spack_root: Optional[str] = None
    initial_text: Optional[str] = None  # start refining from this recipe instead of generating
    layout: Optional[str] = None  # force v1/v2 (default: detected)
    # recipes retrieval must not show as examples (a benchmark leaves out the package's own)
    exclude_examples: List[str] = field(default_factory=list)


@dataclass
class RecipeResult:
    name: str
    status: str  # existing | installed | concretized | generated | failed
    recipe: Optional[str] = None
    repo: Optional[str] = None
    namespace: Optional[str] = None
    layout: Optional[str] = None
    build_system: Optional[str] = None
    generator: Optional[str] = None
    existing: Optional[dict] = None
    examples: List[dict] = field(default_factory=list)
    attempts: List[dict] = field(default_factory=list)
    unresolved: List[str] = field(default_factory=list)
    directory: Optional[str] = None
    check_passed: Optional[bool] = None

    @property
    def ok(self):
        return self.status in ("existing", "installed", "concretized", "generated")

    def to_dict(self):
        return asdict(self)


def _validate_name(name):
    import re

    if not re.match(r"^[a-z0-9][a-z0-9_-]*$", name or ""):
        raise R3Error("invalid package name %r (lower-case letters, digits, '-' and '_')" % name)


def target_repo(spack, request, workspace):
    """The repository generated recipes go to, created when absent, in the right layout."""
    path = request.repo or workspace.recipe_repo_dir
    existing = spack_repos.open_repo(path)
    if existing:
        return existing
    layout = request.layout or spack_repos.detect_layout(spack.version())
    return spack_repos.create_repo(path, request.namespace, layout)


def spack_with_repo(spack, repo, scope_dir):
    """A Spack whose configuration also lists ``repo`` (through a scope we own)."""
    configured = {os.path.realpath(p) for _ns, p in spack.repo_list()}
    if os.path.realpath(repo.path) in configured:
        return spack
    spack_repos.write_scope(scope_dir, repos=[repo.path])
    return spack.with_scopes(scope_dir)


def confined_spack(request, workspace):
    """The Spack trial builds run with: the workspace's own scope (install tree, stages,
    caches) below the user's ``--spack-config`` scopes, each call confined to writing where
    those name (``spack.confinement``). Nothing goes into the user's own Spack tree unless a
    scope given says so."""
    root = os.path.join(workspace.spack_dir, "recipe")
    own = make_sandbox(root, scope_name="scope")
    spack = Spack(request.spack_root, [own.scope] + list(request.spack_scopes))
    spack.confinement = confinement(spack.scopes, spack.root, root)
    return spack


def make_recipe(request: RecipeRequest, workspace, progress: Optional[Callable[[str], None]] = None) -> RecipeResult:
    progress = progress or (lambda msg: None)
    _validate_name(request.name)
    if request.max_attempts < 1:
        raise R3Error("--max-attempts must be at least 1")
    recipe_dir = os.path.join(workspace.recipes_dir, request.name)
    spack = confined_spack(request, workspace)
    repo = target_repo(spack, request, workspace)
    _undo_stopped_run(recipe_dir, repo, request.name, progress)
    run_spack = spack_with_repo(spack, repo, os.path.join(workspace.recipes_dir, ".scopes", repo.namespace))
    repo_objs = [r for r in (spack_repos.open_repo(p) for _ns, p in run_spack.repo_list()) if r]
    index = spack_repos.PackageIndex(repo_objs)
    layout = repo.layout
    result = RecipeResult(
        request.name, "failed", repo=repo.path, namespace=repo.namespace, layout=layout, directory=recipe_dir
    )

    # 1. retrieve
    found = find_existing(index, request.name)
    if found and not request.regenerate:
        result.status = "existing"
        result.recipe = found.path
        result.namespace = found.namespace
        result.repo = os.path.dirname(os.path.dirname(os.path.dirname(found.path)))
        result.build_system = ",".join(found.build_systems)
        result.existing = asdict(found)
        progress("%s: found in repository %s (%s)" % (request.name, found.namespace, found.path))
        return result
    if not request.source:
        where = ", ".join(r.namespace for r in repo_objs)
        raise R3Error(
            "no recipe for %r in the configured repositories (%s); pass --source PATH|URL|GIT "
            "to generate one" % (request.name, where)
        )

    # 2. analyze
    os.makedirs(recipe_dir, exist_ok=True)
    src = acquire(request.source, os.path.join(recipe_dir, "source"))
    analysis = analyze(src.tree, request.name)
    names.resolve(analysis, index)
    src = finalize(src, os.path.join(recipe_dir, "source"), request.name, analysis.version)
    result.build_system = analysis.build_system
    result.unresolved = ["%s (%s)" % (d.name, d.source) for d in analysis.unresolved()]
    with open(os.path.join(recipe_dir, "analysis.json"), "w") as f:
        f.write(analysis.to_json() + "\n")
    progress(
        "%s: %s project, version %s, %d variant(s), dependencies: %s"
        % (
            request.name,
            analysis.build_system,
            analysis.version,
            len(analysis.variants),
            ", ".join(sorted({d.spack for d in analysis.spack_dependencies()})) or "none",
        )
    )

    # 3. similar recipes
    examples = (
        similar(index, analysis, request.examples, exclude=set(request.exclude_examples))
        if request.examples > 0
        else []
    )
    result.examples = [e.summary() for e in examples]
    with open(os.path.join(recipe_dir, "examples.json"), "w") as f:
        json.dump(result.examples, f, indent=1)

    # 4. generate (+ 5. validate and 6. refine, attempt by attempt)
    if request.model is not None:
        from ..model.client import ChatModel

        generator = ModelGenerator(ChatModel(request.model), spack.version())
    else:
        generator = RuleGenerator()
    result.generator = generator.how
    refiner = Refiner(
        run_spack,
        repo,
        index,
        recipe_dir,
        request.max_attempts,
        run_check=request.run_check and request.install,
        progress=progress,
        install=request.install,
    )
    recipe_path = repo.recipe_path(request.name)
    before = open(recipe_path).read() if os.path.isfile(recipe_path) else None
    # (the attempts write into the repository, where Spack reads them: a run stopped among
    # them must not leave its trial recipe there as if it were a finished one)
    write_atomic(os.path.join(recipe_dir, PENDING), json.dumps({"pid": os.getpid(), "before": before}))
    try:
        attempts = refiner.run(request.name, generator, analysis, src, layout, examples, request.initial_text)
    except BaseException:  # (a failure or an interrupt: the repository as it was)
        _undo_stopped_run(recipe_dir, repo, request.name, progress)
        raise
    result.attempts = [a.to_dict() for a in attempts]
    last = attempts[-1]
    result.recipe = repo.recipe_path(request.name) if last.valid else os.path.join(last.directory, "package.py")
    result.check_passed = last.check_passed
    if last.installed:
        result.status = "installed"
    elif last.concretized and not request.install:
        result.status = "concretized"
    else:
        result.status = "failed"
        # a recipe that never worked does not stay where Spack finds it (it is kept in attempt-N/)
        if before is None:
            if os.path.isfile(recipe_path):
                os.remove(recipe_path)
        else:
            repo.write_recipe(request.name, before)
        result.recipe = os.path.join(last.directory, "package.py")
    write_atomic(os.path.join(recipe_dir, "summary.json"), json.dumps(result.to_dict(), indent=1, default=str))
    os.remove(os.path.join(recipe_dir, PENDING))
    return result


PENDING = "pending.json"  # in recipes/<name>/ while attempts write into the repository


def _undo_stopped_run(recipe_dir, repo, name, progress):
    """Where an earlier run was stopped among its attempts (killed, interrupted), the
    recipe it left in the repository goes back to what was there before it (nothing, or
    the recipe then); R3Error where that run is still going."""
    path = os.path.join(recipe_dir, PENDING)
    try:
        with open(path) as f:
            pending = json.load(f)
    except FileNotFoundError:
        return
    except (OSError, ValueError):
        pending = {}  # (torn: written atomically, so never by us; its run's recipe is unknown)
    pid = pending.get("pid")
    if isinstance(pid, int) and pid != os.getpid() and alive(pid):
        raise R3Error(
            "another r3 recipe of %s is running in this workspace (pid %d); wait for it, or stop it" % (name, pid)
        )
    if "before" in pending:
        if pending["before"] is None:
            if repo.has(name):
                os.remove(repo.recipe_path(name))
        else:
            repo.write_recipe(name, pending["before"])
        progress(
            "%s: %s among its attempts; its trial recipe is taken out of %s"
            % (name, "this run stopped" if pid == os.getpid() else "an earlier run was stopped", repo.path)
        )
    os.remove(path)

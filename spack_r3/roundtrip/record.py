"""``spack r3 record <spec>``: build a package through Spack with probes, run it, keep captures.

The build happens in the workspace's Spack sandbox (``<ws>/spack``: its own install tree,
stage and caches; the user's installs and configuration are read, never written), from a
recipe that inherits the package's own and puts ``r3-record`` behind Spack's compiler
wrapper (``wrap.record_package``). The run is ``--run`` in a scratch directory with the
install's ``bin`` first on PATH, or the recipe's stand-alone test (``spack test run``).

Every Spack call of a site runs confined (``spack.confinement``): a build writes only
beneath the sandbox's install tree, stages and caches and its own directory (its dev_path
copy, the record's capture folder); the record runtime it links is built before, outside.
Where this kernel has no Landlock, builds run as Spack runs them, and a line says so.
"""

import json
import os
import re
import shlex
from dataclasses import dataclass

from ..childoutput import read_excerpt
from ..errors import R3Error
from ..fileutil import write_atomic
from ..record import session
from ..toolchain import clang_release, clangxx_beside, find_clang, flang_beside
from ..spack.repos import PackageIndex, configured_repos, create_repo, detect_layout
from ..spack.confinement import available as confinement_available, confinement
from ..spack.runner import Spack
from ..spack import devpath
from ..spack.devpath import private_copy
from ..spack.sandbox import make_sandbox
from ..spack.wrap import record_package
from . import overlay

OWN_NAMESPACES = ("r3record", "r3tuned")


@dataclass
class SpackSite:
    """The Spack that r3 drives: the user's scopes plus the workspace's sandbox."""

    spack: Spack
    sandbox: object
    layout: str
    record_repo: object

    def find_recipe(self, name):
        """(namespace, recipe path, layout of its repository) of the package's own recipe
        (ours aside), or None."""
        info = recipe_index(self.spack).find(name)
        return (info.namespace, info.path, info.layout) if info else None


def recipe_index(spack):
    """The recipes of the repositories ``spack`` is configured with, ours (record, tuned) aside."""
    return PackageIndex([r for r in configured_repos(spack) if r.namespace not in OWN_NAMESPACES])


def package_name(spec):
    m = re.match(r"^\s*([A-Za-z0-9][\w.-]*)", spec or "")
    if not m:
        raise R3Error("not a spec: %r" % spec)
    return m.group(1)


def open_site(workspace, user_scopes=(), extra_repos=(), front_repo=None, say=None):
    """The workspace's sandbox with the record repository at the front (``front_repo``:
    that one instead, e.g. the tuned repository for a check); its calls confined."""
    spack = Spack(scopes=user_scopes)
    root = workspace.spack_dir
    layout = detect_layout(spack.version())
    record_repo = create_repo(os.path.join(root, "r3record"), "r3record", layout)
    first = front_repo or record_repo.path
    repos = [first] + [os.path.abspath(r) for r in extra_repos]
    sandbox = make_sandbox(
        os.path.join(root, "sandbox"), repos=repos, scope_name="scope" if front_repo is None else "scope-check"
    )
    _write_compilers(spack, sandbox.scope)
    confined = spack.with_scopes(sandbox.scope)
    why = confinement_available()
    if why is None:
        confined.confinement = confinement(confined.scopes, confined.root, os.path.join(root, "confined"))
    elif say:
        say("warning: builds run unconfined: %s" % why)
    return SpackSite(confined, sandbox, layout, record_repo)


def _write_compilers(spack, scope):
    """The record clang as a compiler of the sandbox: 0.x, ``compilers.yaml``; 1.x, an
    external ``llvm`` in the sandbox's ``packages.yaml`` (1.x takes only external compilers,
    so without one ``%clang`` does not concretize where the user never ran ``spack compiler
    find``)."""
    path = os.path.join(scope, "compilers.yaml")
    if spack.major_minor() >= (1, 0):
        _write_llvm_external(scope)
        return
    clang = find_clang()
    flang = flang_beside(clang)
    if os.path.exists(path) and (flang is None or flang in open(path).read()):
        return  # (written before flang was installed: written again, with it)
    version = clang_release(clang) or ""
    cxx = clangxx_beside(clang)
    res = spack.run("arch", "--operating-system", timeout=120)
    if not res.ok:
        raise R3Error("spack arch failed: %s" % (res.error_lines() or [res.output.strip()])[-1])
    import platform

    data = {
        "compilers": [
            {
                "compiler": {
                    "spec": "clang@=%s" % version,
                    "paths": {"cc": clang, "cxx": cxx, "f77": flang, "fc": flang},
                    "operating_system": res.stdout.strip(),
                    "target": platform.machine(),
                    "modules": [],
                }
            }
        ]
    }
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


def _write_llvm_external(scope):
    """Add the record clang to the sandbox scope's ``packages.yaml`` (which ``make_sandbox``
    writes, as JSON) as an external ``llvm``, the way ``spack compiler find`` declares it."""
    clang = find_clang()
    version = clang_release(clang) or ""
    if not re.match(r"^\d+\.\d+", version):
        return
    path = os.path.join(scope, "packages.yaml")
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        data = {"packages": {}}
    compilers = {"c": clang}
    if clangxx_beside(clang):
        compilers["cxx"] = clangxx_beside(clang)
    if flang_beside(clang):
        compilers["fortran"] = flang_beside(clang)
    external = {
        "spec": "llvm@%s+clang%sflang~lld~lldb" % (version, "+" if "fortran" in compilers else "~"),
        "prefix": os.path.dirname(os.path.dirname(clang)),
        "extra_attributes": {"compilers": compilers},
    }
    data.setdefault("packages", {}).setdefault("llvm", {})["externals"] = [external]
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def with_clang(spec, variants=""):
    """``spec`` built with clang (unless it names a compiler), with ``variants`` (e.g.
    ``+r3``) on its root. Variants go before the first ``%``/``^``: on Spack 1.x what
    follows ``%clang`` constrains the compiler's node (``pkg %clang +r3`` asks for
    ``llvm+r3``); 0.x reads either order the same."""
    spec = spec.strip()
    if "%" not in spec:
        spec += " %clang"
    variants = (variants or "").strip()
    if not variants:
        return spec
    m = re.search(r"\s*[%^]", spec)
    return spec[: m.start()] + " " + variants + " " + spec[m.start() :].lstrip()


@dataclass
class Installed:
    hash: str
    prefix: str
    specfile: str
    node: dict  # the root of the concrete spec (name, version, arch, compiler...)
    nodes: list = None  # every node of the concrete spec (1.x: the compilers are among them)
    source_dir: str = None  # a dev_path spec: the copy of its tree this build used

    @property
    def target(self):
        t = (self.node.get("arch") or {}).get("target")
        return t.get("name") if isinstance(t, dict) else t

    @property
    def version(self):
        return self.node.get("version")

    @property
    def compiler(self):
        return spec_compiler(self.node, self.nodes or [])


def spec_compiler(node, nodes):
    """``name@version`` of the compiler of a concrete spec's node: 0.x keeps it in the node
    (``compiler``); 1.x makes it a dependency providing the ``c`` (or ``cxx``) virtual."""
    c = node.get("compiler")
    if c:
        return "%s@%s" % (c.get("name"), c.get("version"))
    by_hash = {n.get("hash"): n for n in nodes}
    for lang in ("c", "cxx"):
        for dep in node.get("dependencies") or []:
            if lang in ((dep.get("parameters") or {}).get("virtuals") or []):
                found = by_hash.get(dep.get("hash"))
                if found:
                    return "%s@%s" % (found.get("name"), found.get("version"))
    return None


class BuildFailed(R3Error):
    """A Spack install that failed; ``diagnostics``: its output and its build log's excerpt;
    ``tree``: the source directory it built, where known."""

    def __init__(self, message, diagnostics="", tree=None):
        super().__init__(message)
        self.diagnostics = diagnostics
        self.tree = tree


def install(site, spec, directory, what, rebuild=False, writes=()):
    """Concretize and install ``spec`` in the sandbox; R3Error with Spack's reason. A
    ``dev_path`` spec builds a copy of its tree in ``directory`` (see devpath); the build
    writes only there, in the sandbox and beneath ``writes``."""
    os.makedirs(directory, exist_ok=True)
    spec, source_dir = private_copy(spec, os.path.join(directory, "dev-src"))
    specfile = os.path.join(directory, "spec.json")
    spack = site.spack.writing(directory, *writes)
    outcome = spack.concretize(spec, specfile)
    if not outcome.ok:
        lines = outcome.result.error_lines() or [l for l in outcome.result.output.splitlines() if l.strip()][-1:]
        raise R3Error("%s: %s does not concretize: %s" % (what, spec, lines[0] if lines else "?"))
    done = spack.install_specfile(specfile, overwrite=rebuild)
    with open(os.path.join(directory, "install.log"), "w") as f:
        f.write(done.result.output)
    if not done.ok:
        events = []
        for log in done.build_logs[:1]:
            events = [e.get("text", "") for e in site.spack.parse_log(log)][:3]
        where = done.build_logs[0] if done.build_logs else os.path.join(directory, "install.log")
        reason = "; ".join(l.strip() for l in events if l.strip()) or (done.result.error_lines() or ["?"])[0]
        logs = []
        for log in done.build_logs[:1]:
            try:
                logs.append(read_excerpt(log, head=1 << 20, tail=1 << 20))
            except OSError:
                pass
        # the tree built: a dev_path's copy, else the source in the log's stage
        stage_src = os.path.join(os.path.dirname(where), "spack-src")
        raise BuildFailed(
            "%s of %s failed: %s (log: %s)" % (what, spec, reason, where),
            "\n".join([done.result.output] + logs),
            tree=source_dir or (stage_src if os.path.isdir(stage_src) else None),
        )
    with open(specfile) as f:
        nodes = json.load(f)["spec"]["nodes"]
    prefix = site.spack.location("/" + outcome.hash)
    if not prefix:
        raise R3Error("%s: spack installed %s but cannot locate it" % (what, spec))
    return Installed(outcome.hash, prefix, specfile, nodes[0], nodes, source_dir)


def prebuild_runtimes(clang):
    """The record runtimes a build links (``record.runtime``), built into their cache now,
    outside the confined build: the C runtime, and those of offload, CUDA and HIP links where
    this machine builds them (where not, a build that needs one fails with its reason)."""
    from ..record import cuda
    from ..record.flags import clang_for_runtime
    from ..record.runtime import OFFLOAD_SOURCE, runtime_object
    from ..toolchain import ToolchainError

    clang = clang_for_runtime(clang)
    runtime_object(clang)
    for source in (OFFLOAD_SOURCE, cuda.RUNTIME_SOURCE, cuda.HIP_RUNTIME_SOURCE):
        try:
            runtime_object(clang, source)
        except ToolchainError:
            pass


def has_tests(recipe_path):
    with open(recipe_path, errors="replace") as f:
        return bool(re.search(r"^\s*def test(_\w+)?\(self", f.read(), re.M))


def run_command(site, installed, run):
    """The command that runs the installed package: ``run`` with its bin first on PATH, or
    its stand-alone tests."""
    if run:
        return run
    return " ".join(shlex.quote(a) for a in site.spack.argv("test", "run", "/" + installed.hash))


def record_spec(
    workspace,
    spec,
    run=None,
    kernels=(),
    instances=1,
    tolerance=None,
    timeout=None,
    user_scopes=(),
    extra_repos=(),
    progress=None,
    output=None,
    source=None,
):
    """Build ``spec`` with probes through Spack, run it, ingest captures (a RecordResult).
    A package without a recipe gets one from the recipe stage first, from ``source`` (a
    source directory, tarball or URL)."""
    say = progress or (lambda msg: None)
    name = package_name(spec)
    workspace.ensure()
    say("Spack sandbox: %s" % workspace.spack_dir)
    repaired = overlay.existing(workspace, name)
    if repaired and repaired not in extra_repos:
        extra_repos = [repaired] + list(extra_repos)
        say("the recipe of %s repaired before is used: %s" % (name, os.path.join(repaired, "packages")))
    site = open_site(workspace, user_scopes, extra_repos, say=say)
    recipe = site.find_recipe(name)
    if recipe is None and source:
        extra_repos = list(extra_repos) + [generate_recipe(workspace, site, name, source, user_scopes, say)]
        site = open_site(workspace, user_scopes, extra_repos)
        recipe = site.find_recipe(name)
    if recipe is None:
        raise R3Error(
            "unknown package %s: no recipe in Spack's repositories (give --source DIR or URL to generate one)" % name
        )
    namespace, recipe_path, parent_layout = recipe
    if not run and not has_tests(recipe_path):
        raise R3Error("%s declares no stand-alone test to run: give --run CMD" % name)
    run_dir = session.new_run_dir(workspace, name)
    record_dir = os.path.join(run_dir, "record")
    os.makedirs(record_dir)
    env = session.record_environment(record_dir, find_clang(), kernels, instances, target="as-built")
    keys = ("R3_RECORD_DIR", "R3_KERNELS", "R3_INSTANCES", "R3_CAPTURE", "R3_TARGET_FLAGS")
    # The subclass imports the recipe the way its own repository's layout says (Spack 1.x
    # reads v1 repositories too, as ``spack.pkg.<ns>``), whatever the record repository's is.
    record_env = {k: env[k] for k in keys}
    site.record_repo.write_recipe(name, record_package(namespace, name, parent_layout, record_env))
    say(
        "building %s with probes through Spack (the recipe of %s, r3-record behind the compiler wrapper)"
        % (with_clang(spec), namespace)
    )
    request = spack_request(spec, run, kernels, instances, tolerance)  # the tree as the build copies it
    prebuild_runtimes(find_clang())  # (the confined build cannot write their cache)

    def build():  # (a rebuild every time: the build writes into this record's directory)
        return install(
            site,
            with_clang(spec),
            os.path.join(run_dir, "spack"),
            "the record build",
            rebuild=True,
            writes=[record_dir],
        )

    try:
        installed = build()
    except BuildFailed as failed:
        fixed = (
            None
            if namespace == overlay.NAMESPACE
            else overlay.repair(workspace, name, recipe_path, parent_layout, failed.diagnostics, failed.tree)
        )
        if fixed is None:
            raise
        say("%s; the recipe of %s is repaired: %s" % (failed, namespace, "; ".join(fixed.changes)))
        say(
            "  repaired recipe: %s (%s's own is untouched); patch for upstream: %s"
            % (fixed.recipe, namespace, fixed.patch)
        )
        extra_repos = [fixed.repo] + list(extra_repos)
        site = open_site(workspace, user_scopes, extra_repos)
        namespace, recipe_path, parent_layout = site.find_recipe(name)
        site.record_repo.write_recipe(name, record_package(namespace, name, parent_layout, record_env))
        installed = build()
    command = run_command(site, installed, run)
    cwd = os.path.join(run_dir, "run")
    os.makedirs(cwd, exist_ok=True)
    env.update({k: v for k, v in site.spack.environment().items() if k.startswith("SPACK")})
    env["PATH"] = os.path.join(installed.prefix, "bin") + os.pathsep + env.get("PATH", "")
    result = session.run_and_ingest(
        workspace,
        request,
        run_dir,
        record_dir,
        env,
        command,
        cwd,
        kernels=kernels,
        tolerance=tolerance,
        timeout=timeout,
        say=say,
        output=output,
        build_log=os.path.join(run_dir, "spack", "install.log"),
        # the build's own tree: its stage, whose source Spack keys on the spec's version
        # (a dev_path tree: its copy under run_dir, keyed on its content)
        own=[os.path.join(site.sandbox.root, "stage")],
    )
    _add_spack_facts(
        run_dir,
        {
            "package": name,
            "namespace": namespace,
            "spec": spec,
            "hash": installed.hash,
            "version": installed.version,
            "target": installed.target,
            "compiler": installed.compiler,
            "prefix": installed.prefix,
            "layout": site.layout,
            "parent_layout": parent_layout,
            "repos": [os.path.abspath(r) for r in extra_repos],
            "source_root": installed.source_dir or _source_root(result.captures),
        },
    )
    return result


def generate_recipe(workspace, site, name, source, user_scopes, say):
    """The recipe stage (``r3 recipe``) for a package Spack does not know; returns the
    repository it wrote to. Its trial installs go to the sandbox."""
    from ..model import client as model_client
    from ..recipe.pipeline import RecipeRequest, make_recipe

    say("%s has no recipe: generating one from %s" % (name, source))
    request = RecipeRequest(
        name=name,
        source=source,
        model=model_client.resolve(None, None, None),
        spack_scopes=list(user_scopes) + [site.sandbox.scope],
    )
    result = make_recipe(request, workspace, say)
    if not result.ok or not result.repo:
        raise R3Error(
            "no recipe for %s: the recipe stage ended %s (attempts in %s)" % (name, result.status, result.directory)
        )
    say("recipe for %s: %s" % (name, result.recipe))
    return result.repo


def _source_root(captures):
    """The package's source root in the record build's stage (``.../spack-src``)."""
    for c in captures:
        parts = c.source_file.split(os.sep)
        if "spack-src" in parts:
            return os.sep.join(parts[: parts.index("spack-src") + 1])
    return None


def _add_spack_facts(run_dir, facts):
    path = os.path.join(run_dir, session.RECORD_JSON)
    with open(path) as f:
        data = json.load(f)
    data["spack"] = facts
    write_atomic(path, json.dumps(data, indent=1))


def previous_spack_record(workspace, spec, run=None, kernels=(), instances=1, tolerance=None, say=None):
    """The latest record of ``spec`` made the same way, its captures still there and what
    its build read outside its tree unchanged, or None (``say``: why one is not reused)."""
    request = spack_request(spec, run, kernels, instances, tolerance)
    return session.find_record(workspace, lambda data: data.get("request") == request, check_inputs=True, say=say)


def spack_request(spec, run, kernels, instances, tolerance):
    """How a spec was recorded, as record.json keeps it: a ``dev_path`` tree by its content
    (Spack keys other sources on their checksum, in the spec's version)."""
    return {
        "spec": spec,
        "package": package_name(spec),
        "run": run,
        "kernels": sorted(kernels),
        "instances": instances,
        "tolerance": tolerance,
        "dev_tree": devpath.tree_digest(spec),
        "compiler": session.compiler_identity(find_clang()),
    }


def latest_spack_record(workspace, package):
    """(RecordResult, its spack facts) of the package's latest record, or (None, None)."""
    found = session.find_record(
        workspace, lambda data: (data.get("spack") or {}).get("package") == package, with_data=True
    )
    if not found:
        return None, None
    result, data = found
    return result, data["spack"]

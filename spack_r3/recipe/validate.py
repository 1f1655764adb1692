"""Check a ``package.py`` before any Spack process loads it. Generated recipes are untrusted.

Allowed (an AST whitelist, nothing is executed here):

- module level: a docstring, imports of Spack's recipe API only (``spack.package``,
  ``spack.pkg.*`` / ``spack_repo.*`` for inheriting an existing recipe, ``llnl.util.*`` /
  ``spack.llnl.util.*``) plus ``os``/``os.path``/``re``/``glob``, constant assignments, and
  exactly one package class on a known build-system base (or an imported recipe class),
  optionally with builder classes;
- class body: a docstring, constant-valued attributes, directives (``version``,
  ``depends_on``, ``variant``, ...), ``with when(...)`` blocks of directives, and methods;
- methods: the usual recipe methods, ``test_*`` stand-alone tests and ``_helpers``;
  file and process calls only inside methods that run during the build, never in methods
  Spack calls while loading or concretizing (``url_for_version``, ``libs``, ...).

Rejected everywhere: ``exec``/``eval``/``compile``/``__import__``/``globals``..., dunder
attribute access (``obj.__class__``...), ``os.system``/``os.popen``/``os.exec*``/``os.fork``...,
``global``/``nonlocal``, imports of anything else (``subprocess``, ``socket``, ``urllib``...).
"""

import ast
from dataclasses import dataclass, field
from typing import List

KNOWN_BASES = {
    "Package",
    "CMakePackage",
    "CachedCMakePackage",
    "AutotoolsPackage",
    "MakefilePackage",
    "MesonPackage",
    "PythonPackage",
    "BundlePackage",
    "SConsPackage",
    "WafPackage",
    "QMakePackage",
    "NMakePackage",
    "MSBuildPackage",
    "CargoPackage",
    "GoPackage",
    "PerlPackage",
    "RPackage",
    "RubyPackage",
    "OctavePackage",
    "LuaPackage",
    "MavenPackage",
    "SIPPackage",
    "RacketPackage",
    "CudaPackage",
    "ROCmPackage",
    "SourceforgePackage",
    "SourcewarePackage",
    "XorgPackage",
    "GNUMirrorPackage",
    "PythonExtension",
    "CompilerPackage",
}
KNOWN_BUILDERS = {
    "GenericBuilder",
    "CMakeBuilder",
    "AutotoolsBuilder",
    "MakefileBuilder",
    "MesonBuilder",
    "PythonPipBuilder",
    "SConsBuilder",
    "WafBuilder",
    "QMakeBuilder",
    "NMakeBuilder",
    "MSBuildBuilder",
}
DIRECTIVES = {
    "version",
    "variant",
    "depends_on",
    "conflicts",
    "provides",
    "patch",
    "resource",
    "license",
    "maintainers",
    "extends",
    "requires",
    "build_system",
    "can_splice",
    "redistribute",
    "language",
    "depends_on_python",
    "generator",
}
CLASS_CALLS_OK = DIRECTIVES | {
    "when",
    "default_args",
    "join_path",
    "Version",
    "Prefix",
    "any_combination_of",
    "disjoint_sets",
    "auto_or_any_combination_of",
    "conditional",
    "range",
    "sorted",
    "list",
    "tuple",
    "dict",
    "set",
    "str",
    "int",
    "len",
    "enumerate",
    "zip",
    "format",
}
# Methods Spack calls while loading a recipe or solving (no file or process calls there).
LOAD_TIME_METHODS = {
    "url_for_version",
    "determine_version",
    "determine_variants",
    "libs",
    "headers",
    "command",
    "home",
    "fetcher",
    "list_url",
    "flag_handler",
    "__init__",
    "determine_spec_details",
    "filter_detected_exes",
    "validate_detected_spec",
}
USUAL_METHODS = LOAD_TIME_METHODS | {
    "cmake_args",
    "configure_args",
    "meson_args",
    "build_targets",
    "install_targets",
    "edit",
    "build",
    "install",
    "autoreconf",
    "configure",
    "cmake",
    "meson",
    "check",
    "installcheck",
    "patch",
    "setup_build_environment",
    "setup_run_environment",
    "setup_dependent_build_environment",
    "setup_dependent_run_environment",
    "setup_dependent_package",
    "build_directory",
    "root_cmakelists_dir",
    "configure_directory",
    "build_args",
    "install_args",
    "global_options",
    "install_options",
    "config_settings",
    "std_cmake_args",
    "std_meson_args",
    "build_system_flags",
    "install_time_test_callbacks",
    "build_time_test_callbacks",
    "force_autoreconf",
    "autoreconf_extra_args",
    "generator",
    "url",
    "import_modules",
    "skip_modules",
    "build_env",
    "test",
    "check_install",
    "post_install",
    "pre_install",
    "cmake_args_for_tests",
    "configure_abs_path",
    "archive_files",
    "parallel",
    "build_jobs",
    "build_type",
    "compile",
    "configure_flag_args",
}
DECORATORS = {"property", "run_before", "run_after", "on_package_attributes", "when", "staticmethod", "classmethod"}
FORBIDDEN_NAMES = {
    "exec",
    "eval",
    "compile",
    "__import__",
    "globals",
    "locals",
    "vars",
    "breakpoint",
    "input",
    "getattr",
    "setattr",
    "delattr",
    "memoryview",
    "__builtins__",
    "help",
    "importlib",
    "subprocess",
    "socket",
    "urllib",
    "requests",
    "http",
    "ctypes",
    "pickle",
    "marshal",
    "builtins",
    "shutil",
    "tempfile",
    "pty",
    "signal",
    "multiprocessing",
    "threading",
    "asyncio",
}
FILE_OR_PROCESS_CALLS = {
    "open",
    "Executable",
    "which",
    "make",
    "ninja",
    "cmake",
    "meson",
    "configure",
    "autoreconf",
    "filter_file",
    "install",
    "install_tree",
    "copy",
    "copy_tree",
    "mkdirp",
    "mkdir",
    "remove",
    "force_remove",
    "touch",
    "symlink",
    "working_dir",
    "chmod",
    "rename",
    "rmtree",
    "unlink",
    "makedirs",
    "removedirs",
    "rmdir",
    "python",
    "pip",
    "scons",
    "bash",
    "sh",
}
OS_FORBIDDEN = {
    "system",
    "popen",
    "fork",
    "forkpty",
    "kill",
    "killpg",
    "spawnl",
    "spawnle",
    "spawnlp",
    "spawnlpe",
    "spawnv",
    "spawnve",
    "spawnvp",
    "spawnvpe",
    "posix_spawn",
    "posix_spawnp",
    "execl",
    "execle",
    "execlp",
    "execlpe",
    "execv",
    "execve",
    "execvp",
    "execvpe",
    "putenv",
    "setuid",
    "setgid",
    "chroot",
    "startfile",
    "_exit",
    "abort",
    "plock",
    "open",
    "fdopen",
    "write",
    "truncate",
}
ALLOWED_IMPORTS = {"os", "os.path", "re", "glob", "sys", "platform"}
SAFE_SYS = {"platform", "version_info", "byteorder", "maxsize"}  # the only sys.* a recipe may read
ALLOWED_IMPORT_PREFIXES = (
    "spack.package",
    "spack.pkg.",
    "spack_repo.",
    "llnl.util.",
    "spack.llnl.util.",
    "spack.build_systems.",
    "spack.util.prefix",
    "spack.variant",
)


@dataclass
class Validation:
    ok: bool
    reasons: List[str] = field(default_factory=list)
    package_class: str = ""
    base_classes: List[str] = field(default_factory=list)

    def message(self):
        return "; ".join(self.reasons) if self.reasons else "ok"


def _name_of(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _name_of(node.value)
        return inner + "." + node.attr if inner else node.attr
    if isinstance(node, ast.Call):
        return _name_of(node.func)
    return ""


PURE_CALLS = CLASS_CALLS_OK | {
    "with_default",
    "with_non_feature_values",
    "prohibit_empty_set",
    "with_error",
    "join",
    "split",
    "replace",
    "lower",
    "upper",
    "strip",
    "ver",
    "up_to",
    "satisfies",
    "keys",
    "values",
    "items",
    "min",
    "max",
    "abs",
    "bool",
    "float",
}


def _is_constant_expr(node):
    """Literals, names, f-strings, containers, arithmetic, attribute reads and calls of pure
    helpers (``conditional``, ``any_combination_of``, ``str.join``...): nothing that acts."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            if _name_of(sub.func).split(".")[-1] not in PURE_CALLS:
                return False
        elif isinstance(sub, (ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr)):
            return False
    return True


class _Checker:
    def __init__(self):
        self.reasons = []

    def bad(self, node, msg):
        line = getattr(node, "lineno", 0)
        self.reasons.append("line %d: %s" % (line, msg) if line else msg)

    # -- everywhere ------------------------------------------------------------------------

    def check_expr_tree(self, node, where, build_time):
        safe_sys = {
            id(sub.value)
            for sub in ast.walk(node)
            if isinstance(sub, ast.Attribute)
            and isinstance(sub.value, ast.Name)
            and sub.value.id == "sys"
            and sub.attr in SAFE_SYS
        }
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id == "sys" and id(sub) not in safe_sys:
                self.bad(sub, "%s uses sys beyond sys.%s" % (where, "/".join(sorted(SAFE_SYS))))
            elif isinstance(sub, ast.Name) and sub.id in FORBIDDEN_NAMES:
                self.bad(sub, "%s uses forbidden name %r" % (where, sub.id))
            elif isinstance(sub, ast.Attribute):
                if sub.attr.startswith("__") and sub.attr.endswith("__"):
                    self.bad(sub, "%s accesses dunder attribute %r" % (where, sub.attr))
                base = _name_of(sub.value)
                if base in ("os", "os.path") and sub.attr in OS_FORBIDDEN:
                    self.bad(
                        sub,
                        "%s calls os.%s (process/file access is not allowed in a recipe; "
                        "use Spack's Executable/which and filesystem helpers in a build phase)" % (where, sub.attr),
                    )
            elif isinstance(sub, (ast.Global, ast.Nonlocal)):
                self.bad(sub, "%s uses %s" % (where, type(sub).__name__.lower()))
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                self.bad(sub, "%s imports inside a function or class" % where)
            elif isinstance(sub, ast.Call) and not build_time:
                fname = _name_of(sub.func).split(".")[-1]
                if fname in FILE_OR_PROCESS_CALLS:
                    self.bad(sub, "%s calls %s() outside the build phases" % (where, fname))
            elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and "FIXME" in sub.value:
                self.bad(sub, "%s leaves a FIXME placeholder" % where)

    # -- module level ----------------------------------------------------------------------

    def check_import(self, node):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in ALLOWED_IMPORTS and not alias.name.startswith(ALLOWED_IMPORT_PREFIXES):
                    self.bad(node, "imports %r (only Spack's recipe API may be imported)" % alias.name)
        else:
            mod = node.module or ""
            if node.level:
                self.bad(node, "relative import")
            elif (
                mod not in ALLOWED_IMPORTS
                and not (mod + ".").startswith(ALLOWED_IMPORT_PREFIXES)
                and not mod.startswith(ALLOWED_IMPORT_PREFIXES)
            ):
                self.bad(node, "imports from %r (only Spack's recipe API may be imported)" % mod)
            elif mod in ALLOWED_IMPORTS:
                for alias in node.names:
                    if alias.name in OS_FORBIDDEN or alias.name == "*" or mod == "sys":
                        self.bad(node, "imports %s from %s" % (alias.name, mod))

    def check_class(self, node, imported):
        bases = [_name_of(b) for b in node.bases]
        for kw in node.keywords:
            self.bad(node, "class %s has keyword %r in its bases" % (node.name, kw.arg))
        for d in node.decorator_list:
            self.bad(d, "class %s is decorated" % node.name)
        short = [b.split(".")[-1] for b in bases]
        is_builder = any(b in KNOWN_BUILDERS for b in short)
        is_package = any(b in KNOWN_BASES or b in imported for b in short)
        if not bases or not (is_builder or is_package):
            self.bad(
                node,
                "class %s does not derive from a known build-system base (%s)"
                % (node.name, ", ".join(bases) or "no base"),
            )
        self.in_builder = is_builder and not is_package
        for i, stmt in enumerate(node.body):
            where = "class %s" % node.name
            if (
                i == 0
                and isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                continue
            self.check_class_stmt(stmt, where, node.name)
        return is_package and not is_builder, bases

    def check_class_stmt(self, stmt, where, cls):
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            fname = _name_of(stmt.value.func)
            if fname not in DIRECTIVES:
                self.bad(
                    stmt, "%s calls %s() at class level (only directives are allowed there)" % (where, fname or "?")
                )
            else:
                for arg in list(stmt.value.args) + [k.value for k in stmt.value.keywords]:
                    if not _is_constant_expr(arg):
                        self.bad(stmt, "%s: directive %s() has a computed argument" % (where, fname))
            self.check_expr_tree(stmt, where, build_time=False)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            value = stmt.value
            if value is not None and not _is_constant_expr(value):
                self.bad(stmt, "%s assigns a computed value at class level" % where)
            self.check_expr_tree(stmt, where, build_time=False)
        elif isinstance(stmt, ast.With):
            for item in stmt.items:
                if _name_of(item.context_expr) not in ("when", "default_args"):
                    self.bad(stmt, "%s: only `with when(...)`/`with default_args(...)` blocks are allowed" % where)
            for s in stmt.body:
                self.check_class_stmt(s, where, cls)
        elif isinstance(stmt, ast.FunctionDef):
            self.check_method(stmt, cls)
        elif isinstance(stmt, ast.Pass):
            pass
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            pass
        else:
            self.bad(stmt, "%s contains a %s statement (not a recipe construct)" % (where, type(stmt).__name__))

    def check_method(self, fn, cls):
        where = "%s.%s()" % (cls, fn.name)
        hook = getattr(self, "in_builder", False) or any(
            _name_of(d).split(".")[-1] in ("run_before", "run_after") for d in fn.decorator_list
        )
        if not (
            hook
            or fn.name in USUAL_METHODS
            or fn.name.startswith("test_")
            or (fn.name.startswith("_") and not fn.name.startswith("__"))
        ):
            self.bad(fn, "%s is not a recipe method (known methods, test_* or _helpers)" % where)
        for d in fn.decorator_list:
            dname = _name_of(d).split(".")[-1]
            if dname not in DECORATORS:
                self.bad(d, "%s has decorator %r" % (where, dname))
            self.check_expr_tree(d, where, build_time=False)
        self.check_expr_tree(fn.args, where, build_time=False)
        build_time = fn.name not in LOAD_TIME_METHODS
        for stmt in fn.body:
            self.check_expr_tree(stmt, where, build_time=build_time)


def validate(text) -> Validation:
    """Validation of a recipe's source text (never executed)."""
    try:
        tree = ast.parse(text)
    except SyntaxError as err:
        return Validation(False, ["does not parse: %s (line %s)" % (err.msg, err.lineno)])
    c = _Checker()
    imported = set()
    packages = []
    for i, node in enumerate(tree.body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            c.check_import(node)
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith(("spack.pkg.", "spack_repo."))
            ):
                imported.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.ClassDef):
            is_pkg, bases = c.check_class(node, imported)
            if is_pkg:
                packages.append((node.name, bases))
        elif i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        elif isinstance(node, ast.Assign) and _is_constant_expr(node.value):
            c.check_expr_tree(node, "module level", build_time=False)
        else:
            c.bad(
                node,
                "module level contains a %s (only imports, constants and the package class are allowed)"
                % type(node).__name__,
            )
    if not packages:
        c.reasons.append("no package class on a known build-system base")
    elif len(packages) > 1:
        c.reasons.append("more than one package class: %s" % ", ".join(p[0] for p in packages))
    if not any(
        isinstance(n, ast.ImportFrom) and (n.module or "").startswith(("spack.package", "spack_repo."))
        for n in tree.body
    ):
        c.reasons.append("does not import Spack's recipe API (from spack.package import *)")
    name, bases = packages[0] if packages else ("", [])
    return Validation(not c.reasons, c.reasons, name, bases)

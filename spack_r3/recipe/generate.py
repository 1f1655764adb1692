"""Write a ``package.py`` from an analysis: rule-based (no model) or with a language model.

The rule-based generator writes a complete, idiomatic recipe: the build-system base class,
source and checksum, license, variants from the project's options, dependencies mapped to
Spack names (with ``when=`` where an option guards them), language dependencies, the
build-system arguments that wire variants to options, and a stand-alone test that runs the
installed program the way the project's own test does.

The model generator gives the model the analysis plus similar existing recipes as examples
and, when refining, the previous recipe and the diagnostics of its failure.

The text of both -- build-system templates and prompts -- lives in the top-level ``recipes/``
directory (``templates.py`` finds and renders it; ``recipes/README.md`` tells how to change it).
What is written, and in which order, is decided here.
"""

import ast
import json
import re
from typing import List, Optional

from ..spack.repos import class_name
from . import templates

BASES = {
    "cmake": "CMakePackage",
    "autotools": "AutotoolsPackage",
    "makefile": "MakefilePackage",
    "meson": "MesonPackage",
    "python": "PythonPackage",
    "generic": "Package",
}
V2_MODULES = {
    "cmake": "cmake",
    "autotools": "autotools",
    "makefile": "makefile",
    "meson": "meson",
    "python": "python",
    "generic": "generic",
}

PACKAGE = "templates/package.py.tmpl"

# Where Spack 1.x keeps each base class a recipe may derive from (``spack_repo.builtin.
# build_systems.<module>``); Spack 0.2x has them all in ``spack.package``.
V2_BASE_MODULES = dict(
    {BASES[k]: m for k, m in V2_MODULES.items()},
    AspellDictPackage="aspell_dict",
    BundlePackage="bundle",
    CachedCMakePackage="cached_cmake",
    CargoPackage="cargo",
    CudaPackage="cuda",
    GNUMirrorPackage="gnu",
    GoPackage="go",
    LuaPackage="lua",
    MavenPackage="maven",
    NMakePackage="nmake",
    OctavePackage="octave",
    PerlPackage="perl",
    QMakePackage="qmake",
    ROCmPackage="rocm",
    RPackage="r",
    RacketPackage="racket",
    RubyPackage="ruby",
    SConsPackage="scons",
    SIPPackage="sip",
    SourceforgePackage="sourceforge",
    SourcewarePackage="sourceware",
    WafPackage="waf",
    XorgPackage="xorg",
)
V2_BUILD_SYSTEMS = "spack_repo.builtin.build_systems."


def _q(s):
    return json.dumps(str(s))


def _type_arg(types):
    t = sorted(set(types), key=["build", "link", "run", "test"].index)
    if t == ["build", "link"]:
        return ""
    if len(t) == 1:
        return templates.render(PACKAGE, "depends_on_type", types=_q(t[0]))
    return templates.render(PACKAGE, "depends_on_type", types="(%s)" % ", ".join(_q(x) for x in t))


def header(build_system, layout, origin, how):
    lines = templates.lines(PACKAGE, "header", how=how, origin=origin) + [""]
    if layout == "v2":
        mod = V2_MODULES.get(build_system, "generic")
        lines += templates.lines(PACKAGE, "base_import", module=mod, base=BASES.get(build_system, "Package"))
        lines.append("")
    lines += templates.lines(PACKAGE, "spack_import")
    return "\n".join(lines)


def fit_layout(text, layout):
    """A recipe's imports made right for the repository layout it goes to, whatever the
    model wrote: on v2 (Spack 1.x) each base class the package derives from is imported
    from ``spack_repo.builtin.build_systems`` (a v1-style recipe fails there with
    ``name 'MakefilePackage' is not defined``); on v1 (Spack 0.2x) those imports, which
    would not resolve, are dropped, since ``spack.package`` has the bases. A text that
    does not parse is returned as it is, for the validator to reject."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    imports = [n for n in tree.body if isinstance(n, ast.ImportFrom)]
    if layout != "v2":
        drop = {
            i
            for n in imports
            if (n.module or "").startswith(V2_BUILD_SYSTEMS)
            for i in range(n.lineno - 1, n.end_lineno)
        }
        return "".join(l for i, l in enumerate(lines) if i not in drop)
    imported = {a.asname or a.name for n in imports for a in n.names}
    bases = [b.id for n in tree.body if isinstance(n, ast.ClassDef) for b in n.bases if isinstance(b, ast.Name)]
    missing = [b for b in dict.fromkeys(bases) if b in V2_BASE_MODULES and b not in imported]
    if not missing:
        return text
    api = next((n for n in imports if n.module == "spack.package"), None)
    at = api.lineno - 1 if api else next((n.lineno - 1 for n in tree.body), len(lines))
    new = ["from %s%s import %s\n" % (V2_BUILD_SYSTEMS, V2_BASE_MODULES[b], b) for b in missing]
    return "".join(lines[:at] + new + lines[at:])


def dependency_line(name, types=("build", "link"), when=None):
    when_arg = templates.render(PACKAGE, "depends_on_when", when=_q(when)) if when else ""
    return templates.render(PACKAGE, "depends_on", name=_q(name), type=_type_arg(types), when=when_arg)


def _arg_list(path, section, args):
    """The lines of a method returning a list of arguments, one argument a line."""
    return templates.lines(path, section, args="\n".join(templates.render(path, "arg", arg=x) for x in args))


def _from_examples(a, examples):
    """Tags and variant descriptions of the retrieved recipes, for what this tree shares with
    them (a proxy app's tag; the description of an ``mpi``/``openmp`` variant)."""
    from .retrieve import tree_features

    descriptions, tags = {}, []
    feats = tree_features(a)
    for ex in examples:
        for name, desc in re.findall(r"variant\(\s*\"([\w-]+)\"[^)]*?description=\"([^\"]+)\"", ex.text or ""):
            descriptions.setdefault(name, desc)
        m = re.search(r"tags\s*=\s*\[([^\]]*)\]", ex.text or "")
        if m and "proxy-app" in feats and "proxy-app" in m.group(1) and "proxy-app" not in tags:
            tags.append("proxy-app")
    return {"descriptions": descriptions, "tags": tags, "install": _install_from_examples(a, examples)}


INSTALL_STMT_RE = re.compile(r"^\s*(install_tree|install)\(\s*\"([\w./-]+?)/?\"\s*,\s*prefix((?:\.\w+)*)\s*\)\s*$")


def _install_from_examples(a, examples):
    """What the retrieved recipes' own install() puts in the prefix that this tree has too (the
    input decks, examples and README of a proxy app: CoMD's ``install_tree("examples",
    prefix.examples)``), as (call, path, prefix attribute, example) rows; what a build makes
    (``src/gsnap``) is not in the tree yet and never fits."""
    import os

    rows, seen = [], set()
    for ex in examples:
        m = re.search(r"(?ms)^    def install\(self, spec, prefix\):\n(.*?)(?=^    \S|\Z)", ex.text or "")
        for line in (m.group(1) if m else "").splitlines():
            st = INSTALL_STMT_RE.match(line)
            if not st or st.group(2) in seen or st.group(2).startswith((".", "/")) or ".." in st.group(2):
                continue
            call, path, attr = st.groups()
            full = os.path.join(a.root, path)
            if (os.path.isdir(full) if call == "install_tree" else os.path.isfile(full)) and not os.path.islink(full):
                seen.add(path)
                rows.append((call, path, attr, ex.name))
    return rows


class RuleGenerator:
    """Deterministic recipe from an analysis; no model needed.

    The text comes from ``recipes/templates/``: ``package.py.tmpl`` for what every recipe has,
    ``<build system>.py.tmpl`` for the build-system methods.
    """

    how = "rule-based generator"

    def generate(self, analysis, source, layout="v1", examples=None, feedback=None, previous=None):
        a = analysis
        base = BASES[a.build_system]

        def t(section, **values):
            return templates.lines(PACKAGE, section, **values)

        out = [header(a.build_system, layout, source.origin or a.root, self.how), "", ""]
        desc = a.description.replace('"""', "'''").replace("\\", "\\\\")
        out += t("class", class_name=class_name(a.name), base=base, description=desc)
        out.append("")
        out += t("homepage", homepage=_q(a.homepage or source.git or source.url or ("file://" + a.root)))
        if source.git:
            out += t("git", git=_q(source.git))
        else:
            out += t("url", url=_q(source.url))
        out.append("")
        # what the retrieved examples say the same way: their tags, their variants' wording
        said = _from_examples(a, examples or ())
        if said["tags"]:
            out += t("tags", tags=", ".join(_q(x) for x in said["tags"]))
            out.append("")
        if a.license:
            out += t("license", license=_q(a.license))
            out.append("")
        if source.git:
            out += t("version_commit", version=_q(a.version), commit=_q(source.commit))
        else:
            # the URL again on the version: Spack would otherwise rewrite it for the version it
            # parses from the file name, which a name with digits (r3x-inih-62) defeats
            out += t("version_sha256", version=_q(a.version), sha256=_q(source.sha256), url=_q(source.url))
        out.append("")
        subdirs = a.build.get("subdirs") or []
        model_dirs = a.build.get("model_dirs") or []
        for model, d in model_dirs:
            out += t(
                "variant",
                name=_q(model),
                default=False,
                description=_q(
                    "Build %s/ instead of %s/ (a build directory per model)" % (d, a.build["build_directory"])
                ),
            )
        for i, (m1, _d1) in enumerate(model_dirs):
            for m2, _d2 in model_dirs[i + 1 :]:
                out += t("conflicts", a=_q("+" + m1), when=_q("+" + m2))
        if len(subdirs) > 1 and not model_dirs:
            out += t(
                "variant_values",
                name=_q("implementation"),
                default=_q(a.build["build_directory"]),
                values=", ".join(_q(x) for x in subdirs),
                description=_q("which of the project's builds (one directory each) to build"),
            )
        if a.variants:
            for v in a.variants:
                out += t(
                    "variant",
                    name=_q(v.name),
                    default=v.default,
                    description=_q(said["descriptions"].get(v.name, v.description)),
                )
        if a.variants or len(subdirs) > 1:
            out.append("")
        langs = [x for x in a.languages if x in ("c", "cxx", "fortran")]
        if a.build.get("test_language") == "cxx" and "cxx" not in langs:  # the link test's compiler
            langs.append("cxx")
        for lang in langs:
            out.append("    " + dependency_line(lang, ("build",)))
        deps = a.spack_dependencies()
        for model, _d in model_dirs:
            if model in ("cuda", "hip"):  # the toolkit the directory's build needs
                out.append("    " + dependency_line(model, ("build", "link"), "+" + model))
        if a.build_system == "python":
            out.append("    " + dependency_line("python", ("build", "run")))
            for req in a.build.get("build_requires", ["setuptools"]):
                out.append("    " + dependency_line("py-" + re.sub(r"[._]+", "-", req.lower()), ("build",)))
        if a.build.get("cmake_minimum") and a.build_system == "cmake":
            out.append("    " + dependency_line("cmake@%s:" % a.build["cmake_minimum"], ("build",)))
        if a.build_system == "autotools" and not a.build.get("configure_present"):
            for tool in ("autoconf", "automake", "libtool", "m4"):
                out.append("    " + dependency_line(tool, ("build",)))
        if deps:
            if langs:
                out.append("")
            for d in deps:
                out.append("    " + dependency_line(d.spack, d.type, d.when))
        out.append("")
        unresolved = a.unresolved()
        if unresolved:
            for d in unresolved:
                out += t("unresolved", name=d.name, source=d.source)
            out.append("")
        self._said = said
        body = self._build_directory(a) + getattr(self, "_" + a.build_system)(a)
        if body:
            out.extend(body)
            out.append("")
        out.extend(self._tests(a))
        text = "\n".join(out).rstrip() + "\n"
        return re.sub(r"\n{3,}(?=    )", "\n\n", text)

    # -- build-system specifics: recipes/templates/<build system>.py.tmpl ----------------

    def _build_directory(self, a):
        """Where the build is when it is not at the top: the variant's choice among several."""
        sub = a.build.get("build_directory")
        if not sub:
            return []
        prop = {"cmake": "root_cmakelists_dir", "autotools": "configure_directory"}.get(
            a.build_system, "build_directory"
        )
        if a.build.get("model_dirs"):
            chosen = []
            for model, d in a.build["model_dirs"]:
                chosen += templates.lines(PACKAGE, "build_directory_model", when=_q("+" + model), dir=_q(d))
            head = templates.lines(PACKAGE, "build_directory_models", prop=prop, default=_q(sub))
            return head[:-1] + chosen + head[-1:] + [""]  # the plain build last
        if len(a.build.get("subdirs") or []) > 1:
            return templates.lines(PACKAGE, "build_directory", prop=prop) + [""]
        return templates.lines(PACKAGE, "build_directory_fixed", prop=prop, dir=_q(sub)) + [""]

    def _cmake(self, a):
        tmpl = "templates/cmake.py.tmpl"
        args = []
        for v in a.variants:
            if v.kind == "cmake-find":  # an optional find_package(): off means not looked for
                args.append(templates.render(tmpl, "disable_find_arg", package=v.option, off=_q("~" + v.name)))
            else:
                args.append(templates.render(tmpl, "variant_arg", option=_q(v.option), variant=_q(v.name)))
        for opt, negated in a.build.get("test_options", []):  # the tests build when Spack runs them
            args.append(templates.render(tmpl, "run_tests_arg", option=_q(opt), negate="not " if negated else ""))
        for extra in a.build.get("extra_args", []):
            args.append(_q(extra))
        lines = _arg_list(tmpl, "cmake_args", args) if args else []
        if a.build.get("has_install") is False and a.executables:
            lines += ([""] if lines else []) + templates.lines(
                PACKAGE, "install_found", exes=", ".join(_q(e) for e in a.executables)
            )
        return lines

    def _meson(self, a):
        tmpl = "templates/meson.py.tmpl"
        args = []
        for v in a.variants:
            on, off = ("true", "false") if v.kind == "meson" else ("enabled", "disabled")
            args.append(
                templates.render(tmpl, "variant_arg", option=v.option, on=_q(on), off=_q(off), when=_q("+" + v.name))
            )
        for opt, _negated, typ in a.build.get("test_options", []):  # the tests build when Spack runs them
            on, off = ("true", "false") if typ == "boolean" else ("enabled", "disabled")
            args.append(templates.render(tmpl, "run_tests_arg", option=opt, on=_q(on), off=_q(off)))
        for extra in a.build.get("extra_args", []):
            args.append(_q(extra))
        if not args:
            return []
        return _arg_list(tmpl, "meson_args", args)

    def _autotools(self, a):
        tmpl = "templates/autotools.py.tmpl"
        lines = []
        if not a.build.get("configure_present"):
            lines += templates.lines(tmpl, "force_autoreconf") + [""]
            if a.build.get("missing_subdirs"):
                dirs = ", ".join(_q(d) for d in a.build["missing_subdirs"])
                lines += templates.lines(tmpl, "missing_subdirs", dirs=dirs) + [""]
        if not a.variants and not a.build.get("extra_args"):
            return lines
        lines += templates.lines(tmpl, "configure_args")
        for v in a.variants:
            yes, no = ("enable", "disable") if v.kind.startswith("enable") else ("with", "without")
            if v.kind.endswith("-value"):
                lines += templates.lines(
                    tmpl, "variant_on_only", when=_q("+" + v.name), on=_q("--%s-%s" % (yes, v.option))
                )
                continue
            lines += templates.lines(
                tmpl,
                "variant",
                when=_q("+" + v.name),
                on=_q("--%s-%s" % (yes, v.option)),
                off=_q("--%s-%s" % (no, v.option)),
            )
        for extra in a.build.get("extra_args", []):
            lines += templates.lines(tmpl, "extra_arg", arg=_q(extra))
        lines += templates.lines(tmpl, "return")
        return lines

    def _makefile(self, a):
        tmpl = "templates/makefile.py.tmpl"
        where = "self.build_directory" if a.build.get("build_directory") else '"."'
        var = a.build.get("prefix_var")
        wrapper = a.build.get("mpi_wrapper")  # MPI's compiler wrappers where the Makefile wants them
        mpi = {"always": _q("^mpi"), "+mpi": _q("+mpi")}.get(wrapper)
        make_args = [templates.render(tmpl, "cc_mpi", when=mpi) if mpi else templates.render(tmpl, "cc")]
        if "cxx" in a.languages:
            make_args.append(templates.render(tmpl, "cxx_mpi", when=mpi) if mpi else templates.render(tmpl, "cxx"))
        if "fortran" in a.languages:
            make_args.append(templates.render(tmpl, "fc"))
        prefix_arg = None
        if var and var != "DESTDIR":
            prefix_arg = templates.render(tmpl, "prefix_arg", var=var)
        for var, kind in sorted(a.build.get("compiler_vars", {}).items()):
            make_args.append(
                templates.render(
                    tmpl,
                    "compiler_var",
                    var=var,
                    compiler={"cc": "spack_cc", "cxx": "spack_cxx", "fc": "spack_fc"}[kind],
                )
            )
        for name, settings in sorted(a.build.get("commented_settings", {}).items()):
            items = []
            for var, val in sorted(settings.items()):
                if val.startswith("@"):  # an MPI compiler wrapper
                    items.append('"%s={0}".format(self.spec["mpi"].%s)' % (var, val[1:]))
                elif "fopenmp" in val or "qopenmp" in val or "-openmp" in val:
                    items.append('"%s={0}".format(self.compiler.openmp_flag)' % var)
                else:
                    items.append(_q("%s=%s" % (var, val)))
            make_args.append(templates.render(tmpl, "settings_when", items=", ".join(items), when=_q("+" + name)))
        for v in a.variants:
            if v.kind == "make":
                on, off = a.build.get("switch_values", {}).get(v.option, ["yes", "no"])
                make_args.append(
                    templates.render(tmpl, "switch_arg", option=v.option, when=_q("+" + v.name), on=_q(on), off=_q(off))
                )
        for extra in a.build.get("extra_args", []):
            make_args.append(_q(extra))
        make_args = list(dict.fromkeys(make_args))
        goal = [_q(a.build["goal"])] if a.build.get("goal") else []  # the default goal only prints help
        lines = []
        if a.build.get("makefile_template"):
            lines += templates.lines(tmpl, "edit_template", template=_q(a.build["makefile_template"]), where=where) + [
                ""
            ]
        lines += templates.lines(
            tmpl, "build_targets", args=", ".join(make_args + ([prefix_arg] if prefix_arg else []) + goal)
        )
        lines.append("")
        if a.build.get("has_install") and prefix_arg:
            lines += templates.lines(tmpl, "install_targets", args=", ".join(make_args + [prefix_arg]))
        elif a.build.get("has_install") and var == "DESTDIR":
            lines += templates.lines(tmpl, "install_targets_destdir", args=", ".join(make_args))
        else:
            # no install rule: what the build makes, where a user looks for it (bin/, lib/,
            # include/), never the build tree copied whole
            exes = a.executables or []
            lines += templates.lines(tmpl, "install_in_build_directory", where=where)
            if exes:
                lines += templates.lines(tmpl, "install_programs_in", exes=", ".join(_q(e) for e in exes))
            elif not a.build.get("own_names"):  # programs the Makefile names in ways not read here
                lines += templates.lines(tmpl, "install_built_programs_in")
            if a.build.get("own_names"):
                lines += templates.lines(tmpl, "install_libraries_in", include_dir=_q(a.build.get("include_dir", ".")))
            said = getattr(self, "_said", None) or {}
            if said.get("install"):
                lines += templates.lines(
                    tmpl, "install_as_examples", examples=", ".join(sorted({r[3] for r in said["install"]}))
                )
                made = set()
                for call, path, attr, _ex in said["install"]:
                    if call == "install" and attr not in made:
                        made.add(attr)
                        lines += templates.lines(tmpl, "install_example_mkdirp", attr=attr)
                    lines += templates.lines(tmpl, "install_example_" + call, file=_q(path), attr=attr)
        return lines

    def _python(self, a):
        return []

    def _tests(self, a):
        """Stand-alone tests ``spack test run`` runs: the project's own check of an installed
        program; else each program run with the flag its source answers (``--version``,
        ``--help``, else ``-h``); for a library, a program compiled and linked against it."""
        lines = []
        used = set()

        def method(base):
            name = "test_" + re.sub(r"\W+", "_", base).strip("_")
            while name in used:
                name += "_again"
            used.add(name)
            return name

        checked = set()
        for c in a.checks:
            if c.exe not in a.executables:
                continue
            checked.add(c.exe)
            argtext = ", ".join(_q(x) for x in c.args)
            lines += templates.lines(
                PACKAGE, "test", method=method(c.exe), exe=c.exe, exe_literal=_q(c.exe), args=argtext
            )
            lines.append("")
        if (
            not checked
            and not a.executables
            and a.build_system == "makefile"
            and not a.build.get("own_names")
            and not a.build.get("has_install")
        ):
            flag = a.build.get("cli_flag", "-h")
            lines += templates.lines(PACKAGE, "test_programs_run", args=_q(flag), shown=flag)
            lines.append("")
        if not checked:
            for exe in a.executables[:2]:
                flag = a.build.get("cli_flag", "-h")
                lines += templates.lines(
                    PACKAGE,
                    "test_runs",
                    method=method(exe + "_" + flag.strip("-")),
                    exe=exe,
                    exe_literal=_q(exe),
                    args=_q(flag),
                    shown=flag,
                    status_ok="(0 <= exe.returncode < 126 or exe.returncode == %d)" % a.build["cli_status"]
                    if a.build.get("cli_status")
                    else "0 <= exe.returncode < 126",
                )
                lines.append("")
        # a library is checked on its own, whatever checks its programs had
        lib, header = a.build.get("test_library"), a.build.get("test_header")
        if lib and header:
            names = a.build.get("test_headers") or [header.rsplit("/", 1)[-1]]
            cxx = a.build.get("test_language") == "cxx"
            lines += templates.lines(
                PACKAGE,
                "test_link",
                language="C++" if cxx else "C",
                ext="cpp" if cxx else "c",
                compiler="cxx" if cxx else "cc",
                lib=lib,
                libfiles=", ".join(_q("lib" + x) for x in a.build.get("test_library_files") or [lib]),
                header=names[0],
                headers=", ".join(_q(h) for h in names),
            )
            lines.append("")
        elif lib and a.build.get("test_fortran_module"):
            lines += templates.lines(PACKAGE, "test_link_fortran", lib=lib, module=a.build["test_fortran_module"])
            lines.append("")
        return lines


# -- the model path: recipes/prompts/ -----------------------------------------------------


def system_prompt():
    """The system message: ``recipes/prompts/system.md``, ending with a newline."""
    return templates.render("prompts/system.md") + "\n"


def extract_code(text):
    """The python code in a model answer (first fenced block, or the whole answer)."""
    m = re.search(r"```(?:python|py)?[ \t]*\n(.*?)```", text, re.S)
    code = m.group(1) if m else text
    return code.strip() + "\n"


def build_messages(analysis, source, layout, spack_version, examples=(), feedback=None, previous=None):
    """The chat asking for a recipe: the system message (``prompts/system.md``); the request
    (``prompts/request.md``) followed by the examples (``prompts/example.md``), a blank line
    between each; when refining, the previous recipe as the model's answer
    (``prompts/previous.md``) and the diagnostics of its failure (``prompts/feedback.md``)."""
    a = analysis
    facts = {
        "package name": a.name,
        "class name": class_name(a.name),
        "base class": BASES[a.build_system],
        "spack version": spack_version,
        "repository layout": layout,
        "url": source.url,
        "sha256": source.sha256,
        "git": source.git,
        "commit": source.commit,
        "analysis": {k: v for k, v in a.to_dict().items() if k not in ("root", "notes")},
    }
    user = [templates.render("prompts/request.md", facts=json.dumps(facts, indent=1, default=str))]
    for ex in examples or ():
        user.append(templates.render("prompts/example.md", name=ex.name, namespace=ex.namespace, text=ex.text[:3500]))
    messages = [{"role": "system", "content": system_prompt()}, {"role": "user", "content": "\n\n".join(user)}]
    if previous is not None:
        messages.append({"role": "assistant", "content": templates.render("prompts/previous.md", recipe=previous)})
        messages.append({"role": "user", "content": templates.render("prompts/feedback.md", diagnostics=feedback)})
    return messages


class ModelGenerator:
    """Recipes from a chat model (``spack_r3.model.client.ChatModel``)."""

    how = "model"

    def __init__(self, model, spack_version="0.24"):
        self.model = model
        self.spack_version = spack_version
        self.how = "model %s" % model.config.model
        self.last_messages: Optional[List[dict]] = None

    def generate(self, analysis, source, layout="v1", examples=None, feedback=None, previous=None):
        messages = build_messages(analysis, source, layout, self.spack_version, examples, feedback, previous)
        self.last_messages = messages
        return fit_layout(extract_code(self.model.complete(messages)), layout)

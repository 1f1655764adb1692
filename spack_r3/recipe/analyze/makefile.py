"""Makefiles: the compiler variables, switches that are variants, libraries linked,
programs and install targets."""

import os
import re

from .facts import (
    Analysis,
    Dependency,
    RecipeCheck,
    RecipeVariant,
    SYSTEM_LIBS,
    languages_from_files,
    read_file,
    variant_name,
)


def makefile_checks(a: Analysis, paths):
    for path in paths:
        text = read_file(path)
        if not text:
            continue
        rel = os.path.relpath(path, a.root)
        lines = text.splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"^(check|test)\s*:", line)
            if not m:
                continue
            a.build.setdefault("check_target", m.group(1))
            for body in lines[i + 1 :]:
                if not body.startswith("\t"):
                    break
                cmd = body.strip().lstrip("@-").strip()
                cm = re.match(r"^\./([\w.+-]+)((?:\s+[^;&|>]+)?)", cmd)
                if cm:
                    a.checks.append(RecipeCheck(cm.group(1), cm.group(2).split(), "%s: %s" % (rel, cmd)))
        # programs the install rule copies into a bin directory
        targets = set(re.findall(r"(?m)^([A-Za-z_][\w.+-]*)\s*:(?!=)", text))
        for i, line in enumerate(lines):
            if not re.match(r"^install(-exec)?\s*:", line):
                continue
            for body in lines[i + 1 :]:
                if not body.startswith("\t"):
                    break
                if "bin" not in body:
                    continue
                for tok in re.findall(r"[\w.+-]+", body.split("bin")[0]):
                    if tok in targets and tok not in a.executables and not re.search(r"\.(o|a|so|h|pc)$", tok):
                        a.executables.append(tok)


# Targets that make's default goal may be but that build no program.
NOT_PROGRAM_TARGETS = {
    "clean",
    "distclean",
    "install",
    "check",
    "test",
    "tests",
    "help",
    "default",
    "debug",
    "release",
    "depend",
    "dep",
    "run",
}


MAKE_VAR_RE = re.compile(r"^(?:override\s+|export\s+)?([A-Za-z_][\w]*)\s*(?::{1,2}|\?|\+)?=\s*(.*?)\s*$")
COMPILERS = {
    "gcc": "cc",
    "cc": "cc",
    "clang": "cc",
    "icc": "cc",
    "icx": "cc",
    "xlc": "cc",
    "pgcc": "cc",
    "nvc": "cc",
    "g++": "cxx",
    "c++": "cxx",
    "clang++": "cxx",
    "icpc": "cxx",
    "icpx": "cxx",
    "xlc++": "cxx",
    "pgc++": "cxx",
    "nvc++": "cxx",
    "gfortran": "fc",
    "ifort": "fc",
    "ifx": "fc",
    "flang": "fc",
    "f77": "fc",
    "f90": "fc",
    "f95": "fc",
    "pgfortran": "fc",
    "nvfortran": "fc",
}
# yes/no switches of a Makefile that are about how, not what, it builds: not variants
SWITCH_VALUES = {
    "yes": ("yes", "no"),
    "no": ("yes", "no"),
    "on": ("on", "off"),
    "off": ("on", "off"),
    "true": ("true", "false"),
    "false": ("true", "false"),
}
MAKE_SWITCHES_NOT_VARIANTS = {"optimize", "debug", "profile", "verbose", "quiet", "static", "v"}


def _make_expand(text, mvars, depth=0):
    if depth > 5 or "$" not in text:
        return text
    out = re.sub(r"\$[({](\w+)[)}]", lambda m: mvars.get(m.group(1), m.group(0)), text)
    return _make_expand(out, mvars, depth + 1) if out != text else out


def _make_lines(text):
    """Logical lines: backslash continuations joined, comments dropped."""
    out, cur = [], ""
    for line in text.splitlines():
        if not line.startswith("\t"):
            line = re.sub(r"(?<!\\)#.*$", "", line)
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append(cur + line)
        cur = ""
    if cur:
        out.append(cur)
    return out


def _make_condition(line, switches):
    """The switch literal (``"MPI"``, ``"~MPI"``) an ``ifeq``/``ifneq``/``ifdef`` tests, or None."""
    m = re.match(r"^\s*(ifeq|ifneq)\s*\(\s*\$[({](\w+)[)}]\s*,\s*(\w*)\s*\)", line) or re.match(
        r"^\s*(ifeq|ifneq)\s*\(\s*(\w*)\s*,\s*\$[({](\w+)[)}]\s*\)", line
    )
    if m:
        var, val = (
            (m.group(2), m.group(3)) if not m.group(2).islower() or m.group(3).islower() else (m.group(3), m.group(2))
        )
        if m.group(2) in switches:
            var, val = m.group(2), m.group(3)
        elif m.group(3) in switches:
            var, val = m.group(3), m.group(2)
        else:
            return None
        on = val.lower() in ("yes", "1", "true", "on")
        if m.group(1) == "ifneq":
            on = not on if val else True
        return var if on else "~" + var
    m = re.match(r"^\s*(ifdef|ifndef)\s+(\w+)", line)
    if m and m.group(2) in switches:
        return m.group(2) if m.group(1) == "ifdef" else "~" + m.group(2)
    return None


MPI_WRAPPERS = {
    "mpicc": "mpicc",
    "mpicxx": "mpicxx",
    "mpic++": "mpicxx",
    "mpiCC": "mpicxx",
    "mpig++": "mpicxx",
    "mpif90": "mpifc",
    "mpif77": "mpif77",
    "mpifort": "mpifc",
}


def _commented_settings(a, text, mvars, rel):
    """The Makefile's own commented-out alternative for MPI or OpenMP (HPCCG's
    ``#USE_MPI = -DUSING_MPI`` and ``#CXX=/usr/local/bin/mpicxx`` above ``USE_MPI =``): a
    variant, off as the Makefile has it, that passes those settings (MPI's wrappers for the
    compilers)."""
    commented = {}
    for var, val in re.findall(r"(?m)^#\s*([A-Z][A-Z0-9_]*)\s*[:?]?=\s*(\S.*?)\s*$", text):
        commented.setdefault(var, val)
    names = {v.name for v in a.variants}
    for name, key in (("mpi", r"MPI"), ("openmp", r"OMP|OPENMP")):
        settings = {}
        for var, val in commented.items():
            wrapper = MPI_WRAPPERS.get(os.path.basename(val.split()[0])) if name == "mpi" else None
            if "/" in val and not wrapper:
                continue  # a path on the author's machine (MPI_INC=-I/usr/MPICH/...): the wrapper knows
            if wrapper or (re.search(key, var) and not mvars.get(var)):
                settings[var] = ("@" + wrapper) if wrapper else val
        if name in names or not any(re.search(key, v) for v in settings):
            continue
        a.variants.append(
            RecipeVariant(
                name,
                False,
                "Build with the Makefile's %s settings (%s)"
                % ("MPI" if name == "mpi" else "OpenMP", ", ".join(sorted(settings))),
                ",".join(sorted(settings)),
                "make-commented",
            )
        )
        a.build.setdefault("commented_settings", {})[name] = settings
        if name == "mpi":
            a.dependencies.append(Dependency("MPI", "cmake", "%s: commented MPI settings" % rel, when="+mpi"))


def analyze_makefile(a: Analysis):
    mk = next(
        (
            os.path.join(a.root, n)
            for n in ("GNUmakefile", "Makefile", "makefile")
            if os.path.isfile(os.path.join(a.root, n))
        ),
        None,
    )
    if mk is None:  # only a template to copy (CoMD's Makefile.vanilla)
        mk = next(
            (
                os.path.join(a.root, n)
                for n in sorted(os.listdir(a.root))
                if n.startswith("Makefile.") and not n.endswith((".in", ".am"))
            ),
            None,
        )
        a.build["makefile_template"] = os.path.basename(mk)
    text = read_file(mk)
    rel = os.path.relpath(mk, a.root)
    lines = _make_lines(text)
    mvars, switches = {}, {}
    depth = 0
    for line in lines:
        if re.match(r"^\s*if(n?eq|n?def)\b", line):
            depth += 1
        elif re.match(r"^\s*endif\b", line):
            depth -= 1
        m = MAKE_VAR_RE.match(line) if not line.startswith("\t") else None
        if m and m.group(1) not in mvars:
            mvars[m.group(1)] = m.group(2)
            if depth == 0 and m.group(2).lower() in SWITCH_VALUES and m.group(1).isupper():
                switches[m.group(1)] = m.group(2).lower() in ("yes", "on", "true")
                # the spelling the Makefile compares with: yes/no, ON/OFF, true/false
                on, off = SWITCH_VALUES[m.group(2).lower()]
                a.build.setdefault("switch_values", {})[m.group(1)] = (
                    [on.upper(), off.upper()] if m.group(2).isupper() else [on, off]
                )
    _architecture_file(a, text, mvars, rel)
    m = re.search(r"(?m)^\s*VERSION\s*[:?]?=\s*([\w.+-]+)", text)
    if m:
        a.version = m.group(1)
    pv = re.search(r"(?m)^\s*(PREFIX|prefix|INSTALL_PREFIX|DESTDIR)\s*[:?]?=", text)
    a.build["prefix_var"] = pv.group(1) if pv else None
    a.build["has_install"] = bool(re.search(r"(?m)^(?:[\w.-]+[ \t]+)*install(?:[ \t]+[\w.-]+)*[ \t]*:(?!=)", text))
    targets = [_make_expand(t, mvars) for t in re.findall(r"(?m)^([A-Za-z_$][\w.$(){}-]*)\s*:(?!=)", text)]
    targets = [t for t in targets if "$" not in t]
    a.build["targets"] = targets
    # a compiler named by path or by name in a variable other than CC/CXX/FC (which the recipe
    # sets anyway): the recipe passes Spack's compiler for it (HPCCG's CXX=/usr/local/bin/g++)
    compiler_vars = {}
    for var, val in mvars.items():
        first = val.split()[0] if val.split() else ""
        kind = COMPILERS.get(os.path.basename(first))
        if kind and (first.startswith("/") or var not in ("CC", "CXX", "FC", "F77")):
            compiler_vars[var] = kind
    a.build["compiler_vars"] = compiler_vars
    # yes/no switches -> variants; what their ifeq blocks add -> dependencies behind them
    for var, default in switches.items():
        if var.lower() in MAKE_SWITCHES_NOT_VARIANTS:
            continue
        on = a.build.get("switch_values", {}).get(var, ["yes"])[0]
        a.variants.append(RecipeVariant(variant_name(var), default, "Build with %s=%s" % (var, on), var, "make"))
    _commented_settings(a, text, mvars, rel)
    kept = {v.option for v in a.variants}
    conds = []
    libs = {}
    uses_mpi_wrapper = None
    for line in lines:
        if re.match(r"^\s*if(n?eq|n?def)\b", line):
            conds.append(_make_condition(line, kept))
            continue
        if re.match(r"^\s*else\b", line) and conds:
            c = conds[-1]
            conds[-1] = (c[1:] if c.startswith("~") else "~" + c) if c else None
            continue
        if re.match(r"^\s*endif\b", line) and conds:
            conds.pop()
            continue
        when = "".join(("~" if c.startswith("~") else "+") + variant_name(c.lstrip("~")) for c in conds if c) or None
        if re.match(r"^\s*(LDLIBS|LIBS|LDFLAGS|LDADD|\w*LIBS?\w*)\s*[:+?]?=", line) or line.startswith("\t"):
            for lib in re.findall(r"(?<![\w-])-l([\w+.-]+)", _make_expand(line, mvars)):
                libs.setdefault((lib, when), line.strip())
        if re.search(r"\bmpi(cc|cxx|c\+\+|CC|f90|fort|icc|icpc)\b", line) and uses_mpi_wrapper is None:
            uses_mpi_wrapper = when or ""
        # a pkg-config call asks for --cflags/--libs (not "can't generate pkg-config file")
        for pc in re.findall(r"pkg-config\s+(?:--\S+\s+)+([\w.+-]+)", line):
            a.dependencies.append(Dependency(pc, "pkgconfig", "%s: pkg-config %s" % (rel, pc), when=when))
    for (lib, when), _line in sorted(libs.items(), key=lambda x: (x[0][0], x[0][1] or "")):
        a.dependencies.append(Dependency(lib, "library", "%s: -l%s" % (rel, lib), when=when, system=lib in SYSTEM_LIBS))
    if uses_mpi_wrapper is not None:
        if not uses_mpi_wrapper and any(v.name == "mpi" for v in a.variants):
            # CC = mpicc for every build, and a switch that says whether MPI is used (CoMD's
            # DO_MPI): the recipe gives the wrapper with +mpi, Spack's compiler without
            uses_mpi_wrapper = "+mpi"
        a.dependencies.append(
            Dependency("MPI", "cmake", "%s: an MPI compiler wrapper" % rel, when=uses_mpi_wrapper or None)
        )
        a.build["mpi_wrapper"] = uses_mpi_wrapper or "always"
    m = re.search(r"(?m)^all\s*:([^\n]*)", text)
    if m:
        for t in _make_expand(m.group(1), mvars).split():
            t = t.strip()
            if t and "$" not in t and not re.search(r"\.(o|a|so|pc|h)$", t) and t in targets:
                a.build.setdefault("all_targets", []).append(t)
    elif targets and targets[0] not in NOT_PROGRAM_TARGETS and not re.search(r"\.(o|a|so|pc|h)$", targets[0]):
        a.build["all_targets"] = [targets[0]]  # no `all`: make builds the first target
    elif targets and targets[0] == "help":
        _goal_from_help(a, targets, rel)
    subs = _install_submakefiles(a, text, mvars) if a.build["has_install"] else []
    if subs and not a.build["prefix_var"]:
        # the install rule runs the subdirectories' (lz4: $(MAKE) -C lib install): their prefix
        for sub in subs:
            pv = re.search(r"(?m)^\s*(PREFIX|prefix|INSTALL_PREFIX)\s*[:?]?=", read_file(sub))
            if pv:
                a.build["prefix_var"] = pv.group(1)
                break
    sub_targets = [t for sub in subs for t in make_targets(read_file(sub))]
    a.build["own_names"] = library_targets(targets + sub_targets)
    makefile_checks(a, [mk] + subs)
    if not a.build["has_install"]:
        # (a program put elsewhere, ../bin/x-$(FLAVOR), is found after the build instead)
        a.executables = [
            t
            for t in a.build.get("all_targets", [])
            if not t.startswith("lib") and t not in PHONY_LIKE and t not in _phony(text) and "/" not in t
        ]
    a.languages = languages_from_files(a.root)


# architecture files a recipe must not pick: another OS, vendor compilers, debug builds, templates
FOREIGN_ARCH = re.compile(
    r"mac|darwin|osx|win|cygwin|icc|icpc|icx|intel|xl|pgi|nvhpc|cray|cuda|hip|debug|unknown|template"
)


def _arch_preference(name):
    n = name.lower()
    return (
        bool(FOREIGN_ARCH.search(n)),
        "mpi" in n,
        not ("serial" in n or "seq" in n),
        not ("linux" in n or "gcc" in n or "gnu" in n),
        n,
    )


def _architecture_file(a: Analysis, text, mvars, rel):
    """``include setup/Make.$(arch)``: a variable names the architecture file the build reads
    (HPCG's default ``UNKNOWN`` is a template to fill in). The recipe gives make a portable
    one (Linux, serial, no vendor compiler), and what that file sets (a compiler named by
    path) is read as the Makefile's own."""
    m = re.search(r"(?m)^\s*-?include\s+(\S*\$[({]\w+[)}]\S*)", text)
    if not m:
        return
    path = m.group(1)
    for _ in range(5):  # expand what names a path; keep the leaf that names the architecture
        path = re.sub(
            r"\$[({](\w+)[)}]",
            lambda x: mvars[x.group(1)] if re.search(r"[$/]", mvars.get(x.group(1), "")) else x.group(0),
            path,
        )
    leaf = re.search(r"\$[({](\w+)[)}]", path)
    if not leaf or leaf.group(1) not in mvars:
        return
    var = leaf.group(1)
    head, tail = path[: leaf.start()], path[leaf.end() :]
    folder = os.path.join(a.root, os.path.dirname(head))
    if not os.path.isdir(folder) or "$" in head + tail:
        return
    stem = os.path.basename(head)
    choices = [
        n[len(stem) : len(n) - len(tail) if tail else None]
        for n in sorted(os.listdir(folder))
        if n.startswith(stem) and n.endswith(tail) and len(n) > len(stem) + len(tail)
    ]
    if len(choices) < 2:
        return
    default = mvars[var]
    best = sorted(choices, key=_arch_preference)[0]
    if default in choices and not FOREIGN_ARCH.search(default.lower()):
        best = default
    a.build.setdefault("extra_args", []).append("%s=%s" % (var, best))
    a.notes.append(
        "%s: `include %s` names an architecture file: the recipe builds %s=%s" % (rel, m.group(1), var, best)
    )
    chosen = os.path.join(folder, stem + best + tail)
    for line in _make_lines(read_file(chosen)):
        mm = MAKE_VAR_RE.match(line) if not line.startswith("\t") else None
        if mm:
            mvars.setdefault(mm.group(1), mm.group(2))


def make_targets(text):
    mvars = {}
    for line in _make_lines(text):
        m = MAKE_VAR_RE.match(line) if not line.startswith("\t") else None
        if m and m.group(1) not in mvars:
            mvars[m.group(1)] = m.group(2)
    # a rule may make several (Mini-XML's `libmxml.a libmxml4.a: $(LIBOBJS)`)
    rules = re.findall(r"(?m)^([A-Za-z_$][\w.$(){} \t-]*?)[ \t]*:(?![=:])", text)
    targets = [_make_expand(t, mvars) for r in rules for t in r.split()]
    return [t for t in targets if "$" not in t]


def library_targets(targets):
    """The libraries among make targets, by name: ``liblz4.a``, ``libmxml4.so.2`` and
    ``libmxml4.2.dylib`` are lz4 and mxml4; objects, resources and pkg-config files are none."""
    out = []
    for t in targets:
        m = re.match(r"^lib([A-Za-z0-9][\w+-]*?)(?:\.\d+)*\.(?:a|so|la|dylib|dll)(?:\.\d+)*$", t) or re.match(
            r"^lib([A-Za-z0-9][\w+-]*)$", t
        )
        if m and not re.search(r"-(dll|static|shared)$", m.group(1)):
            out.append(m.group(1))
    return list(dict.fromkeys(out))


def _install_submakefiles(a, text, mvars):
    """The Makefiles of the subdirectories a Makefile's install rule runs (``$(MAKE) -C lib $@``)."""
    lines = text.splitlines()
    dirs = []
    for i, line in enumerate(lines):
        if not re.match(r"^(?:[\w.-]+[ \t]+)*install(?:[ \t]+[\w.-]+)*[ \t]*:(?!=)", line):
            continue
        for body in lines[i + 1 :]:
            if not body.startswith("\t"):
                break
            dirs += re.findall(r"(?:-C\s*|cd\s+)(\S+?)(?:\s|;|&|$)", _make_expand(body, mvars))
    out = []
    for d in dict.fromkeys(dirs):
        for n in ("GNUmakefile", "Makefile", "makefile"):
            path = os.path.normpath(os.path.join(a.root, d, n))
            if "$" not in d and path.startswith(a.root + os.sep) and os.path.isfile(path):
                out.append(path)
                break
    return out


# machine targets a Makefile whose default goal prints help offers, the portable ones first
GENERIC_GOALS = ["default", "gnu", "gcc", "linux", "serial", "mpi", "openmpi", "mpich", "omp", "openmp"]


def _goal_from_help(a: Analysis, targets, rel):
    """A Makefile whose default goal only prints help (miniMD's ``make openmpi``): the recipe
    asks for a machine target that has its ``Makefile.<target>``, a portable one first; what
    that file compiles with (an MPI wrapper) decides the MPI dependency."""
    with_file = [t for t in targets if os.path.isfile(os.path.join(a.root, "Makefile." + t))]
    if not with_file:
        return
    goal = sorted(with_file, key=lambda t: GENERIC_GOALS.index(t) if t in GENERIC_GOALS else len(GENERIC_GOALS))[0]
    a.build["goal"] = goal
    a.notes.append("the default goal prints help: the recipe builds `make %s`" % goal)
    text = read_file(os.path.join(a.root, "Makefile." + goal))
    if re.search(r"\bmpi(cc|cxx|c\+\+|CC|f90|fort|icc|icpc)\b", text) and not a.build.get("mpi_wrapper"):
        a.dependencies.append(Dependency("MPI", "cmake", "%s: Makefile.%s's MPI compiler wrapper" % (rel, goal)))
        a.build["mpi_wrapper"] = "always"


# targets that name a goal, not a file a user runs
PHONY_LIKE = {
    "all",
    "allmost",
    "lib",
    "libs",
    "examples",
    "manuals",
    "man",
    "docs",
    "doc",
    "build_tests",
    "tests",
    "test",
    "check",
    "programs",
    "tools",
    "bin",
    "shared",
    "static",
    "default",
}


def _phony(text):
    return set(" ".join(re.findall(r"(?m)^\.PHONY\s*:(.*)$", text)).split())

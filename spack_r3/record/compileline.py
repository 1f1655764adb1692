"""A compiler invocation as the launchers (``r3-record``, ``r3-apply``) and replay read it:
its sources, output and flags, what recompiles a unit's IR, and a link whose sources a
launcher compiles itself."""

import os
import subprocess
import sys
import tempfile

from .. import fortran
from ..data import opt_level
from .flags import target_flags, unoptimized_args

SOURCE_EXTS = (".c", ".cc", ".cpp", ".cxx", ".c++", ".C", ".i", ".ii") + fortran.SOURCE_EXTS
# Options whose value is the next argument.
TAKES_VALUE = {
    "-o",
    "-MF",
    "-MT",
    "-MQ",
    "-I",
    "-D",
    "-U",
    "-include",
    "-imacros",
    "-isystem",
    "-iquote",
    "-idirafter",
    "-isysroot",
    "-x",
    "-Xclang",
    "-Xlinker",
    "-Xpreprocessor",
    "-Xassembler",
    "-L",
    "-target",
    "-arch",
    "-mllvm",
    "-T",
    "-u",
    "-e",
    "-z",
    "-aux-info",
    "-J",  # Fortran: where module files go
    "-module-dir",
}
PASSTHROUGH_FLAGS = {
    "-E",
    "-S",
    "-M",
    "-MM",
    "-fsyntax-only",
    "-emit-llvm",
    "-###",
    "--version",
    "-dumpversion",
    "-dumpmachine",
    "-print-search-dirs",
}
DEP_FLAGS = {"-MD", "-MMD", "-MP"}
DEP_FLAGS_WITH_VALUE = {"-MF", "-MT", "-MQ"}
PREPROCESSOR_WITH_VALUE = {"-I", "-D", "-U", "-include", "-imacros", "-isystem", "-iquote", "-idirafter"}


def warn(msg):
    print("r3-record: " + msg, file=sys.stderr)


class CompileLine:
    """One compiler invocation, split into what the launcher needs to change."""

    def __init__(self, argv):
        self.compiler = argv[0]
        self.args = argv[1:]
        self.sources, self.output, self.compile_only = [], None, False
        self.passthrough = any(a in PASSTHROUGH_FLAGS or a.startswith("-print-") for a in self.args)
        self.shared = any(a in ("-shared", "-r", "-nostdlib") for a in self.args)
        self.language_forced = False
        i = 0
        while i < len(self.args):
            a = self.args[i]
            if a in TAKES_VALUE:
                if a == "-o":
                    self.output = self.args[i + 1] if i + 1 < len(self.args) else None
                if a == "-x":
                    self.language_forced = True
                i += 2
                continue
            if a == "-c":
                self.compile_only = True
            elif not a.startswith("-") and a.endswith(SOURCE_EXTS):
                self.sources.append(a)
            i += 1

    def without(
        self, drop_sources=True, drop_output=True, drop_deps=False, drop_preprocessor=False, drop_compile_only=True
    ):
        """The arguments with the named groups removed."""
        out, i = [], 0
        while i < len(self.args):
            a = self.args[i]
            nxt = self.args[i + 1] if i + 1 < len(self.args) else None
            if a == "-o" and drop_output:
                i += 2
                continue
            if drop_deps and (a in DEP_FLAGS or a in DEP_FLAGS_WITH_VALUE):
                i += 2 if a in DEP_FLAGS_WITH_VALUE else 1
                continue
            if drop_preprocessor and (a in PREPROCESSOR_WITH_VALUE or (a[:2] in ("-I", "-D", "-U") and len(a) > 2)):
                i += 2 if a in PREPROCESSOR_WITH_VALUE else 1
                continue
            if a == "-c" and drop_compile_only:
                i += 1
                continue
            if a in TAKES_VALUE:
                out += [a, nxt] if nxt is not None else [a]
                i += 2
                continue
            if drop_sources and a in self.sources:
                i += 1
                continue
            out.append(a)
            i += 1
        return out

    @property
    def opt_level(self):
        return opt_level(self.args)


def codegen_args(line):
    """Flags that still matter when compiling IR to an object (no preprocessor, no deps)."""
    keep = []
    args = line.without(drop_deps=True, drop_preprocessor=True)
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-target", "-arch", "-mllvm", "-Xclang") and i + 1 < len(args):
            keep += [a, args[i + 1]]
            i += 2
            continue
        if a.startswith(("-O", "-f", "-m", "-g", "--target", "-W", "-pthread")) and not a.startswith("-std"):
            keep.append(a)
        i += 1
    return keep


def ir_codegen_args(line):
    """``codegen_args`` as the line's compiler takes them on IR (flang: no warning options)."""
    args = codegen_args(line)
    return fortran.codegen_flags(args) if fortran.is_flang(line.compiler) else args


def bitcode_args(line):
    """The flags (no source, output or dependency files) that compile the unit's bitcode
    before optimization: a source variant of the unit is compiled with the same ones."""
    return line.without(drop_sources=True, drop_output=True, drop_deps=True) + target_flags() + unoptimized_args(line)


def run(cmd, **kw):
    return subprocess.run(cmd, **kw).returncode


def link_compiling(line, sources, compile_one, extra=(), late=None):
    """Run the link ``line`` whose ``sources`` a launcher compiles itself: each by
    ``compile_one(argv, source, obj)`` (its exit status) into a temporary object, which
    stands where its source stood (a static library named after the source must come
    after the object that uses it); ``extra`` goes at the end of the link, and what
    ``late(tmp)`` returns (objects it may write in ``tmp``), asked once the sources are
    compiled, before it."""
    with tempfile.TemporaryDirectory(prefix="r3-link-") as tmp:
        objects = {}
        for i, src in enumerate(sources):
            obj = os.path.join(tmp, "%d-%s.o" % (i, os.path.splitext(os.path.basename(src))[0]))
            single = [line.compiler] + line.without(drop_sources=True, drop_output=True) + ["-c", src, "-o", obj]
            rc = compile_one(single, src, obj)
            if rc:
                return rc
            objects[src] = obj
        args = line.without(drop_sources=False, drop_output=False, drop_compile_only=False)
        return run([line.compiler] + [objects.get(a, a) for a in args] + list(late(tmp) if late else []) + list(extra))

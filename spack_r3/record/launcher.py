"""``r3-record``: a compiler launcher, used like ccache.

    r3-record clang -O2 -c foo.c -o foo.o        make CC="r3-record clang"

With ``R3_RECORD_DIR`` set, each C/C++ or Fortran (flang) translation unit is
compiled three times by the given compiler: to bitcode before optimization (kept
for replay, with the exact compile command), to its textual IR (which gets the
probes), and from that IR to the requested object with the user's own
optimization flags.
Links of executables get the record runtime. Without ``R3_RECORD_DIR``, or for
anything that is not a compile or a link, the command runs unchanged. A unit
that cannot be instrumented is compiled unchanged, with one warning line.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

from .. import fortran
from ..data import opt_level
from ..toolchain import before_llvm_passes, ir_input_flags
from .flags import clang_for_runtime, target_flags, unoptimized_args

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


def record_unit(line, source, obj, record_dir, wanted):
    """Compile one source with probes into ``obj``. Returns a reason string on failure."""
    from .instrument import ModuleAnalysis, instrument_text

    with tempfile.TemporaryDirectory(prefix="r3-record-") as tmp:
        bc = os.path.join(tmp, "module.bc")
        base = line.without(drop_sources=True, drop_output=True)
        deps_target = []
        if any(a in ("-MD", "-MMD") for a in base) and not any(a in ("-MT", "-MQ") for a in base):
            deps_target = ["-MT", obj]
        flang = fortran.is_flang(line.compiler)
        cmd_bc = (
            [line.compiler]
            + base
            + target_flags()
            + deps_target
            + unoptimized_args(line)
            + ["-emit-llvm", "-c"]
            + before_llvm_passes(line.compiler)
            + [source, "-o", bc]
        )
        # flang's -opt-bisect-limit names every pass it skips on stderr: not shown
        if run(cmd_bc, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if flang else subprocess.PIPE) != 0:
            return "the compiler could not emit LLVM bitcode (is it clang or flang?)"
        bitcode = open(bc, "rb").read()
        analysis = ModuleAnalysis(bitcode)
        kernels, skipped = analysis.select(wanted)
        for name, reason in skipped:
            warn("%s: %s not recorded: %s" % (source, name, reason))
        digest = hashlib.sha256(bitcode).hexdigest()[:16]
        tu_dir = os.path.join(record_dir, "tus", digest)
        _store_unit(tu_dir, bitcode, line, source, kernels, analysis)
        ll = os.path.join(tmp, "module.ll")
        if run(_print_ir(line.compiler, bc, ll), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) != 0:
            return "the compiler could not print its IR"
        instrumented = os.path.join(tmp, "instrumented.ll")
        with open(ll) as f:
            text = f.read()
        with open(instrumented, "w") as f:
            f.write(instrument_text(text, kernels, tu_dir))
        cmd_obj = (
            [line.compiler]
            + ir_codegen_args(line)
            + target_flags()
            + ir_input_flags(line.compiler)
            + ["-c", instrumented, "-o", obj]
        )
        proc = subprocess.run(cmd_obj, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            return "instrumented IR did not compile: " + (proc.stderr.strip().splitlines() or ["?"])[0]
    return None


def _print_ir(compiler, bc, ll):
    """The command that prints bitcode ``bc`` as text: clang's own, or for flang the
    ``llvm-dis`` of its LLVM (flang prints no IR it did not compile)."""
    if not fortran.is_flang(compiler):
        return [compiler, "-S", "-emit-llvm", "-Xclang", "-disable-llvm-passes", bc, "-o", ll]
    from ..toolchain import find_llvm_tools

    version = fortran.flang_major(compiler)
    return [find_llvm_tools(version, version).dis, bc, "-o", ll]


def _store_unit(tu_dir, bitcode, line, source, kernels, analysis):
    if os.path.exists(os.path.join(tu_dir, "tu.json")):
        return
    os.makedirs(os.path.dirname(tu_dir), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(tu_dir))
    with open(os.path.join(tmp, "module.bc"), "wb") as f:
        f.write(bitcode)
    src = os.path.abspath(source)
    if os.path.exists(src):
        shutil.copyfile(src, os.path.join(tmp, "source" + os.path.splitext(src)[1]))
    meta = {
        "source_file": src,
        "compile_command": [line.compiler] + line.args,
        "compile_dir": os.getcwd(),
        "bitcode_args": bitcode_args(line),
        "triple": analysis.module.triple,
        "kernels": [k.to_json() for k in kernels],
        "exports": analysis.exports(),
        "export_globals": analysis.export_globals(),
    }
    with open(os.path.join(tmp, "tu.json"), "w") as f:
        json.dump(meta, f, indent=1)
    try:
        os.rename(tmp, tu_dir)
    except OSError:  # another compile of the same unit won the race
        shutil.rmtree(tmp, ignore_errors=True)


def launch(argv):
    if not argv:
        print("usage: r3-record COMPILER ARGS...", file=sys.stderr)
        return 2
    record_dir = os.environ.get("R3_RECORD_DIR")
    line = CompileLine(argv)
    if not record_dir or line.passthrough:
        return run(argv)
    from . import cuda

    if cuda.unit_kind(line.args):  # CUDA/HIP sources: compiled unchanged, their device IR kept
        return cuda.launch(line.compiler, line.args, record_dir, warn)
    if line.language_forced:
        return run(argv)
    # One name a line: demangled C++ names hold commas.
    wanted = set(filter(None, os.environ.get("R3_KERNELS", "").split("\n"))) or None
    cxx_sources = line.sources
    if line.compile_only:
        if not cxx_sources:
            return run(argv)
        if len(cxx_sources) == 1:
            obj = line.output or os.path.splitext(os.path.basename(cxx_sources[0]))[0] + ".o"
            return _compile(line, argv, cxx_sources[0], obj, record_dir, wanted)
        for src in cxx_sources:
            obj = os.path.splitext(os.path.basename(src))[0] + ".o"
            rc = _compile(
                line, [line.compiler] + line.without(drop_sources=True) + ["-c", src], src, obj, record_dir, wanted
            )
            if rc:
                return rc
        return 0
    # A link, possibly compiling sources on the way.
    from .runtime import link_args

    from .offload import is_offload

    extra = [] if line.shared else link_args(clang_for_runtime(line.compiler), offload=is_offload(line))
    if not line.shared:
        extra += cuda.link_args(clang_for_runtime(line.compiler), line.args)
    from . import reach

    # the globals kernels reach through other units, once the link's own sources are units too
    late = (
        None if line.shared else (lambda tmp: reach.link_args(clang_for_runtime(line.compiler), record_dir, tmp, warn))
    )
    return link_compiling(
        line, cxx_sources, lambda argv, src, obj: _compile(line, argv, src, obj, record_dir, wanted), extra, late
    )


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


def _compile(line, single_argv, source, obj, record_dir, wanted):
    from .offload import is_offload, record_device_unit

    if is_offload(line):  # compiled as the build compiles it; its device IR kept beside
        rc = run(single_argv if "-o" in single_argv else single_argv + ["-o", obj])
        if rc == 0:
            try:
                reason = record_device_unit(line, source, record_dir)
            except Exception as err:  # recording must never break a build
                reason = "%s: %s" % (type(err).__name__, err)
            if reason:
                warn("%s: target regions not recorded (%s)" % (source, reason))
        return rc
    try:
        reason = record_unit(line, source, obj, record_dir, wanted)
    except Exception as err:  # instrumentation must never break a build
        reason = "%s: %s" % (type(err).__name__, err)
    if reason is None:
        return 0
    rc = run(single_argv if "-o" in single_argv else single_argv + ["-o", obj])
    if rc == 0:
        warn("%s: compiled without probes (%s)" % (source, reason))
    return rc


def main():
    sys.exit(launch(sys.argv[1:]))


if __name__ == "__main__":
    main()

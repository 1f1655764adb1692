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

import os
import sys

from .. import backends
from .compileline import CompileLine, link_compiling, run, warn
from .flags import clang_for_runtime


def launch(argv):
    if not argv:
        print("usage: r3-record COMPILER ARGS...", file=sys.stderr)
        return 2
    record_dir = os.environ.get("R3_RECORD_DIR")
    line = CompileLine(argv)
    if not record_dir or line.passthrough:
        return run(argv)
    backend = backends.of_compile(line.args)
    rc = backend.record_line(line, record_dir, warn)  # (CUDA/HIP: compiled unchanged, device IR kept)
    if rc is not None:
        return rc
    if line.language_forced:
        return run(argv)
    # One name a line: demangled C++ names hold commas.
    wanted = set(filter(None, os.environ.get("R3_KERNELS", "").split("\n"))) or None

    def compile_one(argv, src, obj):
        return backend.record_source(line, argv, src, obj, record_dir, wanted, warn)

    sources = line.sources
    if line.compile_only:
        if not sources:
            return run(argv)
        if len(sources) == 1:
            return compile_one(
                argv, sources[0], line.output or os.path.splitext(os.path.basename(sources[0]))[0] + ".o"
            )
        for src in sources:
            obj = os.path.splitext(os.path.basename(src))[0] + ".o"
            rc = compile_one([line.compiler] + line.without(drop_sources=True) + ["-c", src], src, obj)
            if rc:
                return rc
        return 0
    # A link, possibly compiling sources on the way: each backend's record runtime linked in.
    from . import reach

    clang = clang_for_runtime(line.compiler)
    extra = [] if line.shared else [a for b in backends.REGISTRY for a in b.record_link_args(clang, line)]
    # the globals kernels reach through other units, once the link's own sources are units too
    late = None if line.shared else (lambda tmp: reach.link_args(clang, record_dir, tmp, warn))
    return link_compiling(line, sources, compile_one, extra, late)


def main():
    sys.exit(launch(sys.argv[1:]))


if __name__ == "__main__":
    main()

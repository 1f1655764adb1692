"""Build a source tree with record probes, run it, and capture its hot kernels."""

import json

from .. import cxxnames
from ..record.session import record as record_tree
from ..report import percent, say, seconds, table
from ..workspace import Workspace

description = "build with probes, run, capture hot kernels"


def setup_parser(subparser):
    subparser.add_argument("--source", required=True, help="source tree to build (never modified)")
    subparser.add_argument("--run", required=True, help="command that runs the application (in the build tree)")
    subparser.add_argument("--build", default=None,
                           help='build command (default: make CC="r3-record <clang>"). It sees $R3_CC and $R3_CXX '
                                '(launcher + compiler, for Make), $R3_LAUNCHER, $R3_CLANG and $R3_CLANGXX (for CMake: '
                                '-DCMAKE_C_COMPILER=$R3_CLANG -DCMAKE_C_COMPILER_LAUNCHER=$R3_LAUNCHER '
                                '-DCMAKE_C_LINKER_LAUNCHER=$R3_LAUNCHER)')
    subparser.add_argument("--kernel", action="append", default=[], metavar="NAME",
                           help="record this function (repeatable; default: every function with a loop). C++: "
                                "the mangled or demangled name, or the qualified name alone (Solver::apply) "
                                "when no overload shares it")
    subparser.add_argument("--instances", type=int, default=1, help="capture the first N calls of each kernel")
    subparser.add_argument("--top", type=int, default=None, metavar="K",
                           help="run twice: first with probes only, then capture only the K hottest kernels "
                                "(fewer captures to write, for applications with many kernels)")
    subparser.add_argument("--tolerance", type=float, default=None,
                           help="relative tolerance for floating-point results when replaying these captures")
    subparser.add_argument("--target", choices=["native", "as-built"], default="native",
                           help="native (default): compile kernels for this machine, as Spack does and as the "
                                "replay baseline does; as-built: keep the build's own target flags")
    subparser.add_argument("--timeout", type=float, default=None, help="seconds the run may take")
    subparser.add_argument("--json", action="store_true", help="print the result as JSON")


def record(args):
    ws = Workspace(args.workspace)
    progress = None if args.json else (lambda msg: say("==> " + msg))
    result = record_tree(ws, args.source, args.run, build=args.build, kernels=args.kernel,
                         instances=args.instances, tolerance=args.tolerance, timeout=args.timeout,
                         target=args.target, top=args.top,
                         output=None if args.json else (lambda line: say("  | " + line)),
                         progress=progress)
    if args.json:
        print(json.dumps({"run_dir": result.run_dir, "app_s": result.app_s, "kernels": result.hotness,
                          "captures": [c.id for c in result.captures]}, indent=1))
        return 0
    rows = [[cxxnames.display(h["kernel"]), h["source"], h["calls"], seconds(h["total_s"]), seconds(h["self_s"]),
             percent(h["share"]), h["capture"] or "-"] for h in result.hotness]
    print("application time %s, %d capture(s) in %s" % (seconds(result.app_s), len(result.captures), ws.root))
    print(table(["kernel", "source", "calls", "total", "self", "share", "capture"], rows))
    for h in result.hotness:
        if h.get("not_captured"):
            print("%s: not captured, replay would refuse it: %s" % (cxxnames.display(h["kernel"]), h["not_captured"]))
    return 0

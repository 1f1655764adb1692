"""Build with record probes, run, and capture the hot kernels: a Spack spec (built
through Spack in the workspace's sandbox) or a source tree (--source, built with make
or --build)."""

import json

from .. import cxxnames
from ..errors import R3Error
from ..record.session import AUTO_MOST_CALLS
from ..record.session import record as record_tree
from ..report import percent, say, seconds, table
from ..userpaths import check_output_dir
from ..workspace import Workspace
from .common import (
    MOST_CALLS,
    add_instances,
    add_json,
    add_kernels,
    add_spack_arguments,
    add_timeout,
    add_tolerance,
    check_instances,
    check_most,
    check_timeout,
    check_tolerance,
    record_spec_of,
)

description = "build with probes, run, capture hot kernels"


def setup_parser(subparser):
    subparser.add_argument(
        "spec",
        nargs="?",
        default=None,
        help="Spack spec to build through Spack (r3-dense, r3-heat@1.0); or give --source",
    )
    subparser.add_argument(
        "--source",
        default=None,
        help="source tree to build (never modified); with a spec: where the recipe stage "
        "generates a recipe from when Spack has none (directory, tarball or URL)",
    )
    subparser.add_argument(
        "--run",
        default=None,
        help="command that runs the application (in the build tree; for a spec, with the "
        "install's bin first on PATH; default for a spec: its stand-alone tests)",
    )
    subparser.add_argument(
        "--build",
        default=None,
        help='build command (default: make CC="r3-record <clang>"). It sees $R3_CC and $R3_CXX '
        "(launcher + compiler, for Make), $R3_LAUNCHER, $R3_CLANG and $R3_CLANGXX (for CMake: "
        "-DCMAKE_C_COMPILER=$R3_CLANG -DCMAKE_C_COMPILER_LAUNCHER=$R3_LAUNCHER "
        "-DCMAKE_C_LINKER_LAUNCHER=$R3_LAUNCHER)",
    )
    add_kernels(
        subparser,
        help="record this function (repeatable; default: every function with a loop). C++: "
        "the mangled or demangled name, or the qualified name alone (Solver::apply) "
        "when no overload shares it",
    )
    add_instances(
        subparser,
        help="capture the first N calls of each kernel (default 1); auto: as many as it "
        "takes for the pages they touch to fill half this machine's last-level cache "
        "(at most %d)" % AUTO_MOST_CALLS,
    )
    subparser.add_argument(
        "--top",
        type=int,
        default=None,
        metavar="K",
        help="run twice: first with probes only, then capture only the K hottest kernels "
        "(fewer captures to write, for applications with many kernels)",
    )
    add_tolerance(subparser, help="relative tolerance for floating-point results when replaying these captures")
    subparser.add_argument(
        "--target",
        choices=["native", "as-built"],
        default="native",
        help="native (default): compile kernels for this machine, as Spack does and as the "
        "replay baseline does; as-built: keep the build's own target flags",
    )
    add_timeout(subparser, None, help="seconds the run may take")
    add_spack_arguments(subparser)
    add_json(subparser)


def record(args):
    ws = Workspace(args.workspace)
    check_output_dir(ws.root, "--workspace")
    progress = None if args.json else (lambda msg: say("==> " + msg))
    output = None if args.json else (lambda line: say("  | " + line))
    if not args.spec and not args.source:
        raise R3Error("give a Spack spec or --source DIR")
    check_timeout(args)
    check_tolerance(args)
    check_instances(args)
    check_most(args, {"top": MOST_CALLS})
    if args.spec:
        if args.build or args.top:
            raise R3Error("--build and --top are for --source; Spack builds a spec with its recipe")
        result = record_spec_of(ws, args, progress, tolerance=args.tolerance, timeout=args.timeout, output=output)
    else:
        if not args.run:
            raise R3Error("--source needs --run CMD")
        result = record_tree(
            ws,
            args.source,
            args.run,
            build=args.build,
            kernels=args.kernel,
            instances=args.instances,
            tolerance=args.tolerance,
            timeout=args.timeout,
            target=args.target,
            top=args.top,
            output=output,
            progress=progress,
        )
    if args.json:
        print(
            json.dumps(
                {
                    "run_dir": result.run_dir,
                    "app_s": result.app_s,
                    "kernels": result.hotness,
                    "captures": [c.id for c in result.captures],
                },
                indent=1,
            )
        )
        return 0
    rows = [
        [
            cxxnames.display(h["kernel"]),
            h["source"],
            h["calls"],
            seconds(h["total_s"]),
            seconds(h["self_s"]),
            percent(h["share"]),
            h["capture"] or "-",
        ]
        for h in result.hotness
    ]
    print("application time %s, %d capture(s) in %s" % (seconds(result.app_s), len(result.captures), ws.root))
    print(table(["kernel", "source", "calls", "total", "self", "share", "capture"], rows))
    for h in result.hotness:
        if h.get("not_captured"):
            print("%s: not captured, replay would refuse it: %s" % (cxxnames.display(h["kernel"]), h["not_captured"]))
    return 0

"""Write a captured kernel as a Minimal Executable Program: a directory with the kernel's
source slice (its IR where no source slice can be made), a small driver that maps the
recorded memory, calls the kernel with the recorded arguments, checks and times it, the
data, a Makefile (make, make check, make CC=gcc) and a README. With --variant, the tuned
winner's (its source patch, its pipeline as compiler flags, its launch settings).
"""

from .. import cxxnames
from ..capture import load_capture_dir, resolve
from ..errors import R3Error
from ..mep.writer import IR, write_mep
from ..search.results import describe_variant, load_result
from ..userpaths import check_output_dir
from ..workspace import Workspace

description = "write a captured kernel as a standalone program (make check)"


def setup_parser(subparser):
    subparser.add_argument("capture", help="capture id (or unique prefix, or kernel name, or directory)")
    subparser.add_argument(
        "-o", "--output", required=True, metavar="DIR", help="the directory to write (must not exist, or be empty)"
    )
    subparser.add_argument(
        "--variant",
        action="store_true",
        help="the confirmed winner of r3 tune for this kernel (results/), not the kernel as built",
    )


def mep(args):
    check_output_dir(args.output, "-o")
    ws = Workspace(args.workspace)
    directory = resolve(ws, args.capture)
    capture = load_capture_dir(directory, verify_digests=False)
    variant, text = None, ""
    if args.variant:
        result = load_result(ws, capture.id, strict=True)
        if result is None:
            raise R3Error(
                "%s has no tuning result in %s (run r3 tune first)" % (cxxnames.display(capture.kernel), ws.root)
            )
        if not result.won:
            raise R3Error(
                "nothing beat %s as built in r3 tune: there is no winner to write" % cxxnames.display(capture.kernel)
            )
        variant = result.variant
        text = "%s, %.3fx over the kernel as built in r3 tune (confirmed, %d pairs)" % (
            describe_variant(variant),
            result.speedup,
            result.pairs,
        )
    info = write_mep(ws, directory, args.output, variant, text)
    print(
        "%s: MEP of %s in %s (%s%s)"
        % (
            capture.id,
            cxxnames.display(capture.kernel),
            args.output,
            "kernel's IR: " + info.why_ir if info.mode == IR else "source slice",
            ", variant: " + text if text else "",
        )
    )
    if info.unmapped:
        print("  pipeline settings with no compiler flag: " + "; ".join(info.unmapped))
    print("  cd %s && make check" % args.output)
    return 0

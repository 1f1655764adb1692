"""Options several subcommands share, each written once (as Spack's cmd/common/arguments.py
does for its commands): the flag, its type, its default, and the one-line check of its value.
A default the code behind a command also has comes from that code (``TuneOptions``, the
replay server), so the two cannot drift apart; a command passes its own help where the
option means something of its own there."""

import argparse

from ..errors import R3Error
from ..record.session import parse_instances


def add_spack_arguments(subparser):
    """Options of the subcommands that drive Spack."""
    subparser.add_argument(
        "--spack-config",
        action="append",
        default=[],
        metavar="DIR",
        help="extra Spack configuration scope to read (repeatable), e.g. one listing the repository of the package",
    )
    subparser.add_argument(
        "--spack-repo",
        action="append",
        default=[],
        metavar="DIR",
        help="extra Spack package repository to read (repeatable)",
    )


def add_json(subparser, help="print the result as JSON"):
    subparser.add_argument("--json", action="store_true", help=help)


def add_kernels(subparser, help):
    """--kernel NAME, repeatable: the kernels a command works on (default: the command's)."""
    subparser.add_argument("--kernel", action="append", default=[], metavar="NAME", help=help)


def instances_argument(text):
    """--instances for argparse: its own one-line error."""
    try:
        return parse_instances(text)
    except R3Error:
        raise argparse.ArgumentTypeError("want a number of calls (at least 1), 'auto' or 'cover', not %r" % text)


def add_instances(subparser, help, default=1):
    """--instances N|auto|cover: the calls of each kernel a record captures."""
    subparser.add_argument("--instances", type=instances_argument, default=default, metavar="N", help=help)


def add_tolerance(subparser, help):
    """--tolerance F: the relative error allowed in floating-point results (default: the
    captures', else exact)."""
    subparser.add_argument("--tolerance", type=float, default=None, help=help)


def add_timeout(subparser, default, help):
    subparser.add_argument("--timeout", type=float, default=default, help=help)


def check_tolerance(args):
    if args.tolerance is not None and not args.tolerance >= 0:
        raise R3Error("--tolerance must be at least 0 (a relative error; 0: exact)")


def check_timeout(args):
    if args.timeout is not None and not args.timeout > 0:
        raise R3Error("--timeout must be above 0 seconds")


def record_spec_of(ws, args, progress, **more):
    """Record ``args.spec`` through Spack as r3 record and r3 tune both do: the run, kernels,
    calls, Spack scopes and source come from their shared options; ``more`` passes what
    only one of them has (its timeout, tolerance, output). A RecordResult."""
    from ..roundtrip.record import record_spec

    return record_spec(
        ws,
        args.spec,
        run=args.run,
        kernels=args.kernel,
        instances=args.instances,
        user_scopes=args.spack_config,
        extra_repos=args.spack_repo,
        progress=progress,
        source=args.source,
        **more,
    )

"""Options several subcommands share, each written once (as Spack's cmd/common/arguments.py
does for its commands): the flag, its type, its default, and the one-line check of its value.
A default the code behind a command also has comes from that code (``TuneOptions``, the
replay server), so the two cannot drift apart; a command passes its own help where the
option means something of its own there."""

import argparse
import os

from ..errors import R3Error
from ..record.session import parse_instances

# The most a count option takes. A larger one is a typo or a unit mistaken (--threads
# 100000000 ran and reported a timing), refused in one line before any work, as a
# negative one is (docs/workspace.md).
MOST_THREADS_PER_CPU = 64  # OpenMP threads of a run, per CPU of this machine
MOST_RUNS = 100000  # timed runs of one replay (--repeat)
MOST_PAIRS = 10000  # paired runs of one measurement (--pairs, --confirm-pairs, --check-pairs)
MOST_EVALUATIONS = 100000  # evaluations of one kernel (--budget, --child-budget, --stall-patience)
MOST_ROUNDS = 100  # confirmation rounds, repairs of a rewrite, attempts of a recipe, examples
MOST_CALLS = 100000  # calls of a kernel captured (--instances N), kernels kept (--top)
MOST_KERNELS_AT_ONCE = 1024  # kernels searched side by side
MOST_TEAMS = (1 << 31) - 1  # an OpenMP target region's teams (a C int)


def most_threads():
    """The most OpenMP threads a run may ask for on this machine."""
    return MOST_THREADS_PER_CPU * (os.cpu_count() or 1)


def check_most(args, bounds):
    """R3Error naming the first option of ``bounds`` ({dest: most, or (most, why)}) whose
    value (when given) is above its most."""
    for name, most in bounds.items():
        most, why = most if isinstance(most, tuple) else (most, "")
        value = getattr(args, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > most:
            raise R3Error("--%s %d is too many: at most %d%s" % (name.replace("_", "-"), value, most, why))


def thread_bound():
    """(most OpenMP threads of a run, why) for ``check_most``."""
    cpus = os.cpu_count() or 1
    return most_threads(), " (%d per CPU of this machine's %d)" % (MOST_THREADS_PER_CPU, cpus)


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


def check_instances(args):
    """--instances N: at most MOST_CALLS calls."""
    if isinstance(args.instances, int) and args.instances > MOST_CALLS:
        raise R3Error("--instances %d is too many calls to capture: at most %d" % (args.instances, MOST_CALLS))


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

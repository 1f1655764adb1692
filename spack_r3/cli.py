"""The ``r3`` command line, shared by the standalone ``r3`` script and ``spack r3``.

Each subcommand is a module in ``spack_r3.commands`` written the way Spack writes
commands: a docstring, ``description``, ``setup_parser(subparser)`` and a function
named after the command that takes ``args`` and returns an exit code.
"""

import argparse
import importlib
import sys

from . import __doc__ as package_doc
from . import __version__
from .errors import R3Error
from .report import stdout_to_devnull

# Order is the order of the pipeline.
COMMANDS = ["recipe", "record", "kernels", "replay", "tune", "emit", "status"]


def _command_module(name):
    return importlib.import_module("spack_r3.commands." + name.replace("-", "_"))


WORKSPACE_HELP = "workspace directory (default: $R3_WORKSPACE or ~/.spack-r3)"


def setup_parser(parser):
    parser.add_argument("--workspace", default=None, help=WORKSPACE_HELP)
    sub = parser.add_subparsers(dest="r3_command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = _command_module(name)
        p = sub.add_parser(name, help=module.description, description=module.__doc__)
        # Also after the command (r3 record ... --workspace W). SUPPRESS: when it is not
        # given there, the subcommand leaves the value given before it alone.
        p.add_argument("--workspace", default=argparse.SUPPRESS, help=WORKSPACE_HELP)
        module.setup_parser(p)
    return parser


def dispatch(args):
    """Run the chosen subcommand; turns R3Error into one line on stderr."""
    module = _command_module(args.r3_command)
    try:
        return getattr(module, args.r3_command.replace("-", "_"))(args) or 0
    except R3Error as err:
        print("r3 %s: error: %s" % (args.r3_command, err), file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("r3 %s: interrupted; finished work is kept" % args.r3_command, file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head and the like: stop quietly, as on SIGPIPE
        stdout_to_devnull()
        return 141


def main(argv=None):
    parser = argparse.ArgumentParser(prog="r3", description=package_doc.splitlines()[0])
    parser.add_argument("--version", action="version", version="spack-r3 " + __version__)
    setup_parser(parser)
    args = parser.parse_args(argv)
    return dispatch(args)


if __name__ == "__main__":
    sys.exit(main())

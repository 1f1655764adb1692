"""The ``r3`` command line, shared by the standalone ``r3`` script and ``spack r3``.

Each subcommand is a module in ``spack_r3.commands`` written the way Spack writes
commands: a docstring, ``description``, ``setup_parser(subparser)`` and a function
named after the command that takes ``args`` and returns an exit code.
"""

import argparse
import errno
import importlib
import os
import signal
import sys
import threading
import time
import traceback

from . import __doc__ as package_doc
from . import __version__
from .errors import R3Error
from .report import stdout_to_devnull
from .userpaths import refusal as user_path_refusal
from .workspace import Workspace

# Order is the order of the pipeline.
COMMANDS = ["recipe", "record", "kernels", "replay", "mep", "tune", "emit", "retarget", "publish", "status"]


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


# What the machine can refuse a run (a full disk, a read-only or foreign workspace): the
# user's to fix, told in one line like any bad input.
MACHINE_ERRNOS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.EMFILE,
    errno.ENFILE,
    errno.ENOMEM,
    errno.EFBIG,
}
INTERNAL_ERROR = 3


def dispatch(args):
    """Run the chosen subcommand. A user-facing failure (R3Error, a path the user gave that
    the machine refuses, or the machine refusing: a full disk, a read-only workspace) is one
    line on stderr; any other exception is a bug of ours, and still one line, naming the log
    file that holds its traceback."""
    try:
        module = _command_module(args.r3_command)
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
    except Exception as err:
        line = user_path_refusal(args, err)  # (/proc/x, a file where a directory goes: userpaths)
        if line:
            print("r3 %s: error: %s" % (args.r3_command, line), file=sys.stderr)
            return 2
        refused = _machine_refusal(err)
        if refused is None:
            return _internal_error(args, err)
        where = " (%s)" % refused.filename if refused.filename else ""
        print(
            "r3 %s: error: %s%s; finished work is kept%s"
            % (args.r3_command, refused.strerror, where, _traceback_note(args)),
            file=sys.stderr,
        )
        return 2


def _machine_refusal(err):
    """The OSError of MACHINE_ERRNOS that ``err`` is or was raised from (a database driver
    wraps the disk's refusal in its own error), or None."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in MACHINE_ERRNOS:
            return err
        err = err.__cause__ or err.__context__
    return None


def _internal_error(args, err):
    first = (str(err).strip().splitlines() or [""])[0][:300]
    print(
        "r3 %s: internal error: %s%s%s; please report it"
        % (args.r3_command, type(err).__name__, ": " + first if first else "", _traceback_note(args)),
        file=sys.stderr,
    )
    return INTERNAL_ERROR


def _traceback_note(args):
    """Writes the exception being handled to a log file: the workspace's logs/, else the
    temporary directory (a full disk or a read-only workspace may refuse one or both)."""
    text = traceback.format_exc()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = "r3-%s-%s-%d.log" % (args.r3_command, stamp, os.getpid())
    try:
        logs = Workspace(getattr(args, "workspace", None)).logs_dir
    except R3Error:
        logs = None
    # (not tempfile.gettempdir(): it fails where no file can be written, as on a full disk)
    for directory in ([logs] if logs else []) + [os.environ.get("TMPDIR") or "/tmp"]:
        path = os.path.join(directory, name)
        try:
            os.makedirs(directory, exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            return " (traceback in %s)" % path
        except OSError:
            continue
    return " (no log could be written)"


def main(argv=None):
    try:  # (importing the commands takes a second: an interrupt there is one line too)
        parser = argparse.ArgumentParser(prog="r3", description=package_doc.splitlines()[0])
        parser.add_argument("--version", action="version", version="spack-r3 " + __version__)
        setup_parser(parser)
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        print("r3: interrupted before it began; nothing was done", file=sys.stderr)
        return 130
    try:
        return dispatch(args)
    finally:
        # Done: an interrupt while the interpreter shuts down changes nothing (it would
        # end the process by the signal, no line said). Only for the command line's own
        # process: a caller's (tests, ``spack r3``) keeps its handler.
        if argv is None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())

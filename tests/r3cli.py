"""The r3 command as the tests run it.

    r3(*argv)              in this process; its exit code
    r3_output(*argv)       in this process; (exit code, stdout, stderr)
    r3_subprocess(*argv)   as a user runs it, a separate process (exit code, stderr, no
                           state shared with the test)
    flags(**options)       options spelled as the command line spells them:
                           flags(budget=8, confirm_pairs=3, json=True)
                           == ["--budget", "8", "--confirm-pairs", "3", "--json"]

so a test reads as the command it runs:

    r3("--workspace", ws, "tune", *flags(kernel="matmul", budget=8, mutator="none"))
"""

import contextlib
import io
import subprocess
import sys

from spack_r3 import cli

R3 = [sys.executable, "-m", "spack_r3.cli"]


def flags(**options):
    """``--name value`` per keyword (underscores become dashes); True: the bare flag; False
    or None: left out; a list or tuple: the option once per item (``--kernel a --kernel b``)."""
    argv = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, str(value)]
    return argv


def r3(*argv):
    return cli.main([str(a) for a in argv])


def r3_output(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def r3_subprocess(*argv, **run):
    """``run``: subprocess.run's own keywords (timeout, env, cwd, input)."""
    return subprocess.run(R3 + [str(a) for a in argv], capture_output=True, text=True, **run)

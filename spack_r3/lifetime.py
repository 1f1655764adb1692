"""How r3's processes end together: a child that dies with the process that started it,
and whether a process still lives.

A tool stage (opt, llc) or a candidate is killed with its parent (``die_with_parent``,
Linux's parent-death signal), so a replay worker killed at a deadline leaves nothing
running; the records of runs (a recipe's pending trial) ask ``alive`` whether the run
that wrote them is still going.
"""

import ctypes
import ctypes.util
import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent():
    """In a child, before it runs anything: SIGKILL when its parent thread's process dies."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def alive(pid):
    """Whether process ``pid`` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

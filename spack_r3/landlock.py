"""Landlock: a process (and all it starts) that may write only beneath given directories.

One owner of the kernel interface for both of r3's confinements: a replay candidate may
write nowhere (``replay.confine``), a trial build of a tree nobody reviewed only to its
stage, prefix and temporary directory (``spack.runner``). Reading stays open: a build reads
compilers, headers and Spack itself. Where the kernel has no Landlock the caller is told
why, in words, and decides.
"""

import ctypes
import os
import struct

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
# LANDLOCK_ACCESS_FS_*: every write (WRITE_FILE, REMOVE_*, MAKE_*), REFER from ABI 2,
# TRUNCATE from ABI 3; EXECUTE, READ_FILE, READ_DIR stay allowed everywhere
WRITES = {1: 0x1FF2, 2: 0x3FF2, 3: 0x7FF2}
# what may be done to a file beneath an allowed directory that is no directory itself
_FILE_ACCESS = 0x0002 | 0x4000  # WRITE_FILE, TRUNCATE
# Devices every build writes to: the terminal, /dev/null, POSIX semaphores and shared memory.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/pts", "/dev/shm")


def abi():
    """Landlock's ABI version here, or 0 where the kernel has none."""
    version = _libc.syscall(ctypes.c_long(_CREATE_RULESET), None, ctypes.c_long(0), ctypes.c_long(1))
    return max(0, version)


def restrict_writes(allowed=()):
    """From now on this process, and what it starts, writes only beneath ``allowed``
    (paths; those that do not exist are skipped). None, or why not (words)."""
    version = abi()
    if version < 1:
        return "no Landlock (%s)" % os.strerror(ctypes.get_errno())
    handled = WRITES[min(version, 3)]
    attr = ctypes.c_uint64(handled)
    fd = _libc.syscall(ctypes.c_long(_CREATE_RULESET), ctypes.byref(attr), ctypes.c_long(8), ctypes.c_long(0))
    if fd < 0:
        return "Landlock ruleset: %s" % os.strerror(ctypes.get_errno())
    try:
        for path in allowed:
            try:
                target = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                access = handled if os.path.isdir(path) else (_FILE_ACCESS & handled)
                rule = ctypes.create_string_buffer(struct.pack("=Qi", access, target))
                if (
                    _libc.syscall(
                        ctypes.c_long(_ADD_RULE),
                        ctypes.c_long(fd),
                        ctypes.c_long(_RULE_PATH_BENEATH),
                        rule,
                        ctypes.c_long(0),
                    )
                    != 0
                ):
                    return "Landlock rule for %s: %s" % (path, os.strerror(ctypes.get_errno()))
            finally:
                os.close(target)
        if (
            _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            or _libc.syscall(ctypes.c_long(_RESTRICT_SELF), ctypes.c_long(fd), ctypes.c_long(0)) != 0
        ):
            return "Landlock: %s" % os.strerror(ctypes.get_errno())
    finally:
        os.close(fd)
    return None

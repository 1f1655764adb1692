"""What a candidate's process may not do, set by the kernel itself.

The replay worker forks one process per candidate and calls ``apply`` there after
everything trusted is done (compiling, loading and starting libomp, allocating the
timing buffers) and right before the candidate's code first runs:

- ``RLIMIT_AS`` at ``memory_bound``: an allocation past it fails (malloc returns NULL,
  an unchecked one crashes) instead of filling the machine's memory; no core files;
  what the candidate prints is bounded (``RLIMIT_FSIZE``).
- a seccomp filter (x86-64 and aarch64): no new process (fork, vfork, execve, clone
  without CLONE_THREAD), no file opened for writing, created, truncated, removed or
  renamed, no io_uring (it opens files past the filter), no signal to another process,
  no leaving its process group, no socket. The kernel skips such a call (it returns
  its own number, as seccomp's SIGSYS does) and ``Denied`` is raised in the candidate's
  process once its code returns: the candidate fails. clone3 fails with ENOSYS
  so that glibc makes threads (OpenMP's) with clone, which is allowed for threads.
- Landlock where the kernel has it: no file system write of any kind, whatever the call.

Where the kernel refuses a filter (a container that forbids seccomp), ``apply`` goes
on without it; ``probe`` says once what this kernel allows. The worker also kills each
candidate's process group when the candidate ends, with or without a filter.
"""

import ctypes
import errno
import os
import platform
import resource
import signal
import struct
import sys

from .. import landlock

MIB = 1 << 20
# Address space a candidate may add to what it holds when confined (the worker's own,
# about 0.3 GiB, the mapped capture, the compiled code): its memory image twice over (a
# kernel may keep a copy of its data; a sequence's calls keep theirs), at least 512 MiB,
# and for each OpenMP thread a stack (4-8 MiB) and a glibc malloc arena (64 MiB reserved).
# Not more: an allocation loop touches all of it before it fails, which takes seconds.
FLOOR = 512 * MIB
PER_THREAD = 96 * MIB
PRINTED = 64 * MIB  # the most a candidate may write to its log (stdout and stderr)


class Denied(Exception):
    """The candidate made a system call that candidates may not make."""


def memory_bound(image_bytes, threads=1):
    """RLIMIT_AS for a candidate whose capture maps ``image_bytes``: the address space
    this process holds now (the worker's own, the mapped capture, the compiled code)
    plus twice the image (at least ``FLOOR``) and room for each thread."""
    with open("/proc/self/statm") as f:
        in_use = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    return in_use + max(FLOOR, 2 * image_bytes) + max(1, threads or 1) * PER_THREAD


# --- seccomp-bpf ---------------------------------------------------------------------

_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _TRAP, _ERRNO = 0x7FFF0000, 0x00030000, 0x00050000
_NR, _ARCH = 0, 4


def _arg(i):  # the low 32 bits of argument i in struct seccomp_data (little-endian)
    return 16 + 8 * i


O_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC
CLONE_THREAD = 0x00010000

# name -> number, per architecture (AUDIT_ARCH_*). aarch64 has no fork, open, creat...:
# glibc makes them of clone and openat, which the filter checks.
_ARCHES = {
    "x86_64": (
        0xC000003E,
        dict(
            fork=57,
            vfork=58,
            execve=59,
            execveat=322,
            clone=56,
            clone3=435,
            open=2,
            openat=257,
            creat=85,
            openat2=437,
            truncate=76,
            unlink=87,
            unlinkat=263,
            rename=82,
            renameat=264,
            renameat2=316,
            mkdir=83,
            mkdirat=258,
            rmdir=84,
            link=86,
            linkat=265,
            symlink=88,
            symlinkat=266,
            mknod=133,
            mknodat=259,
            chmod=90,
            fchmodat=268,
            open_by_handle_at=304,
            io_uring_setup=425,
            io_uring_enter=426,
            io_uring_register=427,
            ptrace=101,
            process_vm_writev=311,
            kill=62,
            tkill=200,
            tgkill=234,
            rt_sigaction=13,
            setsid=112,
            setpgid=109,
            socket=41,
            seccomp=317,
        ),
    ),
    "aarch64": (
        0xC00000B7,
        dict(
            execve=221,
            execveat=281,
            clone=220,
            clone3=435,
            openat=56,
            openat2=437,
            truncate=45,
            unlinkat=35,
            renameat=38,
            renameat2=276,
            mkdirat=34,
            linkat=37,
            symlinkat=36,
            mknodat=33,
            fchmodat=53,
            open_by_handle_at=265,
            io_uring_setup=425,
            io_uring_enter=426,
            io_uring_register=427,
            ptrace=117,
            process_vm_writev=271,
            kill=129,
            tkill=130,
            tgkill=131,
            rt_sigaction=134,
            setsid=157,
            setpgid=154,
            socket=198,
            seccomp=277,
        ),
    ),
}
_DENIED = (
    "fork",
    "vfork",
    "execve",
    "execveat",
    "creat",
    "openat2",
    "truncate",
    "unlink",
    "unlinkat",
    "rename",
    "renameat",
    "renameat2",
    "mkdir",
    "mkdirat",
    "rmdir",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "mknod",
    "mknodat",
    "chmod",
    "fchmodat",
    "open_by_handle_at",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "ptrace",
    "process_vm_writev",
    "tkill",
    "setsid",
    "setpgid",
    "socket",
)


def _program(arch, nrs, pid):
    """The filter as (code, jt, jf, k) rows. Each rule is a test of the call's number
    followed by a block that returns on every path, so a call that is not the rule's
    jumps over the block with its number still loaded."""
    prog = [(_LD_ABS, 0, 0, _ARCH), (_JEQ, 1, 0, arch), (_RET, 0, 0, _TRAP), (_LD_ABS, 0, 0, _NR)]
    if arch == _ARCHES["x86_64"][0]:  # x32 calls (their numbers have bit 30 set): none
        prog += [(_JGE, 0, 1, 0x40000000), (_RET, 0, 0, _TRAP)]

    def rule(name, block):
        if name in nrs:
            prog.extend([(_JEQ, 0, len(block), nrs[name])] + block)

    def when_set(i, mask, if_set, if_clear):
        return [(_LD_ABS, 0, 0, _arg(i)), (_JSET, 0, 1, mask), (_RET, 0, 0, if_set), (_RET, 0, 0, if_clear)]

    def one_of(i, values):  # allowed when argument i is one of ``values``
        n = len(values)
        return (
            [(_LD_ABS, 0, 0, _arg(i))]
            + [(_JEQ, n - j, 0, v & 0xFFFFFFFF) for j, v in enumerate(values)]
            + [(_RET, 0, 0, _TRAP), (_RET, 0, 0, _ALLOW)]
        )

    for name in _DENIED:
        rule(name, [(_RET, 0, 0, _TRAP)])
    rule("clone3", [(_RET, 0, 0, _ERRNO | errno.ENOSYS)])  # glibc then uses clone
    rule("clone", when_set(0, CLONE_THREAD, _ALLOW, _TRAP))
    rule("open", when_set(1, O_WRITE, _TRAP, _ALLOW))
    rule("openat", when_set(2, O_WRITE, _TRAP, _ALLOW))
    rule("kill", one_of(0, [pid, 0, -pid]))  # itself or its own group (abort, raise)
    rule("tgkill", one_of(0, [pid]))
    rule(
        "rt_sigaction",
        [
            (_LD_ABS, 0, 0, _arg(0)),
            (_JEQ, 0, 1, signal.SIGSYS),  # SIGSYS stays ours
            (_RET, 0, 0, _TRAP),
            (_RET, 0, 0, _ALLOW),
        ],
    )
    prog.append((_RET, 0, 0, _ALLOW))
    assert all(jt < 256 and jf < 256 for _, jt, jf, _ in prog)
    return prog


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
PR_SET_NO_NEW_PRIVS, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 38, 1, 1


def _seccomp():
    """Install the filter on this process (every thread). None, or why not."""
    machine = platform.machine()
    if machine not in _ARCHES:
        return "no seccomp filter for %s" % machine
    arch, nrs = _ARCHES[machine]
    rows = _program(arch, nrs, os.getpid())
    raw = b"".join(struct.pack("=HBBI", *row) for row in rows)
    buf = ctypes.create_string_buffer(raw, len(raw))
    prog = _SockFprog(len(rows), ctypes.addressof(buf))
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return "prctl(PR_SET_NO_NEW_PRIVS): %s" % os.strerror(ctypes.get_errno())
    if (
        _libc.syscall(
            ctypes.c_long(nrs["seccomp"]),
            ctypes.c_long(SECCOMP_SET_MODE_FILTER),
            ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC),
            ctypes.byref(prog),
        )
        != 0
    ):
        return "seccomp: %s" % os.strerror(ctypes.get_errno())
    return None


# --- Landlock ------------------------------------------------------------------------


def _landlock():
    """No file system writes from this thread on (Landlock). None, or why not."""
    return landlock.restrict_writes(())


# --- the interface -------------------------------------------------------------------

_denied = []


def _on_sigsys(signum, frame):
    # Runs in the main thread once the call that was denied (in any thread) is back in
    # Python; only the first raises, so that the candidate's failure can be reported.
    _denied.append(signum)
    if len(_denied) == 1:
        raise Denied(
            "a denied system call: candidates may not start processes, write files, signal other "
            "processes or open sockets"
        )


def apply(memory_limit):
    """Confine this process for good (see the module's docstring). Returns what could
    not be set ([] where everything was); never raises for a kernel that refuses."""
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    limit = memory_limit if hard == resource.RLIM_INFINITY else min(memory_limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # the hard limit too: no raising it back
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (PRINTED, PRINTED))
    sys.dont_write_bytecode = True  # a late import must not try to write a .pyc
    signal.signal(signal.SIGSYS, _on_sigsys)
    missing = [m for m in (_landlock(), _seccomp()) if m]
    return missing


def probe():
    """What ``apply`` sets on this kernel, tried in a throwaway child: [] where
    everything, else what it could not set."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(rfd)
            os.write(wfd, "\n".join(apply(memory_bound(0))).encode())
        finally:
            os._exit(0)
    os.close(wfd)
    data = b""
    while True:
        chunk = os.read(rfd, 4096)
        if not chunk:
            break
        data += chunk
    os.close(rfd)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        return ["the probe of seccomp and Landlock failed (status %d)" % status]
    return [line for line in data.decode().splitlines() if line]


def seccomp_missing(missing):
    """Whether ``missing`` (from ``apply`` or ``probe``) leaves a candidate unfiltered."""
    return any(not m.startswith(("no Landlock", "Landlock")) for m in missing)

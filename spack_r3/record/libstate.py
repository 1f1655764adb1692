"""Library functions whose results depend on state that a recording does not keep.

A capture holds the kernel's memory: the heap, the globals it reaches, the stack
its arguments point into. Some library calls read state outside of that: libc's
random-number generator (``rand``'s seed lives inside libc), the clock, the
process's identity and environment, and input (files, stdin). A kernel that
reaches one of them computes something else when replayed, so record marks it
unreplayable with a reason, and replay refuses it with that reason instead of
reporting a wrong answer.

Functions that keep their state in the caller's memory replay like any other
code and are not listed: ``rand_r``, ``random_r``, ``erand48``/``nrand48``/
``jrand48`` (state in an argument), C++ ``<random>`` engines (state in the
object). Output (``printf``, ``fwrite``) changes nothing the kernel computes.
"""

from .. import fortran

# What kind of state -> the functions that read it (C names, glibc's aliases of them,
# and the mangled names of libstdc++'s entry points).
STATEFUL = {
    "the random-number generator": (
        "rand",
        "random",
        "srand",
        "srandom",
        "initstate",
        "setstate",
        "drand48",
        "lrand48",
        "mrand48",
        "srand48",
        "seed48",
        "lcong48",
        "arc4random",
        "arc4random_uniform",
        "arc4random_buf",
        "getrandom",
        "getentropy",
        "_ZNSt13random_device9_M_getvalEv",  # std::random_device::operator()
    ),
    "the clock": (
        "time",
        "clock",
        "gettimeofday",
        "clock_gettime",
        "timespec_get",
        "ftime",
        "times",
        "getrusage",
        "omp_get_wtime",
        "_ZNSt6chrono3_V212system_clock3nowEv",
        "_ZNSt6chrono3_V212steady_clock3nowEv",
    ),
    "the process's identity and environment": ("getpid", "getppid", "gettid", "getenv", "secure_getenv"),
    "the input it reads": (
        "fopen",
        "fopen64",
        "freopen",
        "fdopen",
        "open",
        "open64",
        "openat",
        "read",
        "pread",
        "pread64",
        "readv",
        "fread",
        "fread_unlocked",
        "fgets",
        "fgets_unlocked",
        "fgetc",
        "fgetc_unlocked",
        "getc",
        "getc_unlocked",
        "_IO_getc",
        "getchar",
        "getchar_unlocked",
        "ungetc",
        # what -D_FORTIFY_SOURCE turns them into
        "__open_2",
        "__open64_2",
        "__read_chk",
        "__pread_chk",
        "__pread64_chk",
        "__fread_chk",
        "__fread_unlocked_chk",
        "__fgets_chk",
        "__fgets_unlocked_chk",
        "getline",
        "getdelim",
        "scanf",
        "fscanf",
        "vscanf",
        "vfscanf",
        "__isoc99_scanf",
        "__isoc99_fscanf",
        "__isoc99_vscanf",
        "__isoc99_vfscanf",
        "__isoc23_scanf",
        "__isoc23_fscanf",
        "__isoc23_vscanf",
        "__isoc23_vfscanf",
    ),
}
_STATE_OF = {fn: state for state, fns in STATEFUL.items() for fn in fns}

# Functions through which the system itself reads or writes the memory they are given:
# input, output that bypasses stdio's buffer, communication. A system call meeting a
# protected page answers EFAULT instead of faulting, so record never page-tracks a kernel
# that calls one (see ``instrument.kernel_flags``).
SYSTEM_MEMORY_CALLS = (
    frozenset(STATEFUL["the input it reads"])
    | {
        "write",
        "pwrite",
        "writev",
        "send",
        "sendto",
        "sendmsg",
        "recv",
        "recvfrom",
        "recvmsg",
        "fwrite",
        "sscanf",
        "mmap",
        "mmap64",
        "ioctl",
        "poll",
        "select",
        "epoll_wait",
    }
    | {
        "MPI_" + op
        for op in (
            "Send",
            "Recv",
            "Isend",
            "Irecv",
            "Sendrecv",
            "Allreduce",
            "Reduce",
            "Bcast",
            "Alltoall",
            "Allgather",
            "Gather",
            "Scatter",
            "Wait",
            "Waitall",
            "File_read",
            "File_write",
            "Put",
            "Get",
        )
    }
)


def unreplayable_reason(calls):
    """Why a kernel that reaches the library functions ``calls`` cannot replay, or None.

    >>> unreplayable_reason(["sqrt", "rand"])
    'it calls rand, whose library state (the random-number generator) the recording does not keep'
    """
    found = sorted(fn for fn in set(calls) if fn in _STATE_OF)
    if not found:
        fortran_calls = sorted(fn for fn in set(calls) if fortran.unreplayable_call(fn))
        if fortran_calls:  # the Fortran runtime's units and the process's end
            return "%s (%s)" % (fortran.unreplayable_call(fortran_calls[0]), ", ".join(fortran_calls))
        return None
    states = sorted({_STATE_OF[fn] for fn in found}, key=list(STATEFUL).index)
    return "it calls %s, whose library state (%s) the recording does not keep" % (", ".join(found), ", ".join(states))

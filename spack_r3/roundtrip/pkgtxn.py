"""A tuned package's directory written as one transaction: after a kill at any point the
repository holds the old package or the new one, never a plan of one and a package.py of
the other (whose digest would let Spack reuse a ``+r3`` install of the old plan).

    with rewrite(directory) as stage:     # a copy of the package's files, beside it
        ...write, edit, remove files in stage...
    # the stage replaces the directory at once (an empty stage: the package goes)

    files = snapshot(directory)           # {name: bytes}: one version of it, for a reader

Each rewrite takes the repository's ``packages`` directory's lock (emits of one repository
take turns), first cleans what a killed rewrite left beside it, then:

1. copies the package directory to ``packages/.r3-emit-<dir>.tmp`` (Spack skips names
   starting with a dot), the caller edits the copy, every file and the copy are fsynced;
2. renames it ``.r3-emit-<dir>.new``: the commit point (a complete stage);
3. swaps it with the package directory in one ``renameat2(RENAME_EXCHANGE)`` (Linux;
   a new package: one rename), after which ``.new`` holds the old package;
4. fsyncs ``packages`` and removes ``.new``.

Where the file system cannot exchange two directories, step 3 is two renames (the package
to ``.r3-emit-<dir>.old``, ``.new`` to the package): a kill between them leaves no package
directory, the old one as ``.old`` and a complete ``.new``, which the next rewrite renames
into place first (status reports it meanwhile). Anything else a killed rewrite left is
garbage, removed: a ``.tmp`` (an unfinished stage), a ``.new`` beside the package (a stage
not swapped in, or the old package swapped out), an ``.old``.

``R3_EMIT_PAUSE_AT=<point>`` (tests only) stops the process (SIGSTOP) at that point, so a
test can kill it there: ``copied`` (the stage holds the old files), ``writing`` (the caller's
edits half done: ``pause("writing")``), ``staged`` (fsynced, not committed), ``committed``,
``swapped`` (the new package in place, the old one not yet removed); where directories
cannot be exchanged, ``moved-aside`` (between the two renames).
"""

import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import stat
import time

PREFIX = ".r3-emit-"
PAUSE_ENV = "R3_EMIT_PAUSE_AT"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def pause(point):
    """Stop here when ``R3_EMIT_PAUSE_AT`` names ``point`` (a test then kills the process)."""
    if os.environ.get(PAUSE_ENV) == point:
        os.kill(os.getpid(), signal.SIGSTOP)


def _paths(directory):
    parent, name = os.path.split(os.path.abspath(directory))
    base = os.path.join(parent, PREFIX + name)
    return parent, base + ".tmp", base + ".new", base + ".old"


def _fsync(path, directory=False):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root):
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if not os.path.islink(os.path.join(folder, name)):
                _fsync(os.path.join(folder, name))
        _fsync(folder, directory=True)


def _exchange(a, b):
    """Swap directories ``a`` and ``b`` atomically; False where this system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: not here (an old kernel, NFS, ...)
        return False
    raise OSError(err, os.strerror(err), a)


@contextlib.contextmanager
def _locked(parent):
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (releases the lock)


def recover(directory):
    """Finish or discard what a killed rewrite of ``directory`` left beside it (the caller
    holds the lock): a committed stage whose swap was cut in half goes into place; any
    other stage, and an old package, go."""
    parent, tmp, new, old = _paths(directory)
    if interrupted(directory):
        os.rename(new, directory)  # committed, and the package had been moved aside: the new one
        _fsync(parent, directory=True)
    for leftover in (tmp, new, old):
        if os.path.lexists(leftover):
            shutil.rmtree(leftover)


def interrupted(directory):
    """True when a rewrite of ``directory`` was killed between the two renames of a swap
    (no package, a committed stage beside it): the next rewrite puts the new one in place."""
    _, _, new, old = _paths(directory)
    return os.path.isdir(new) and os.path.isdir(old) and not os.path.lexists(directory)


class _Refused(Exception):
    """An OSError out of copytree's copy, which would gather it, as text, with the rest."""


def _copy(src, dst):
    try:
        return shutil.copy2(src, dst)
    except OSError as err:
        raise _Refused(err)


def _copy_tree(directory, tmp):
    """``directory`` copied to ``tmp``; the first file the machine refuses (a full disk)
    raised as its own OSError, with nothing left of the copy."""
    try:
        shutil.copytree(directory, tmp, symlinks=True, copy_function=_copy)
    except _Refused as refused:
        shutil.rmtree(tmp, ignore_errors=True)
        raise refused.args[0] from None
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def rewrite(directory):
    """Rewrite the package directory as one transaction (see the module's text): yields
    the stage, a copy of the directory's files (empty for a new package); when the block
    ends, what the stage holds replaces the directory (an empty stage removes it). An
    exception in the block leaves the package as it was."""
    directory = os.path.abspath(directory)
    parent, tmp, new, old = _paths(directory)
    os.makedirs(parent, exist_ok=True)
    with _locked(parent):
        recover(directory)
        if os.path.isdir(directory):
            _copy_tree(directory, tmp)
        else:
            os.makedirs(tmp)
        pause("copied")
        try:
            yield tmp
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if not os.listdir(tmp):  # nothing left: the package goes, at once
            os.rmdir(tmp)
            if os.path.isdir(directory):
                os.rename(directory, old)
                _fsync(parent, directory=True)
                shutil.rmtree(old)
            return
        _fsync_tree(tmp)
        pause("staged")
        os.rename(tmp, new)
        _fsync(parent, directory=True)
        pause("committed")
        if not os.path.isdir(directory):
            os.rename(new, directory)
        elif not _exchange(new, directory):
            os.rename(directory, old)
            pause("moved-aside")
            os.rename(new, directory)
        _fsync(parent, directory=True)
        pause("swapped")
        for leftover in (new, old):
            if os.path.lexists(leftover):
                shutil.rmtree(leftover)


def snapshot(directory, tries=5, wait_s=30):
    """{name: bytes} of the regular files of ``directory``, all of one version of it, or
    None when there is none. Read without the lock, again when a rewrite swapped the
    directory meanwhile; after ``tries`` such reads, under the lock (shared; a rewrite
    holding it longer than ``wait_s``: the last read)."""
    files = None
    for _ in range(tries):
        files, same = _read(directory)
        if same:
            return files
    parent = os.path.dirname(os.path.abspath(directory))
    try:
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return files
                time.sleep(0.05)
        return _read(directory)[0]
    finally:
        os.close(fd)


def _read(directory):
    """(the files of ``directory``, whether it was the package's directory throughout)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return None, True
    files = {}
    try:
        for name in sorted(os.listdir(fd)):
            if not stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                continue  # (only files: a package's folders and links are not ours)
            with os.fdopen(os.open(name, os.O_RDONLY, dir_fd=fd), "rb") as f:
                files[name] = f.read()
        return files, os.stat(directory).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:  # the old version, moved aside and being removed
        return files, False
    finally:
        os.close(fd)

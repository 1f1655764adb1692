"""A child process's output, within bounds: whatever a build, an application run or a
``spack`` process prints (gigabytes, or one line with no newline in it), r3 holds at most a
few megabytes of it.

Output is read in chunks of at most CHUNK_BYTES, written to its log file as it comes, and
memory keeps only the first and last KEEP_BYTES of it (``Kept``): enough for a one-line
failure message, which is made from those (never by reading a whole log back). A line
shown as it comes (``echo``) is cut to LINE_BYTES. ``read_excerpt`` reads the same bounded
head and tail of a log file someone else wrote (a Spack build log).
"""

import os
import signal
import subprocess
import threading
from dataclasses import dataclass

CHUNK_BYTES = 1 << 16  # read at a time from a pipe
KEEP_BYTES = 1 << 20  # of a stream's start and of its end, kept in memory for messages
LINE_BYTES = 4096  # of one line shown as it comes
MESSAGE_CHARS = 300  # of one line put in a one-line message
JOIN_S = 10  # after the child exits, how long its output may still take to drain


class Kept:
    """The first ``head`` and last ``tail`` bytes of a stream, and how long it was."""

    def __init__(self, head=KEEP_BYTES, tail=KEEP_BYTES):
        self.head_max, self.tail_max = head, tail
        self.head, self.tail, self.total = bytearray(), bytearray(), 0

    def add(self, chunk):
        self.total += len(chunk)
        room = self.head_max - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_max:
            self.tail += chunk
            if len(self.tail) > 2 * self.tail_max:  # (trimmed now and then, not at every chunk)
                del self.tail[: len(self.tail) - self.tail_max]

    def bytes(self):
        tail = memoryview(self.tail)[-self.tail_max :] if self.tail_max else b""
        left_out = self.total - len(self.head) - len(tail)
        marker = b"\n[... %d bytes left out ...]\n" % left_out if left_out > 0 else b""
        return b"".join((self.head, marker, tail))  # (one copy)

    def text(self):
        return self.bytes().decode(errors="replace")


class Lines:
    """Hands each line of a stream to ``echo`` as text as it completes, cut to LINE_BYTES
    (the rest of a longer line is counted, not kept)."""

    def __init__(self, echo):
        self.echo = echo
        self.part, self.more = bytearray(), 0

    def add(self, chunk):
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            take = max(0, min(end - start, LINE_BYTES - len(self.part)))
            self.part += chunk[start : start + take]
            self.more += end - start - take
            if newline < 0:
                return
            self._emit()
            start = newline + 1

    def close(self):
        if self.part or self.more:
            self._emit()

    def _emit(self):
        line = self.part.decode(errors="replace").rstrip("\r")
        if self.more:
            line += " [... %d more bytes of this line: see the log]" % self.more
        self.part, self.more = bytearray(), 0
        self.echo(line)


class _Pump(threading.Thread):
    """Reads ``stream`` to its end in chunks, handing each to ``sinks``. A sink that fails
    (a log on a full disk, an echo to a closed terminal) is dropped and its error kept:
    the child's output is still drained, so the child never blocks on a full pipe."""

    def __init__(self, stream, sinks):
        super().__init__(daemon=True)
        self.stream, self.sinks, self.errors = stream, list(sinks), {}
        self.stopped = False  # set once the caller gave up waiting: nothing more is written

    def run(self):
        while True:
            try:
                chunk = self.stream.read1(CHUNK_BYTES)
            except (OSError, ValueError):
                return
            if not chunk or self.stopped:
                return
            for sink in list(self.sinks):
                try:
                    sink(chunk)
                except Exception as err:  # noqa: BLE001 (kept: the caller says what it means)
                    self.sinks.remove(sink)
                    self.errors[sink] = err

    def finish(self):
        self.join(timeout=JOIN_S)
        self.stopped = True


@dataclass
class Logged:
    """A finished command whose output went to ``log_path``: its exit code (None: it timed
    out and was killed) and the head and tail of its output."""

    returncode: object
    output: str
    log_path: str


def run_logged(cmd, log_path, cwd=None, env=None, timeout=None, echo=None):
    """Run the shell command ``cmd`` in its own process group, its output (stdout and
    stderr) streamed into ``log_path`` and, with ``echo``, each line to it as it comes. A
    timeout kills the whole group. Returns ``Logged``; an error writing the log (a full
    disk) is raised once the command is done."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            shell=True,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        watch = _watched(proc)
        kept = Kept()
        lines = Lines(echo) if echo else None
        write = log.write
        pump = _Pump(proc.stdout, [write, kept.add] + ([lines.add] if lines else []))
        pump.start()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pump.finish()
            return Logged(None, kept.text(), log_path)
        except BaseException:  # interrupted: the command goes with us
            _kill_group(proc)
            raise
        finally:
            if watch:
                watch.done()
        pump.finish()
        if lines and lines.add in pump.sinks:
            lines.close()
    refused = pump.errors.get(write)
    if isinstance(refused, OSError):  # (the log's: a full disk, a size limit)
        raise OSError(refused.errno, refused.strerror, refused.filename or log_path) from refused
    return Logged(proc.returncode, kept.text(), log_path)


class GroupWatch:
    """Kills a child's process group when r3 dies before the child ends: a ``kill -9`` of
    r3 leaves no one to kill a build's make and compilers, or an application run. A shell
    of its own session waits on a pipe only r3 holds; EOF without "done" (r3 is gone) kills
    the group."""

    def __init__(self, pgid):
        read, self._write = os.pipe()
        try:
            self.proc = subprocess.Popen(
                ["sh", "-c", 'read line; [ "$line" = done ] || kill -KILL -%d' % pgid],
                stdin=read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(read)

    def done(self):
        """The group was waited for: the watch goes, killing nothing."""
        try:
            os.write(self._write, b"done\n")
        except OSError:
            pass
        os.close(self._write)
        self.proc.wait()


def _watched(proc):
    """A GroupWatch over ``proc``'s group, or None where none can start (no sh)."""
    try:
        return GroupWatch(proc.pid)
    except OSError:
        return None


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


@dataclass
class Captured:
    """A finished process's stdout and stderr, each its head and tail (``timed_out``: it
    was killed at the timeout)."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False


def run_captured(
    argv, timeout=None, cwd=None, env=None, stdout_head=KEEP_BYTES, shell=False, merge=False, preexec=None, group=False
):
    """Run ``argv`` with its stdout and stderr kept within bounds: ``stdout_head`` bytes of
    the start of stdout (a program's JSON answer) and KEEP_BYTES of its end, KEEP_BYTES of
    each end of stderr (``merge``: stderr goes with stdout). At the timeout the process is
    killed (``Captured.timed_out``); ``preexec`` runs in the child before it starts
    (a confinement). With ``group`` or ``preexec`` the child leads a process group,
    killed with it, also when r3 dies first (``GroupWatch``)."""
    group = group or preexec is not None
    proc = subprocess.Popen(
        argv,
        shell=shell,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge else subprocess.PIPE,
        preexec_fn=preexec,
        start_new_session=group,
    )
    kill = (lambda: _kill_group(proc)) if group else (lambda: (proc.kill(), proc.wait()))
    watch = _watched(proc) if group else None
    out, err = Kept(head=stdout_head), Kept()
    pumps = [_Pump(proc.stdout, [out.add])] + ([] if merge else [_Pump(proc.stderr, [err.add])])
    for pump in pumps:
        pump.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill()
        timed_out = True
    except BaseException:
        kill()
        raise
    finally:
        if watch:
            watch.done()
    for pump in pumps:
        pump.finish()
    return Captured(proc.returncode, out.text(), err.text(), timed_out)


def read_excerpt(path, head=KEEP_BYTES, tail=KEEP_BYTES):
    """The text of the file ``path`` for a message or a diagnosis: all of it when it is
    short, else its first ``head`` and last ``tail`` bytes around a line saying how much
    was left out. Never more than that is read."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size <= head + tail:
            data = f.read(head + tail)
        else:
            data = f.read(head)
            f.seek(size - tail)
            data += b"\n[... %d bytes left out ...]\n" % (size - head - tail) + f.read(tail)
    return data.decode(errors="replace")


def short(line, most=MESSAGE_CHARS):
    """One line of output as a message shows it: a longer one keeps its two ends."""
    line = line.strip()
    if len(line) <= most:
        return line
    end = most // 3
    return "%s [...] %s" % (line[: most - end - 7], line[-end:])

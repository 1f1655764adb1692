"""Where studies are kept: Optuna storage made for several writers, and who holds a trial.

Several ``r3 tune`` may work on one workspace at once (two terminals, a batch job and a
user, later Dask workers on other nodes). SQLite is not made for that (Optuna's FAQ
advises against it for parallel writers; two runs on a fresh ``r3.db`` raced creating
its tables). So the workspace's studies live in Optuna's journal storage over one file,
``r3.journal``: every change is one line appended under a lock that works across
processes and over NFS (``JournalFileOpenLock``: a file created with O_EXCL, forced open
after 30 s unchanged, should its holder have been killed holding it).

    store = storage(workspace)                  # <workspace>/r3.journal
    store = storage(workspace, "/scratch/s.journal")   # a journal elsewhere (shared)
    store = storage(workspace, "postgresql://...")     # a database server (its driver needed)

A workspace of an older r3 (``r3.db``, SQLite) is copied into the journal once, by the
first run that finds no journal; ``r3.db`` is left as it was and not read again.

The journal keeps whole lines only. Optuna reads past a last line without its newline and
then appends its own line to it, after which no read of the journal succeeds: every study
lost to one torn line (a writer killed mid-line, a disk that filled). So under the
journal's lock a torn last line is set aside (``r3.journal.torn-<time>``, with a warning)
before anything is appended, and an append the disk refuses part way is cut back off. A
file that is no journal of r3's (``--storage`` naming some other file) is refused untouched.

A trial being evaluated is kept RUNNING with its ``owner`` (host, pid, the process's start
time) and a heartbeat (``beat``: the time, written every ``HEARTBEAT_S``); ``held`` says
whether that process still lives (on this host by its pid, on another by its beat), so
that other processes count the trial while it does and fail it (and ask its point again)
once it does not: a node of a cluster that dies costs the evaluations it held, no more.
"""

import fcntl
import hashlib
import json
import os
import socket
import sys
import threading
import time
from contextlib import contextmanager

import optuna
from optuna.storages import JournalStorage

try:
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
except ImportError:  # Optuna 3.1-3.6: the same classes under their first names
    from optuna.storages import JournalFileOpenLock, JournalFileStorage as JournalFileBackend

from ..errors import R3Error

HOST = socket.gethostname()
HEARTBEAT_S = 10.0  # how often a process writes the time into each trial it holds RUNNING
STALE_S = 120.0  # a trial held on another host whose time is older than this: its process is dead


def storage(workspace, url=None):
    """The Optuna storage of ``workspace``'s studies: ``url`` a database URL (``scheme://``)
    or a journal file's path; by default the workspace's own journal."""
    if url and "://" in url:
        return database(url)
    if url:
        path = os.path.abspath(url)
        if not os.path.isdir(os.path.dirname(path)):
            raise R3Error("--storage %s: no directory %s" % (url, os.path.dirname(path)))
        if os.path.isdir(path):
            raise R3Error(
                "--storage %s is a directory: name a journal file (e.g. %s)" % (url, os.path.join(url, "r3.journal"))
            )
        if os.path.exists(path) and not os.path.isfile(path):
            raise R3Error("--storage %s is not a regular file: name a journal file" % url)
        return journal(path, given=url)
    workspace.ensure()
    path = workspace.journal_file
    migrate(workspace.legacy_journal_file, path)
    return journal(path)


def database(url, attempts=5):
    """Optuna's storage in the database at ``url``. Two runs started at once on a fresh
    database race creating its tables (PostgreSQL: a duplicate key in pg_type): the one that
    loses asks again, and finds them made."""
    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(_driver(url))
        except (ImportError, ValueError) as err:
            raise R3Error("--storage %s: %s" % (url, err))
        except Exception as err:  # sqlalchemy's own (no server there, bad credentials, the race)
            if attempt + 1 == attempts or not _lost_race(err):
                raise R3Error("--storage %s: %s" % (url, str(err).splitlines()[0]))
            time.sleep(0.1 * (attempt + 1))  # (a pause before asking again; nothing depends on its length)


def _lost_race(err):
    """Whether ``err`` is another process's creation of the same tables or rows."""
    name = type(getattr(err, "orig", None) or err).__name__
    return (
        name in ("UniqueViolation", "DuplicateTable", "DuplicateObject", "IntegrityError")
        or "already exists" in str(err)
        or "duplicate key" in str(err)
    )


def _driver(url):
    """``url`` with the PostgreSQL driver that is installed: SQLAlchemy 2.1 takes a plain
    ``postgresql://`` for psycopg 3, and r3 installs psycopg2 (``psycopg2-binary``)."""
    if url.startswith("postgresql://"):
        try:
            import psycopg  # noqa: F401
        except ImportError:
            return "postgresql+psycopg2://" + url[len("postgresql://") :]
    return url


ENTRY = b'{"op_code"'  # how every line of an Optuna journal begins (its first key)


def journal(path, given=None):
    """The journal storage over the file ``path``. R3Error where a line of it is no journal
    entry (Optuna reads past a bad last line and fails on the next read, mid-run), the file
    left as it is; ``given``: the ``--storage`` that named it, whose first line being no
    entry says it is some other file. A torn last line is set aside (``mend``)."""
    if os.path.exists(path):
        bad, torn = _lines(path)
        if bad == 1 and given:
            raise R3Error(
                "--storage %s is not a study journal of r3 (left as it is): name a new file or a journal" % given
            )
        if bad:
            raise R3Error(
                "the study journal %s does not read at line %d: move it aside to start its "
                "studies afresh (the captures stay)" % (path, bad)
            )
        if torn:  # (or a line being appended: ``mend`` looks again under the lock)
            lock = JournalFileOpenLock(path)
            lock.acquire()
            try:
                mend(path)
            finally:
                lock.release()
    return JournalStorage(WholeLines(path))


def _lines(path):
    """(the number of the first line of ``path`` that is no journal entry, or 0; whether its
    last line lacks its newline). A last line without one is an entry being appended or a
    torn one: it need only begin as an entry does."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if not line.endswith(b"\n"):
                head = line[: len(ENTRY)]
                return (0 if ENTRY.startswith(head) else number), True
            try:
                entry = json.loads(line)
            except ValueError as err:
                entry = err
            if not isinstance(entry, dict) or "op_code" not in entry:
                return number, False
    return 0, False


class WholeLines(JournalFileBackend):
    """Optuna's journal file whose appends leave whole lines only: a torn last line found
    under the lock is set aside first (``mend``), and an append that fails part way (a full
    disk) is cut back off, so that the next run reads every finished change."""

    def __init__(self, path):
        self._held = JournalFileOpenLock(path)
        super().__init__(path, lock_obj=self._held)

    def append_logs(self, logs):
        data = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs).encode("utf-8")
        self._held.acquire()
        try:
            mend(self._file_path)
            _append(self._file_path, data)
        finally:
            self._held.release()


def _append(path, data):
    """Append ``data`` to ``path`` and sync it, or on any failure leave ``path`` as it was
    (what the disk took of it cut back off; should even that fail, the next ``mend`` sets it
    aside)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        start = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)


def mend(path):
    """Set aside the torn last line of journal ``path`` (a writer killed mid-line): its bytes
    copied to ``<path>.torn-<time>``, the journal cut back to its whole lines, a warning. The
    caller holds the journal's lock (no writer is mid-line then); the copy is made first, so
    that no byte is lost should the disk refuse it."""
    with open(path, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        whole = _whole(f, size)
        if whole == size:
            return
        f.seek(whole)
        torn = f.read(size - whole)
        aside = _set_aside(path, torn)
        f.truncate(whole)
        os.fsync(f.fileno())
    print(
        "r3: warning: the study journal %s ended in a torn line (%d bytes, a writer stopped "
        "mid-line): set aside in %s, the journal goes on without it" % (path, len(torn), aside),
        file=sys.stderr,
    )


def _set_aside(path, data):
    """A new file ``<path>.torn-<time>-<pid>[.n]`` that holds ``data``, synced; its name."""
    stem = "%s.torn-%s-%d" % (path, time.strftime("%Y%m%d-%H%M%S"), os.getpid())
    for n in range(1000):
        aside = stem + (".%d" % n if n else "")
        try:
            out = open(aside, "xb")
        except FileExistsError:  # (torn again within the second)
            continue
        try:
            with out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            return aside
        except BaseException:  # (a full disk: the journal stays as it was, and no part copy beside it)
            os.unlink(aside)
            raise
    raise R3Error("%s: a thousand torn lines set aside within a second; something writes it badly" % path)


def _whole(f, size, chunk=1 << 16):
    """The size of open file ``f`` (``size`` bytes) up to the end of its last whole line."""
    end = size
    if end and _read_at(f, end - 1, 1) == b"\n":
        return end
    while end > 0:
        start = max(0, end - chunk)
        at = _read_at(f, start, end - start).rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0


def _read_at(f, offset, n):
    f.seek(offset)
    return f.read(n)


def migrate(legacy, path):
    """Copy every study of the SQLite database ``legacy`` into a new journal at ``path``,
    once: under a lock, into a temporary file renamed into place, so that a run started
    beside it waits and then finds the whole journal, and a killed copy leaves none."""
    if os.path.exists(path) or not os.path.exists(legacy):
        return
    with open(path + ".migrate.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed, or when its process dies
        if os.path.exists(path):
            return
        tmp = "%s.%d.tmp" % (path, os.getpid())
        if os.path.exists(tmp):
            os.unlink(tmp)
        try:
            source = optuna.storages.RDBStorage("sqlite:///" + legacy)
            studies = source.get_all_studies()
        except Exception as err:  # sqlalchemy's DatabaseError: a truncated or garbage file
            raise R3Error(
                "the study database %s of an older r3 does not read (%s): move it aside to start "
                "afresh (the captures stay)" % (legacy, str(err).splitlines()[0][:200])
            )
        target = journal(tmp)
        for study in studies:
            optuna.copy_study(from_study_name=study.study_name, from_storage=source, to_storage=target)
        os.replace(tmp, path)


def _started(pid):
    """The start time of process ``pid`` (clock ticks after boot), None when it is gone or
    a zombie; '' where /proc does not say (then only whether the pid exists counts)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    except OSError:
        fields = None
    if fields is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ""
    return None if fields[0] in ("Z", "X") else fields[19]


def owner():
    """Who holds a trial this process evaluates: kept in the trial while it runs."""
    return {"host": HOST, "pid": os.getpid(), "started": _started(os.getpid())}


def held(trial, now=None):
    """Whether the process that holds RUNNING ``trial`` still lives. A trial without an
    owner was left by an older r3: nobody holds it. One held on another host (a node of a
    cluster, a batch job) lives while its process writes its heartbeat (``Heartbeat``): its
    pid says nothing here. Its last beat within ``STALE_S`` of this host's clock: the hosts'
    clocks may differ by much less than that (NTP)."""
    who = trial.user_attrs.get("owner")
    if not who:
        return False
    if who.get("host") != HOST:
        beat = trial.user_attrs.get("beat")
        return beat is None or (now or time.time()) - beat < STALE_S  # (no beat: an r3 before them)
    started = _started(who.get("pid", -1))
    return started is not None and (started == "" or not who.get("started") or started == who["started"])


class Heartbeat:
    """Writes the time (``beat``) into every trial this process holds RUNNING, every
    ``interval`` seconds, from a thread of its own (a beat goes on while a candidate runs)."""

    def __init__(self, interval=HEARTBEAT_S):
        self.interval = interval
        self._held = {}
        self._lock = threading.Lock()
        self._thread = None

    def hold(self, store, trial_id):
        with self._lock:
            self._held[(id(store), trial_id)] = store
            if self._thread is None:
                self._thread = threading.Thread(target=self._beat, name="r3-heartbeat", daemon=True)
                self._thread.start()

    def release(self, store, trial_id):
        with self._lock:
            self._held.pop((id(store), trial_id), None)

    def _beat(self):
        while True:
            time.sleep(self.interval)
            with self._lock:
                held = list(self._held.items())
            for (_, trial_id), store in held:
                try:
                    store.set_trial_user_attr(trial_id, "beat", time.time())
                except Exception:  # finished since, or taken for dead by another host: not ours now
                    self.release(store, trial_id)


HEARTBEAT = Heartbeat()


def confirming(workspace, names):
    """Hold the confirmation of the studies ``names`` (blocking while another process
    holds any of them): one process at a time confirms a study and keeps its result in
    it, and one that waited finds that result there."""
    return exclusive(workspace, ["confirm " + name for name in names])


@contextmanager
def exclusive(workspace, names):
    """Hold the workspace's locks ``names`` (strings) for this process, blocking while
    another process holds any: a lock file each under ``<workspace>/locks``, taken in one
    order (no deadlock), released however this process ends."""
    folder = workspace.locks_dir
    os.makedirs(folder, exist_ok=True)
    files = []
    try:
        for name in sorted(set(names)):
            digest = hashlib.sha256(name.encode()).hexdigest()[:16]
            files.append(open(os.path.join(folder, digest + ".lock"), "a"))
            fcntl.flock(files[-1], fcntl.LOCK_EX)
        yield
    finally:
        for f in files:
            f.close()

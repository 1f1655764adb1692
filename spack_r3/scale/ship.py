"""Captures for Dask workers that do not see the workspace: sent once, kept on the worker's disk.

A worker sees the workspace when it reads, at the workspace's path, the marker file this
run wrote there with a nonce in it (``Marker``); then it replays captures where they lie.
Otherwise the run sends it each capture's files once (``send``) into its ``Store``, a folder
on the worker's local disk where captures are addressed by content: a capture's key is the
digest of its manifest (every file's name and SHA-256), so a capture already there, from
this run, an earlier one or another worker on the node, is reused once its files are
checked against the manifest; one that fails the check is sent again.

    marker = Marker.write(ws.cache_dir)           # this process, for the pool's life (dead runs' removed)
    marker.seen()                                 # on a worker: True where it sees the workspace
    marker.remove()                               # as the pool closes
    key, manifest = manifest_of(capture_dir)      # this process
    store = Store(Store.default_root())           # on a worker
    store.path(key) or send(client, address, capture_dir, key, manifest)
"""

import glob
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from types import SimpleNamespace

from ..fileutil import sha256_file

SHIP_ENV = "R3_SHIP_CAPTURES"  # "1": send captures to every worker, whatever it sees
STORE_ENV = "R3_WORKER_CAPTURES"  # where a worker keeps the captures sent to it
MANIFEST = "r3-manifest.json"
MARKER_PREFIX = ".dask-sees-"
MARKER_STALE_S = 3600.0  # a marker of another host's run not touched this long: that run is dead
CHUNK = 4 << 20  # bytes a message carries (on loopback 4 MiB sent faster than 32: bench/scale.json "ship")


def forced():
    """Whether the user asked for captures to be sent even to workers that see the workspace."""
    return os.environ.get(SHIP_ENV, "").lower() in ("1", "yes", "true")


@dataclass
class Marker:
    """A file only those who see the workspace can read: its path and the nonce in it.

    Each run writes its own (its name is its nonce) with who wrote it (host, pid, the
    process's start time), and removes it as it closes. A run killed before that leaves
    its marker behind; it names that dead run only, so no later run reads it as its own,
    and the next run that writes one removes such leftovers: on this host those whose
    process is gone, from another host (whose processes cannot be seen from here) those
    not touched for ``MARKER_STALE_S`` (a run touches its own at each progress line)."""

    path: str
    nonce: str

    @classmethod
    def write(cls, folder):
        from ..search.store import owner  # (the run's process only: workers need no Optuna)

        nonce = uuid.uuid4().hex
        os.makedirs(folder, exist_ok=True)
        sweep(folder)
        path = os.path.join(os.path.abspath(folder), MARKER_PREFIX + nonce)
        with open(path, "w") as f:
            json.dump(dict(owner(), nonce=nonce), f)
        return cls(path, nonce)

    def seen(self):
        return _read(self.path).get("nonce") == self.nonce

    def touch(self):
        """Say this run lives, to runs on other hosts (``sweep``)."""
        try:
            os.utime(self.path)
        except OSError:
            pass

    def remove(self):
        try:
            os.unlink(self.path)
        except OSError:
            pass


def _read(path):
    """What a marker file says (its nonce, who wrote it); {} where it does not read."""
    try:
        with open(path) as f:
            said = json.load(f)
    except (OSError, ValueError):
        return {}
    return said if isinstance(said, dict) else {}


def sweep(folder, now=None):
    """Remove the markers in ``folder`` left by runs that are dead: on this host, by their
    process; from another host, or unreadable (an older r3's, one being written), by their
    age. Returns the paths removed."""
    from ..search.store import HOST, held

    removed = []
    now = time.time() if now is None else now
    for path in glob.glob(os.path.join(folder, MARKER_PREFIX + "*")):
        who = _read(path)
        try:
            age = now - os.stat(path).st_mtime
        except OSError:  # (removed meanwhile)
            continue
        if who.get("host") == HOST and "pid" in who:  # (a marker's owner is a trial's: store.held judges it)
            dead = not held(SimpleNamespace(user_attrs={"owner": who}))
        else:
            dead = age > MARKER_STALE_S
        if dead:
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:  # (another run's sweep took it first)
                pass
    return removed


def manifest_of(directory):
    """(key, manifest) of a capture directory: manifest maps each of its files (those in
    its folders too: its link units, its unit's headers) to its SHA-256; the key is the
    digest of the manifest."""
    manifest = {}
    for folder, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            rel = os.path.relpath(os.path.join(folder, name), directory)
            if rel != MANIFEST:
                manifest[rel] = sha256_file(os.path.join(folder, name))
    return _key(manifest), manifest


def _key(manifest):
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


class Store:
    """A worker's captures by key: ``root/KEY/`` holds the capture's files and its manifest."""

    def __init__(self, root):
        self.root = root
        self.checked = set()  # keys whose files this process has checked
        self.received = 0  # files written here by this process (what the tests count)

    @staticmethod
    def default_root():
        return os.environ.get(STORE_ENV) or os.path.join(tempfile.gettempdir(), "r3-captures-%d" % os.getuid())

    def path(self, key):
        """The capture's folder here, its files checked once per process; None if it is
        not here or is not what its key says (then it is removed, to be sent again)."""
        folder = os.path.join(self.root, key)
        if key in self.checked:
            return folder
        if not os.path.isdir(folder):
            return None
        if not _intact(folder, key):
            shutil.rmtree(folder, ignore_errors=True)
            return None
        self.checked.add(key)
        return folder

    def _part(self, key):
        return os.path.join(self.root, ".part-%s-%d" % (key, os.getpid()))  # (one worker's)

    def put(self, key, name, offset, data):
        """Write a piece of one file of capture ``key``."""
        part = self._part(key)
        path = os.path.join(part, name)
        if os.path.isabs(name) or os.path.normpath(name) != name or name.split("/")[0] == "..":
            raise ValueError("%r is not a file of a capture" % name)
        if offset == 0:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "r+b" if offset else "wb") as f:
            f.seek(offset)
            f.write(data)
        if offset == 0:
            self.received += 1

    def commit(self, key, manifest):
        """Make the received files capture ``key`` once they match ``manifest``; ValueError if
        they do not. Another worker of the node that committed it first wins."""
        part = self._part(key)
        os.makedirs(part, exist_ok=True)  # (a capture of no files)
        with open(os.path.join(part, MANIFEST), "w") as f:
            json.dump(manifest, f, sort_keys=True)
        if not _intact(part, key):
            shutil.rmtree(part, ignore_errors=True)
            raise ValueError("capture %s arrived corrupt" % key)
        try:
            os.rename(part, os.path.join(self.root, key))
        except OSError:  # (there already: a neighbour's copy, checked on use)
            shutil.rmtree(part, ignore_errors=True)
        self.checked.add(key)


def _intact(folder, key):
    """Whether ``folder`` holds the files of capture ``key``, each with its digest."""
    try:
        with open(os.path.join(folder, MANIFEST)) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return False
    if not isinstance(manifest, dict) or _key(manifest) != key:
        return False
    return all(
        os.path.isfile(os.path.join(folder, name)) and sha256_file(os.path.join(folder, name)) == digest
        for name, digest in manifest.items()
    )


def send(client, address, directory, key, manifest, put, commit):
    """Send capture ``directory`` to the worker at ``address``, file by file in pieces of
    at most ``CHUNK`` bytes, through ``client.run`` of ``put`` and ``commit`` there (which
    fails at once if that worker is gone, where a task bound to it would wait). Returns the
    bytes sent."""
    sent = 0
    for name in manifest:
        with open(os.path.join(directory, name), "rb") as f:
            offset = 0
            while True:
                data = f.read(CHUNK)
                if not data and offset:
                    break
                client.run(put, key, name, offset, data, workers=[address])
                offset += len(data)
                sent += len(data)
                if len(data) < CHUNK:
                    break
    client.run(commit, key, manifest, workers=[address])
    return sent

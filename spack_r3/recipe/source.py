"""Where a package's source comes from, and how the recipe fetches it.

``--source`` is a directory, a tarball (path, ``file://`` or ``http(s)://``), or a git
repository (``git+URL``, ``*.git``, or a directory with ``.git`` when ``--git`` is asked).
A directory is packed into a reproducible tarball (sorted names, zero mtimes and owners)
in the workspace, so the recipe can install it offline with a checksum:
``url = "file://.../<name>-<version>.tar.gz"`` plus ``version(..., sha256=...)``.
"""

import gzip
import io
import os
import re
import shutil
import subprocess
import tarfile
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Optional

from ..errors import R3Error
from ..fileutil import sha256_file
from .analyze import SKIP_DIRS


@dataclass
class Source:
    tree: str  # unpacked source tree to analyze
    url: Optional[str] = None  # what the recipe fetches (tarball)
    sha256: Optional[str] = None
    git: Optional[str] = None  # or a git repository ...
    commit: Optional[str] = None  # ... at this commit
    origin: str = ""  # what the user gave


def pack_tree(tree, dest_dir, name, version):
    """A reproducible ``<name>-<version>.tar.gz`` of ``tree``; returns (path, sha256)."""
    os.makedirs(dest_dir, exist_ok=True)
    top = "%s-%s" % (name, version)
    out = os.path.join(dest_dir, top + ".tar.gz")

    def add(tar, path, arc):
        info = tar.gettarinfo(path, arc)
        info.mtime = 0
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        if info.isfile():
            with open(path, "rb") as f:
                tar.addfile(info, f)
        else:
            tar.addfile(info)

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        add(tar, tree, top)
        for d, dirs, files in os.walk(tree):
            dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
            for n in sorted(dirs) + sorted(files):
                p = os.path.join(d, n)
                if os.path.islink(p) or not (os.path.isfile(p) or os.path.isdir(p)):
                    continue
                add(tar, p, top + "/" + os.path.relpath(p, tree).replace(os.sep, "/"))
    data = buf.getvalue()
    tmp = out + ".tmp"
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            gz.write(data)
    os.replace(tmp, out)
    return out, sha256_file(out)


def _unpack(tarball, dest):
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    try:
        with tarfile.open(tarball) as tar:
            members = [
                m
                for m in tar.getmembers()
                if not (m.name.startswith("/") or ".." in m.name.split("/")) and (m.isfile() or m.isdir())
            ]
            tar.extractall(dest, members=members)
    except (tarfile.TarError, OSError) as err:
        raise R3Error("cannot unpack %s: %s" % (tarball, err))
    entries = [e for e in os.listdir(dest) if not e.startswith(".")]
    if len(entries) == 1 and os.path.isdir(os.path.join(dest, entries[0])):
        return os.path.join(dest, entries[0])
    return dest


def is_git(spec):
    return spec.startswith("git+") or spec.endswith(".git") or spec.startswith("git@")


def acquire(spec, work_dir):
    """Resolve ``--source SPEC`` into a Source (trees unpacked or cloned under work_dir)."""
    os.makedirs(work_dir, exist_ok=True)
    if is_git(spec):
        url = spec[4:] if spec.startswith("git+") else spec
        dest = os.path.join(work_dir, "git")
        if os.path.isdir(dest):
            shutil.rmtree(dest)
        try:
            subprocess.run(
                ["git", "clone", "--quiet", "--depth", "1", url, dest],
                check=True,
                capture_output=True,
                text=True,
                timeout=600,
            )
            commit = subprocess.run(
                ["git", "-C", dest, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
            ).stdout.strip()
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as err:
            msg = getattr(err, "stderr", "") or str(err)
            raise R3Error("cannot clone %s: %s" % (url, msg.strip().splitlines()[-1] if msg.strip() else err))
        return Source(tree=dest, git=url, commit=commit, origin=spec)
    parsed = urllib.parse.urlparse(spec)
    if parsed.scheme in ("http", "https", "ftp"):
        fname = os.path.basename(parsed.path) or "source.tar.gz"
        local = os.path.join(work_dir, fname)
        try:
            with urllib.request.urlopen(spec, timeout=120) as resp, open(local, "wb") as f:
                shutil.copyfileobj(resp, f)
        except OSError as err:
            raise R3Error("cannot download %s: %s" % (spec, err))
        tree = _unpack(local, os.path.join(work_dir, "tree"))
        return Source(tree=tree, url=spec, sha256=sha256_file(local), origin=spec)
    path = parsed.path if parsed.scheme == "file" else spec
    path = os.path.abspath(os.path.expanduser(path))
    if os.path.isdir(path):
        return Source(tree=path, origin=spec)  # packed once name and version are known
    if os.path.isfile(path) and re.search(r"\.(tar(\.\w+)?|tgz|tbz2|txz)$", path):
        tree = _unpack(path, os.path.join(work_dir, "tree"))
        return Source(tree=tree, url="file://" + path, sha256=sha256_file(path), origin=spec)
    raise R3Error("source %s is neither a directory, a tarball, a URL nor a git repository" % spec)


def finalize(source, work_dir, name, version):
    """Give a directory source its tarball (url + sha256)."""
    if source.url or source.git:
        return source
    path, sha = pack_tree(source.tree, work_dir, name, version)
    source.url = "file://" + path
    source.sha256 = sha
    return source

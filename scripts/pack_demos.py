#!/usr/bin/env python3
"""Pack the demo applications' sources into the tarballs their Spack recipes fetch.

For each demo ``repos/r3/sources/<app>/`` this writes
``repos/r3/packages/r3-<app>/<app>-<version>.tar.gz`` deterministically (sorted
entries, top directory ``<app>-<version>/``, mode 644/755, mtime 0, uid/gid 0, no
user/group names, gzip header mtime 0), so the same sources always give the same bytes, and
rewrites the ``sha256=`` of that version in the package's ``package.py``.

    scripts/pack_demos.py            # (re)pack and update the checksums
    scripts/pack_demos.py --check    # exit 1 if a tarball or checksum is stale
"""

import argparse
import gzip
import hashlib
import io
import os
import re
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.join(ROOT, "repos", "r3")
DEMOS = ("heat", "cg", "nbody", "dense", "heat-offload", "fheat")
VERSION = "1.0"
SKIP = re.compile(r"(\.o|\.a|\.so|~|\.swp|\.pyc)$")


def source_files(src):
    """Relative paths of the files under ``src`` that belong in the tarball, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src)
            if name.startswith(".") or SKIP.search(name):
                continue
            # built programs: executable regular files without a source-like name
            if os.access(path, os.X_OK) and "." not in name:
                continue
            out.append(rel)
    return sorted(out)


def _info(name, size=0, mode=0o644, kind=tarfile.REGTYPE):
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = mode
    info.type = kind
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def make_tarball(src, topdir):
    """The deterministic .tar.gz bytes of ``src`` under ``topdir/``."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        tar.addfile(_info(topdir + "/", mode=0o755, kind=tarfile.DIRTYPE))
        dirs_done = set()
        for rel in source_files(src):
            parts = rel.split(os.sep)
            for k in range(1, len(parts)):
                d = "/".join(parts[:k])
                if d not in dirs_done:
                    dirs_done.add(d)
                    tar.addfile(_info("%s/%s/" % (topdir, d), mode=0o755, kind=tarfile.DIRTYPE))
            path = os.path.join(src, rel)
            with open(path, "rb") as f:
                data = f.read()
            # fixed mode: a checkout's umask or exec bits must not change the bytes
            tar.addfile(_info("%s/%s" % (topdir, "/".join(parts)), len(data)), io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


SHA_RE = r'(version\(\s*"%s"\s*,\s*sha256\s*=\s*")([0-9a-f]*)(")'


def recipe_sha(text, version):
    m = re.search(SHA_RE % re.escape(version), text)
    return m.group(2) if m else None


def process(app, check):
    """Pack (or check) one demo; returns a list of problems (empty when up to date)."""
    src = os.path.join(REPO, "sources", app)
    pkgdir = os.path.join(REPO, "packages", "r3-" + app)
    tarball = os.path.join(pkgdir, "%s-%s.tar.gz" % (app, VERSION))
    recipe = os.path.join(pkgdir, "package.py")
    data = make_tarball(src, "%s-%s" % (app, VERSION))
    sha = hashlib.sha256(data).hexdigest()
    with open(recipe) as f:
        text = f.read()
    old_sha = recipe_sha(text, VERSION)
    if old_sha is None:
        return ['%s: no version("%s", sha256="...") in %s' % (app, VERSION, recipe)]
    problems = []
    current = None
    if os.path.exists(tarball):
        with open(tarball, "rb") as f:
            current = f.read()
    if current != data:
        problems.append("%s: %s is missing or stale" % (app, os.path.relpath(tarball, ROOT)))
    if old_sha != sha:
        problems.append("%s: sha256 in %s is stale" % (app, os.path.relpath(recipe, ROOT)))
    if check or not problems:
        return problems
    if current != data:
        with open(tarball, "wb") as f:
            f.write(data)
    if old_sha != sha:
        pattern = SHA_RE % re.escape(VERSION)
        text = re.sub(pattern, lambda m: m.group(1) + sha + m.group(3), text, count=1)
        with open(recipe, "w") as f:
            f.write(text)
    print("packed %s (sha256 %s)" % (os.path.relpath(tarball, ROOT), sha))
    return []


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when stale")
    parser.add_argument("demos", nargs="*", default=list(DEMOS), help="demos (default: all)")
    args = parser.parse_args(argv)
    problems = []
    for app in args.demos:
        problems += process(app, args.check)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print("run scripts/pack_demos.py to update", file=sys.stderr)
        return 1
    if args.check:
        print("demo tarballs and checksums are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())

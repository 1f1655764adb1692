"""A user's source tree, as r3 reads it: a private copy to build in, and a digest of its content.

The user's tree is never written. A symbolic link in it is where a build could write
through: a copy that kept ``obj -> /elsewhere/objdir`` as a link had the record build
write its objects into the user's directory. So the copy keeps a link only where it points
inside the tree (as a relative link within the copy); a link pointing outside is copied
as what it points to, and one pointing nowhere outside is left out (nothing to read there).

The digest keys reuse of a record on what the tree holds (as Spack keys a package on its
source), not on its path: a changed file, an added or removed one, a changed mode or link
gives another digest. It reads the tree the way the copy does, so a tree and its fresh
copy digest alike.
"""

import hashlib
import os
import shutil
import stat

from .errors import R3Error


def _inside(path, root):
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _entries(src, ignore):
    """(relative path, kind, what) of every entry the copy holds, in a fixed order. kind:
    ``dir``, ``file`` (what: its real path), ``link`` (what: its target relative to the
    entry's directory) or ``gone`` (a link outside the tree to nothing: left out)."""
    root = os.path.realpath(src)
    stack = [(src, "", frozenset())]
    while stack:
        directory, rel_dir, seen = stack.pop()
        names = sorted(os.listdir(directory))
        skip = set(ignore(directory, names)) if ignore else set()
        for name in reversed(names):
            if name in skip:
                continue
            path = os.path.join(directory, name)
            rel = os.path.join(rel_dir, name)
            real = os.path.realpath(path)
            if os.path.islink(path) and _inside(real, root):
                target = os.path.relpath(real, os.path.realpath(directory))
                yield rel, "link", target
                continue
            if os.path.islink(path) and not os.path.exists(path):
                yield rel, "gone", os.readlink(path)
                continue
            if os.path.isdir(path):
                if real in seen:
                    raise R3Error("%s: a link cycle through %s" % (src, path))
                yield rel, "dir", real
                stack.append((path, rel, seen | {real}))
            elif os.path.isfile(path):
                yield rel, "file", real
            # sockets, fifos and devices are no source


def copy(src, dest, ignore=None):
    """Copy ``src`` to the new directory ``dest`` (``ignore`` as shutil.copytree's). Returns
    the links left out because they point outside the tree to nothing."""
    src = os.path.abspath(src)
    os.makedirs(dest)
    left_out = []
    for rel, kind, what in _entries(src, ignore):
        out = os.path.join(dest, rel)
        if kind == "dir":
            os.makedirs(out, exist_ok=True)
        elif kind == "file":
            shutil.copy2(what, out)
        elif kind == "link":
            os.symlink(what, out)
        else:
            left_out.append(rel)
    return left_out


def digest(src, ignore=None):
    """Hex SHA-256 of the tree's content as ``copy`` would copy it: paths, kinds,
    executable bits, file contents and the links within it."""
    h = hashlib.sha256()
    src = os.path.abspath(src)
    if not os.path.isdir(src):
        raise R3Error("source directory %s does not exist" % src)
    for rel, kind, what in _entries(src, ignore):
        h.update(("%s\0%s\0" % (kind, rel)).encode("utf-8", "surrogateescape"))
        if kind == "file":
            st = os.stat(what)
            h.update(b"%s%d\0" % (b"x" if st.st_mode & stat.S_IXUSR else b"-", st.st_size))
            with open(what, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        elif kind in ("link", "gone"):
            h.update(what.encode("utf-8", "surrogateescape"))
        h.update(b"\0")
    return h.hexdigest()

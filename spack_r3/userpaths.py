"""Paths the user names on the command line (the workspace, ``--repo``, ``-o``, ``--source``,
``--spack-config``, ``--spack-repo``): a path the machine refuses is the user's to fix, told
in one line that names it (exit 2), never an internal error.

``check_output_dir`` checks a directory a command will write before any work (a tune of
hours does not end on a ``--repo`` it cannot create); ``refusal`` is the command line's net
for the rest: the one line for an OSError on a path given, or under or above one.
"""

import os
import tempfile

from .errors import R3Error

# args' attribute -> the option as the user spells it. (--storage is the study store's own.)
PATH_OPTIONS = (
    ("repo", "--repo"),
    ("output", "-o"),
    ("source", "--source"),
    ("spack_config", "--spack-config"),
    ("spack_repo", "--spack-repo"),
)


def check_output_dir(path, option):
    """R3Error, in one line naming ``path``, unless it is a directory this process may
    write or one it may create: tried with an empty directory made in it, or in its nearest
    existing parent, and removed at once. Nothing else is created."""
    path = os.path.abspath(path)
    if os.path.lexists(path) and not os.path.isdir(path):
        what = "a link to nothing" if not os.path.exists(path) else "not a directory"
        raise R3Error("%s %s is %s" % (option, path, what))
    parent = path
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise R3Error("%s %s cannot be created: %s is not a directory" % (option, path, parent))
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".r3-probe-", dir=parent))
    except OSError as err:
        raise R3Error(
            "%s (%s): %s %s %s"
            % (err.strerror or err, parent, option, path, "is not writable" if parent == path else "cannot be created")
        )


def given_paths(args):
    """[(option, absolute path, whether errors under it are the user's)] of the paths in
    ``args``. The workspace's own files are r3's: only the workspace itself and what lies
    above it are the user's."""
    out = []
    for name, option in PATH_OPTIONS:
        values = getattr(args, name, None)
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, str) and value and "://" not in value:
                out.append((option, os.path.abspath(value), True))
    try:
        from .workspace import workspace_root

        out.append(("--workspace", workspace_root(getattr(args, "workspace", None)), False))
    except R3Error:
        pass
    return out


def refusal(args, err):
    """The one line for ``err`` (or the OSError it was raised from) where it is about a
    path the user gave in ``args``, or above it, or (but for the workspace) under it;
    else None."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError):
            for filename in (err.filename, getattr(err, "filename2", None)):
                line = _line(args, err, filename)
                if line:
                    return line
        err = err.__cause__ or err.__context__
    return None


def _line(args, err, filename):
    if not isinstance(filename, (str, bytes)) or not filename:
        return None
    filename = os.path.abspath(os.fsdecode(filename))
    for option, path, below in given_paths(args):
        if filename == path or _inside(path, filename) or (below and _inside(filename, path)):
            return "%s (%s): cannot use %s %s" % (err.strerror or err, filename, option, path)
    return None


def _inside(path, directory):
    """Whether ``path`` lies strictly under ``directory``."""
    return path.startswith(directory.rstrip(os.sep) + os.sep)

"""Where a Spack call of r3's may write: the directories its configuration scopes name for
installs, stages and caches, a temporary directory of its own, and nothing else.

A trial build runs the build system of a tree nobody reviewed (a generated recipe's, or a
user's tree through ``dev_path``): a Makefile that writes ``/tmp/x`` or appends to
``~/.bashrc`` must fail there, as a replay candidate that writes a file does. The rule is
Landlock's (``spack_r3.landlock``), set in the spack process before it starts and
inherited by everything it runs.
"""

import getpass
import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import List

import yaml

from ..errors import R3Error
from .. import landlock

# config.yaml's keys that name where Spack writes
KEYS = ("install_tree", "build_stage", "source_cache", "misc_cache", "test_stage")


@dataclass
class Confinement:
    """What a confined spack call may write beneath (``writable``); ``tmp`` is its TMPDIR and
    ``user_cache`` its SPACK_USER_CACHE_PATH (else ``~/.spack``: the user's)."""

    writable: List[str] = field(default_factory=list)
    tmp: str = ""
    user_cache: str = ""

    def environment(self):
        return {"TMPDIR": self.tmp, "SPACK_USER_CACHE_PATH": self.user_cache}

    def also(self, *dirs):
        """The same confinement, writing beneath ``dirs`` too (one build's own directory)."""
        return Confinement(list(self.writable) + [os.path.abspath(d) for d in dirs], self.tmp, self.user_cache)

    def apply(self):
        """In the child, before exec: writes beneath ``writable`` only (what it starts too)."""
        why = landlock.restrict_writes(list(self.writable) + list(landlock.DEVICES))
        if why:  # checked in the parent first (``available``): this is a kernel that changed its mind
            os.write(2, ("r3: cannot confine the build: %s\n" % why).encode())
            os._exit(126)


def available():
    """None where builds can be confined here, else why not."""
    return None if landlock.abi() >= 1 else "this kernel has no Landlock"


def _expand(path, spack_root):
    """A config path as Spack reads it: $spack, $user, $tempdir, $user_cache_path, ~ and
    environment variables; None where a placeholder stays unknown."""
    subst = {
        "spack": spack_root,
        "user": getpass.getuser(),
        "tempdir": tempfile.gettempdir(),
        "user_cache_path": os.environ.get("SPACK_USER_CACHE_PATH") or os.path.expanduser("~/.spack"),
    }
    path = re.sub(r"\$\{?(spack|user|tempdir|user_cache_path)\}?", lambda m: subst[m.group(1)], str(path))
    path = os.path.expandvars(os.path.expanduser(path))
    return None if "$" in path else os.path.abspath(path)


def _config_of(scope):
    path = os.path.join(scope, "config.yaml")
    if not os.path.isfile(path):
        return {}
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as err:
        raise R3Error("cannot read the Spack scope %s: %s" % (path, err))
    return data.get("config") or data.get("config:") or {}


def writable_dirs(scopes, spack_root):
    """The directories the scopes (lowest precedence first, as ``spack -C`` takes them) name
    for ``KEYS``. R3Error where one of them is not given (Spack would write in its own
    tree) or cannot be resolved."""
    found = {}
    for scope in scopes:
        for key, value in _config_of(scope).items():
            key = key.rstrip(":")
            if key in KEYS:
                found[key] = value
    dirs = []
    for key in KEYS:
        value = found.get(key)
        if value is None:
            raise R3Error(
                "the Spack scopes given name no %s: a confined build would have nowhere to write it "
                "(r3's own scope sets every one)" % key
            )
        if isinstance(value, dict):
            value = value.get("root")
        for entry in value if isinstance(value, list) else [value]:
            path = _expand(entry, spack_root) if entry else None
            if path is None:
                raise R3Error("cannot resolve the Spack config entry %s: %r" % (key, entry))
            dirs.append(path)
    return dirs


def confinement(scopes, spack_root, own):
    """The confinement of spack calls with ``scopes`` whose own scratch lives in ``own``."""
    why = available()
    if why:
        raise R3Error("builds of an unreviewed tree run confined, and cannot be here: %s" % why)
    tmp, user_cache = os.path.join(own, "tmp"), os.path.join(own, "user-cache")
    dirs = writable_dirs(scopes, spack_root) + [tmp, user_cache]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    return Confinement(dirs, tmp, user_cache)

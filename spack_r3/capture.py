"""The capture store: list, find and load content-addressed captures, refusing anything
truncated or corrupt (``record.ingest`` writes them from what a record run left).

A capture directory holds ``capture.json``, ``module.bc`` (the unit's bitcode
before optimization), ``pre.bin`` / ``post.bin`` (memory images, see
``memimage``), a copy of the kernel's source file and of the unit's own headers; each
is checked against the digest the capture lists.
"""

import glob
import json
import os
from dataclasses import dataclass

from . import cxxnames
from .data import Capture, FileDigest
from .errors import CaptureError
from .fileutil import sha256_file
from .memimage import read_regions

CAPTURE_FILES = ("module.bc", "pre.bin", "post.bin")
HEADERS = "headers"  # the unit's own headers, each as headers/SHA256 (record/headers.py)


@dataclass
class CorruptCapture:
    """A capture directory whose capture.json cannot be read as a capture."""

    id: str
    reason: str


def _check_capture(data):
    """A Capture from capture.json's contents; ValueError naming what is wrong."""
    if not isinstance(data, dict):
        raise ValueError("it holds %s, not a capture" % type(data).__name__.replace("NoneType", "null"))
    try:
        capture = Capture.from_json(data)
    except TypeError as err:  # a field missing
        raise ValueError(str(err).replace("__init__() ", ""))
    for name, kind in (
        ("id", str),
        ("kernel", str),
        ("source_file", str),
        ("instance", int),
        ("app", dict),
        ("files", dict),
    ):
        if not isinstance(getattr(capture, name), kind):
            raise ValueError("its %s is not a %s" % (name, kind.__name__))
    return capture


def list_captures(workspace, corrupt=None):
    """Every readable capture of the workspace. Those whose capture.json cannot be read
    are left out; with ``corrupt`` (a list), each is appended to it as a CorruptCapture."""
    out = []
    for path in sorted(glob.glob(os.path.join(workspace.captures_dir, "*", "capture.json"))):
        try:
            with open(path) as f:
                out.append(_check_capture(json.load(f)))
        except (OSError, ValueError) as err:
            if corrupt is not None:
                corrupt.append(CorruptCapture(os.path.basename(os.path.dirname(path)), _unreadable(err)))
    return out


def _unreadable(err):
    """Why a capture.json did not read as a capture, in words."""
    if isinstance(err, json.JSONDecodeError):
        return "capture.json is empty" if not err.doc.strip() else "capture.json is not JSON: %s" % err
    return "capture.json: %s" % (err.strerror if isinstance(err, OSError) else err)


def run_key(capture):
    """What tells the recorded runs apart (captures of older records: the run's time)."""
    return capture.app.get("run") or capture.app.get("app_s")


def run_name(capture):
    """The recorded run a capture is from, as ``r3 kernels`` shows it: the name of its run
    directory under the workspace's runs/, or None (captures of older records)."""
    run = capture.app.get("run")
    if not isinstance(run, str):
        return None
    run = run.rstrip("/")
    return os.path.basename(os.path.dirname(run)) if os.path.basename(run) == "record" else os.path.basename(run)


def latest_run(captures, kernels=()):
    """The captures of the latest recorded run among ``captures`` (that has a capture of
    every name in ``kernels``, where given), and how many other runs there were. Shares
    are of one run: two runs' captures of one kernel are two recordings, not one kernel
    with twice the share."""
    runs = {}
    for c in captures:
        runs.setdefault(run_key(c), []).append(c)

    def has_all(caps):
        names = [c.kernel for c in caps]
        return all(cxxnames.best_matches(ref, names)[1] for ref in kernels)

    eligible = [caps for caps in runs.values() if has_all(caps)] or list(runs.values())
    if not eligible:
        return [], 0
    newest = max(eligible, key=lambda caps: (max(c.created or "" for c in caps), run_name(caps[0]) or ""))
    return newest, len(runs) - 1


def recorded_calls(workspace, capture):
    """The capture directories of ``capture``'s kernel recorded in the same run, in call
    order (``r3 record --instances N`` keeps the first N calls)."""
    same = [
        c
        for c in list_captures(workspace)
        if c.kernel == capture.kernel
        and run_key(c) == run_key(capture)
        and (c.compile_dir, c.source_file) == (capture.compile_dir, capture.source_file)
    ]
    return [workspace.capture_dir(c.id) for c in sorted(same, key=lambda c: c.instance)]


def resolve(workspace, ref, first_call=False):
    """A capture directory from an id, a unique id prefix, a kernel name or a path.

    A C++ kernel is named by its symbol, its demangled name, or its qualified name
    alone when no other captured kernel has that one (see ``cxxnames``). ``first_call``:
    a kernel recorded at several calls of one run names the first of them."""
    if os.path.isfile(os.path.join(ref, "capture.json")):
        return os.path.abspath(ref)
    direct = workspace.capture_dir(ref)
    if os.path.isdir(direct):
        return direct
    caps = list_captures(workspace)
    matches = [c for c in caps if c.id.startswith(ref)]
    if not matches:
        _, kernels = cxxnames.best_matches(ref, [c.kernel for c in caps])
        matches = [c for c in caps if c.kernel in kernels]
    if first_call:  # one capture per run of each kernel: the first call of each
        runs = {}
        for c in sorted(matches, key=lambda c: c.instance):
            runs.setdefault((c.kernel, run_key(c)), []).append(c)
        if len(runs) > 1 and len({kernel for kernel, _ in runs}) == 1:
            raise CaptureError(
                "'%s' was recorded in %d runs; name the first call of the one to replay: %s"
                % (
                    ref,
                    len(runs),
                    ", ".join(
                        "%s (%d call%s)" % (calls[0].id, len(calls), "" if len(calls) == 1 else "s")
                        for calls in runs.values()
                    ),
                )
            )
        matches = [calls[0] for calls in runs.values()]
    if len(matches) == 1:
        return workspace.capture_dir(matches[0].id)
    if not matches:
        corrupt = []
        list_captures(workspace, corrupt)
        named = [c for c in corrupt if c.id.startswith(ref)]
        if len(named) == 1:  # (an id, or its prefix, of a capture that does not read)
            raise CaptureError(
                "capture %s is corrupt: %s (%s)"
                % (named[0].id, named[0].reason, os.path.join(workspace.capture_dir(named[0].id), "capture.json"))
            )
        if corrupt:  # the kernel named may be one of those: their capture.json does not say
            raise CaptureError(
                "unknown capture '%s' in %s: no readable capture has that id or kernel, and %d "
                "corrupt one(s) do not say theirs: %s"
                % (
                    ref,
                    workspace.root,
                    len(corrupt),
                    "; ".join(
                        "%s (%s)" % (os.path.join(workspace.capture_dir(c.id), "capture.json"), c.reason)
                        for c in corrupt[:3]
                    )
                    + ("; ..." if len(corrupt) > 3 else ""),
                )
            )
        raise CaptureError("unknown capture '%s' in %s (see: r3 kernels)" % (ref, workspace.root))
    raise CaptureError(
        "'%s' is ambiguous: %s" % (ref, ", ".join("%s (%s)" % (c.id, cxxnames.display(c.kernel)) for c in matches))
    )


def load_capture_dir(path, verify_digests=True):
    """Load and check a capture directory; CaptureError if anything is off."""
    meta_path = os.path.join(path, "capture.json")
    try:
        with open(meta_path) as f:
            capture = _check_capture(json.load(f))
    except FileNotFoundError:
        raise CaptureError("capture %s has no capture.json" % path)
    except (ValueError, TypeError) as err:
        raise CaptureError(
            "capture %s: capture.json is corrupt (%s)"
            % (path, "empty" if isinstance(err, json.JSONDecodeError) and not err.doc.strip() else err)
        )
    # Every file the capture lists (its source copy too), and those it must have listed.
    for name in list(dict.fromkeys(list(CAPTURE_FILES) + capture.link_units + sorted(capture.files))):
        fpath = os.path.join(path, name)
        want = capture.files.get(name)
        if not want or not os.path.exists(fpath):
            raise CaptureError("capture %s: %s is missing" % (capture.id, name))
        want = FileDigest(**want)
        size = os.path.getsize(fpath)
        if size != want.size:
            raise CaptureError(
                "capture %s: %s is truncated or corrupt (%d bytes, recorded %d)" % (capture.id, name, size, want.size)
            )
        if verify_digests and sha256_file(fpath) != want.sha256:
            raise CaptureError("capture %s: %s is corrupt (checksum mismatch)" % (capture.id, name))
    for name in ("pre.bin", "post.bin"):
        read_regions(os.path.join(path, name))  # raises CaptureError on a bad image
    _check_headers(capture, path, verify_digests)
    return capture


def _check_headers(capture, path, verify_digests):
    """The unit's headers kept in the capture (``headers/SHA``, named by their content):
    a copy cut or changed would compile every source variant against other code."""
    for header, digest in sorted((capture.headers or {}).items()):
        fpath = os.path.join(path, HEADERS, digest)
        if not os.path.isfile(fpath):
            raise CaptureError("capture %s: its copy of %s (%s) is missing" % (capture.id, header, fpath))
        if verify_digests and sha256_file(fpath) != digest:
            raise CaptureError(
                "capture %s: its copy of %s (%s) is corrupt (checksum mismatch)" % (capture.id, header, fpath)
            )


def load_capture(workspace, ref, verify_digests=True):
    return load_capture_dir(resolve(workspace, ref), verify_digests)

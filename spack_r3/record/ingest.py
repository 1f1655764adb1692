"""Capture ingest: turn what a record run wrote into the workspace's content-addressed
captures (the store that ``capture`` lists and loads).

A capture directory holds ``capture.json``, ``module.bc`` (the unit's bitcode
before optimization), ``pre.bin`` / ``post.bin`` (memory images, see
``memimage``) and a copy of the kernel's source file.
"""

import datetime
import glob
import hashlib
import json
import mmap
import os
import shutil
import tempfile
import time
from dataclasses import replace

from ..capture import CAPTURE_FILES, load_capture, run_key
from ..data import Capture
from ..errors import CaptureError, R3Error
from ..fileutil import sha256_file, write_atomic
from ..iredit import init_native
from ..report import warn
from ..memimage import KIND_GLOBAL, KIND_HEAP, KIND_STACK, identity_digest, read_regions
from . import headers, reach
from .instances import selection_of
from .libstate import unreplayable_reason
from .profiles import load_profiles, share_of


def _host_target():
    import llvmlite.binding as llvm

    init_native()
    target = {"cpu": llvm.get_host_cpu_name(), "features": llvm.get_host_cpu_features().flatten()}
    try:
        import archspec.cpu

        target["microarch"] = archspec.cpu.host().name
    except Exception:  # archspec cannot name every CPU
        target["microarch"] = None
    return target


def ingest(record_dir, workspace, tolerance=None, selection=None):
    """Move every finished capture of a record run into the workspace.

    ``selection``: the calls picked to capture (``instances.read_selection``): each capture
    of one of them carries its stratum (``Capture.selection``).

    Returns the list of Capture objects written (ids are content hashes, so
    recording the same thing twice yields the same id).
    """
    failed = write_failures(record_dir)
    if failed:
        raise CaptureError(
            failed[0]
            + (" (and %d more)" % (len(failed) - 1) if len(failed) > 1 else "")
            + "; the run's captures stay in %s" % record_dir
        )
    stats, app_s = load_profiles(record_dir)
    target = _host_target()
    exporters = reach.exporters(reach.load_units(record_dir))
    workspace.ensure()
    written = []
    for cdir in sorted(glob.glob(os.path.join(record_dir, "captures", "*"))):
        if os.path.basename(cdir).startswith(".tmp"):
            continue  # a capture the app did not finish writing
        try:
            with open(os.path.join(cdir, "meta.json")) as f:
                meta = json.load(f)
            with open(os.path.join(meta["tu_dir"], "tu.json")) as f:
                tu = json.load(f)
        except (OSError, ValueError, KeyError) as err:
            raise CaptureError("record output %s is incomplete: %s" % (cdir, err))
        kinfo = next((k for k in tu["kernels"] if k["name"] == meta["kernel"]), None)
        if kinfo is None:
            continue
        units = _link_units(kinfo, meta["tu_dir"], exporters)
        kinfo = dict(kinfo, unreplayable=kinfo.get("unreplayable") or _unreplayable_through(kinfo, exporters))
        written.append(
            _write_capture(
                workspace,
                cdir,
                meta,
                tu,
                kinfo,
                units,
                stats,
                app_s,
                target,
                tolerance,
                run=os.path.abspath(record_dir),
                selection=selection_of(selection or {}, meta),
            )
        )
    return written


# A capture the runtime could not write (a full disk, a file size limit, an I/O error)
# leaves captures/.error-<errno>-<kernel>-<call>-<pid>: the name says it where the disk
# had no room for the file's contents (JSON: kernel, errno, error, path). A process's
# profile that could not be written: the kernel ".profile".
ERROR_MARK = ".error-"


def write_failures(record_dir):
    """One line for each capture (then profile) the runtime of a run could not write."""
    out = []
    marks = glob.glob(os.path.join(record_dir, "captures", ERROR_MARK + "*"))
    for path in sorted(marks, key=lambda p: (".profile-" in os.path.basename(p), p)):  # kernels first
        name = os.path.basename(path)[len(ERROR_MARK) :]
        code, _, rest = name.partition("-")
        kernel = rest.rsplit("-", 2)[0] or "a kernel"
        info = {}
        try:
            with open(path) as f:
                info = json.load(f)
        except (OSError, ValueError):
            pass  # written as the disk filled up: the name says enough
        if not isinstance(info, dict):
            info = {}
        errno_ = info.get("errno") if isinstance(info.get("errno"), int) else int(code) if code.isdigit() else None
        reason = os.strerror(errno_) if errno_ else "unknown error"
        where = info.get("path") or "errno %s" % errno_
        if kernel == ".profile":  # the counts of one process
            out.append(
                "the profile of process %s could not be written: %s (%s)" % (rest.rsplit("-", 1)[-1], reason, where)
            )
        else:
            out.append("capture of %s could not be written: %s (%s)" % (info.get("kernel") or kernel, reason, where))
    return out


def _link_units(kinfo, own_unit, index):
    """The other units defining functions the kernel calls, transitively."""
    return sorted({index[n].unit for n in reach.callees(kinfo.get("calls", []), index) if n in index} - {own_unit})


def _unreplayable_through(kinfo, index):
    """Why the kernel cannot replay because of what its callees in other units call
    (its own unit's calls were judged at record time, see ``record.libstate``)."""
    return unreplayable_reason({n for n in reach.callees(kinfo.get("calls", []), index) if n not in index})


def _write_capture(workspace, cdir, meta, tu, kinfo, units, stats, app_s, target, tolerance, run, selection=None):
    module = os.path.join(meta["tu_dir"], "module.bc")
    digests = {"module.bc": sha256_file(module)}
    for name in ("pre.bin", "post.bin"):
        digests[name] = sha256_file(os.path.join(cdir, name))
    link_units = {"units/%s.bc" % os.path.basename(u): os.path.join(u, "module.bc") for u in units}
    for name, path in link_units.items():
        digests[name] = sha256_file(path)
    # The call's identity: its code, arguments and memory, less the OpenMP runtime's own
    # state (``memimage.identity_digest``): the same call recorded again is the same capture.
    identity = dict(digests, **{n: identity_digest(os.path.join(cdir, n)) for n in ("pre.bin", "post.bin")})
    ident = hashlib.sha256(
        json.dumps([meta["kernel"], identity, meta["args"], meta.get("byval")], sort_keys=True).encode()
    ).hexdigest()[:12]
    final = workspace.capture_dir(ident)
    s = stats.get((meta["tu_dir"], meta["kernel"]), {})
    capture = Capture(
        id=ident,
        kernel=meta["kernel"],
        source_file=tu["source_file"],
        compile_command=tu["compile_command"],
        compile_dir=tu["compile_dir"],
        signature={
            "ret": kinfo["ret_type"],
            "ret_size": kinfo["ret_size"],
            "params": kinfo["param_types"],
            "byval": kinfo["byval_sizes"],
        },
        args=meta["args"],
        byval_data=meta.get("byval") or [None] * len(meta["args"]),
        ret=meta.get("ret"),
        # (an offload launch adds its backend and geometry: record/runtime/r3offload.c)
        launch=dict(
            {"threads": meta.get("threads", 1), "openmp": kinfo.get("openmp", False)},
            # (the OpenMP settings of the run, where it set any: replay's workers take them)
            **({"omp_env": meta["omp_env"]} if meta.get("omp_env") else {}),
            **meta.get("launch", {}),
        ),
        target=dict(target, triple=tu.get("triple")),
        app={
            "app_s": app_s,
            "calls": s.get("calls", 0),
            "total_s": s.get("total_ns", 0) / 1e9,
            "self_s": s.get("self_ns", 0) / 1e9,
            "share": share_of(s, app_s),
            # calls with no recorded kernel below them on the main thread's stack
            "top_calls": s.get("main_top_calls", 0),
            "run": run,
        },  # which captures ran beside it (replay.cachestate)
        instance=meta["instance"],
        instance_s=meta.get("instance_ns", 0) / 1e9,
        arena=dict(
            {"base": meta["arena_base"], "end": meta["arena_end"]},
            **(
                {"runtime_base": meta["runtime_base"], "runtime_end": meta["runtime_end"]}
                if "runtime_base" in meta
                else {}
            ),
        ),
        memory=meta.get("memory", {}),
        globals=meta.get("globals", []),
        files={},
        tolerance=tolerance,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        link_units=sorted(link_units),
        unreplayable=(
            kinfo.get("unreplayable")
            or meta.get("unreplayable")
            or _foreign_memory(meta, kinfo)
            or _holds_system_pointers(os.path.join(cdir, "pre.bin"), meta)
            or _leaves_allocations(os.path.join(cdir, "post.bin"), meta)
        ),
        bitcode_args=tu.get("bitcode_args", []),
        selection=selection,
    )
    existing = _existing(workspace, ident, final)
    if existing is not None:
        # The same call recorded again (the same memory, arguments and code): it now belongs
        # to the newest run and its source tree, where its place among the kernel's calls
        # is counted (a sequence: recorded_calls).
        if run_key(existing) != run_key(capture):
            existing = replace(capture, files=existing.files, created=existing.created, headers=existing.headers)
            write_atomic(os.path.join(final, "capture.json"), json.dumps(existing.to_json(), indent=1))
        elif existing.selection != capture.selection:  # picked again, for another stratum
            existing = replace(existing, selection=capture.selection)
            write_atomic(os.path.join(final, "capture.json"), json.dumps(existing.to_json(), indent=1))
        return existing
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=workspace.captures_dir)
    shutil.copyfile(module, os.path.join(tmp, "module.bc"))
    for name in ("pre.bin", "post.bin"):
        shutil.move(os.path.join(cdir, name), os.path.join(tmp, name))
    for src in glob.glob(os.path.join(meta["tu_dir"], "source.*")):
        shutil.copyfile(src, os.path.join(tmp, os.path.basename(src)))
    capture.headers = _keep_headers(capture, meta["tu_dir"], tmp)
    if link_units:
        os.makedirs(os.path.join(tmp, "units"))
    for name, path in link_units.items():
        shutil.copyfile(path, os.path.join(tmp, name))
    for name in list(CAPTURE_FILES) + capture.link_units:
        capture.files[name] = {"size": os.path.getsize(os.path.join(tmp, name)), "sha256": digests[name]}
    for src in glob.glob(os.path.join(tmp, "source.*")):  # (checked on load as the rest: capture.py)
        name = os.path.basename(src)
        capture.files[name] = {"size": os.path.getsize(src), "sha256": sha256_file(src)}
    with open(os.path.join(tmp, "capture.json"), "w") as f:
        json.dump(capture.to_json(), f, indent=1)
    os.rename(tmp, final)
    return capture


def _existing(workspace, ident, final):
    """The capture already in ``final`` (the same call recorded before), or None: also where
    what is there does not read or verify (a torn capture.json, a cut module.bc), which is
    set aside as ``.corrupt-<id>-<time>`` and said in one line, so that this recording takes
    its place."""
    if not os.path.lexists(final):
        return None
    try:
        return load_capture(workspace, ident)
    except R3Error as err:
        aside = os.path.join(workspace.captures_dir, ".corrupt-%s-%d" % (ident, int(time.time())))
        os.rename(final, aside)
        warn("warning: capture %s was corrupt (%s): recorded again; the old one is in %s" % (ident, err, aside))
        return None


def _keep_headers(capture, tu_dir, folder):
    """The unit's own headers kept in capture ``folder`` (``record.headers``): listed once
    per unit (in its tu folder, whose copies the unit's other captures link to); None when
    the unit does not preprocess here (as for a capture from before they were kept)."""
    from ..replay.source import unit_flags

    listed = os.path.join(tu_dir, "headers.json")
    try:
        with open(listed) as f:
            paths = json.load(f)
    except (OSError, ValueError):
        try:
            paths = sorted(
                headers.closure(
                    capture.compile_command[0], unit_flags(capture), capture.source_file, capture.compile_dir
                )
            )
            headers.keep(paths, tu_dir)
        except (headers.ClosureError, OSError):
            paths = None
        write_atomic(listed, json.dumps(paths))
    if paths is None:
        return None
    try:
        return headers.keep(paths, folder, like=tu_dir)
    except OSError:  # (a header gone since: the tree is needed, as before)
        return None


def _foreign_memory(meta, kinfo):
    """Why the capture cannot replay because a pointer argument points into memory no
    image holds (the runtime's "foreign" mappings: mmap'ed shared memory, another thread's
    stack, a library's own maps), or None. Replay would find nothing at that address."""
    params = kinfo.get("param_types") or []
    for f in meta.get("foreign", []):
        if 0 <= f["arg"] < len(params) and params[f["arg"]] != "ptr":
            continue  # an integer that looks like an address
        how = "its argument %d points into" % (f["arg"] + 1) if f["arg"] >= 0 else "it reaches"
        return (
            "%s %s-%s (%s %s), memory the capture does not hold (mapped outside the record runtime's "
            "heap: shared or at a fixed address, or by a library); replay would not find it"
            % (how, f["lo"], f["hi"], f.get("perms", "?"), f.get("name") or "anonymous")
        )
    return None


def _pointers_into(buf, base, ranges):
    """How many aligned 8-byte words of ``buf`` (at address ``base``) lie in one of the
    sorted, disjoint [lo, hi) ``ranges``."""
    import numpy as np

    los = np.array([lo for lo, _ in ranges], dtype=np.uint64)
    his = np.array([hi for _, hi in ranges], dtype=np.uint64)
    skip = (-base) % 8
    n = (len(buf) - skip) // 8
    if n <= 0:
        return 0
    words = np.frombuffer(buf, dtype="<u8", count=n, offset=skip)
    i = np.searchsorted(los, words, side="right").astype(np.int64) - 1
    return int(np.count_nonzero((i >= 0) & (words < his[np.maximum(i, 0)])))


def _image_pointers_into(path, ranges, skip=()):
    """Words in a memory image's heap, globals and stack that point into ``ranges``; heap
    regions starting in a ``skip`` range are left out."""
    found = 0
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as image:
        view = memoryview(image)
        for r in read_regions(path):
            if r.path or r.kind not in (KIND_HEAP, KIND_GLOBAL, KIND_STACK):
                continue  # unchanged bytes (held by pre.bin), or never compared
            if r.kind == KIND_HEAP and any(lo <= r.addr < hi for lo, hi in skip):
                continue
            found += _pointers_into(view[r.offset : r.offset + r.size], r.addr, ranges)
        view.release()
    return found


def _holds_system_pointers(pre_path, meta):
    """Why a whole-heap capture cannot replay because its memory points into the
    application's system-served mappings (shared memory: runtime/pages.c, sys_add), or None. Page
    tracking finds what a kernel reaches (meta "foreign"); a whole-heap capture has only its
    pointers to go by, and a kernel given data holding them may follow them."""
    maps = sorted((int(m["lo"], 16), int(m["hi"], 16), m.get("perms", "?")) for m in meta.get("system_maps", []))
    maps = [m for i, m in enumerate(maps) if not i or m[0] >= maps[i - 1][1]]  # disjoint
    if not maps:
        return None
    ranges = [(lo, hi) for lo, hi, _ in maps]
    found = _image_pointers_into(pre_path, ranges)
    found += sum(_pointers_into(int(a, 16).to_bytes(8, "little"), 0, ranges) for a in meta.get("args", []))
    if not found:
        return None
    return (
        "its memory holds %d pointer(s) into memory the capture does not hold (%s: mapped outside the record "
        "runtime's heap, shared or at a fixed address); replay would not find it"
        % (found, ", ".join("0x%x-0x%x (%s)" % m for m in maps))
    )


def _leaves_allocations(post_path, meta):
    """Why the capture cannot replay because the kernel hands back memory it allocated, or None.

    The runtime lists the blocks allocated during the call and still live ("left", address
    ranges: blocks next to each other are one range). Replay's
    allocator puts them elsewhere, so a pointer to one in memory the caller sees (a returned
    struct, a field of the caller's data, the return value) cannot match the recording. The
    blocks' own contents are never compared; a kernel that only leaves them (a cache it keeps)
    replays as any other."""
    memory = meta.get("memory", {})
    if memory.get("left_listed") is False and memory.get("left_blocks"):
        return (
            "it leaves %d block(s) it allocated live after the call, and the recording could not list them "
            "all to check the caller's pointers into them" % memory["left_blocks"]
        )
    left = sorted((lo, lo + size) for lo, size in memory.get("left", []))
    if not left:
        return None
    found = _pointers_into(bytes.fromhex(meta["ret"]), 0, left) if meta.get("ret") else 0
    found += _image_pointers_into(post_path, left, skip=left)
    if not found:
        return None
    return (
        "it leaves %d pointer(s) to memory it allocated (%d block(s), %d bytes, still live after the call) "
        "where its caller reads them; replay allocates those blocks elsewhere, so the pointers cannot match "
        "the recording" % (found, meta["memory"].get("left_blocks", len(left)), meta["memory"].get("left_bytes", 0))
    )

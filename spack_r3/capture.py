"""The capture store: turn what a record run wrote into content-addressed captures,
and load them back, refusing anything truncated or corrupt.

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
from dataclasses import dataclass, replace

from . import cxxnames
from .data import Capture, FileDigest
from .errors import CaptureError
from .fileutil import sha256_file, write_atomic
from .memimage import KIND_GLOBAL, KIND_HEAP, KIND_STACK, read_regions
from .record.libstate import unreplayable_reason

CAPTURE_FILES = ("module.bc", "pre.bin", "post.bin")


def _host_target():
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    target = {"cpu": llvm.get_host_cpu_name(), "features": llvm.get_host_cpu_features().flatten()}
    try:
        import archspec.cpu

        target["microarch"] = archspec.cpu.host().name
    except Exception:  # archspec cannot name every CPU
        target["microarch"] = None
    return target


# A process whose profiler signalled fewer times than this keeps its timed shares. The
# signals are the samples (one may carry several ticks: runtime/profiler.c, g_prof_events), and a
# share from n of them is off by up to 0.5/sqrt(n): 2.5% at 400. Fewer made the dense
# demo's matrix product and covariance 91% and 12% of its run from 33 samples, where
# their timed times (27 ms calls, timed without a loss) were 82% and 12%.
MIN_SAMPLE_EVENTS = 400


def load_profiles(record_dir, min_events=MIN_SAMPLE_EVENTS):
    """Hotness from every process of a run: {(tu_dir, kernel): stats}, app seconds (the
    time the run took less the time it spent taking snapshots, which the application
    without probes would not spend: shares of the run are shares of that).

    ``main_ns`` is the kernel's own time on the main thread: from the runtime's profiler
    ticks where the process had enough samples (timing a short call inflates it: runtime/profiler.c,
    prof_tick), else its timed self time there. ``main_outer_ns``: the main thread's time
    with this kernel the outermost recorded one on the stack (its inclusive time, less
    its calls from other kernels), from the ticks or else timed; ``top_ns``: the same
    timed, summed over threads. ``on_main``: called on the main thread. ``min_events``:
    the fewest profiler samples a process's ticks are used from."""
    stats, app_ns = {}, 0
    for prof in _profiles(record_dir):
        app_ns = max(app_ns, prof.get("app_ns", 0) - prof.get("paused_ns", 0))
        tick_ns = prof.get("sample_ns", 0)
        ticked = prof.get("main_sample_events", 0) >= min_events  # (none from older runtimes: timed)
        for k in prof.get("kernels", []):
            key = (k["tu_dir"], k["name"])
            s = stats.setdefault(key, {"calls": 0, "total_ns": 0, "self_ns": 0, "main_self_ns": 0, "captured": 0,
                                       "main_top_calls": 0, "top_ns": 0, "main_ns": 0, "main_outer_ns": 0,
                                       "on_main": False})
            for field in ("calls", "total_ns", "self_ns", "main_self_ns", "captured", "main_top_calls", "top_ns"):
                s[field] += k.get(field, 0)
            on_main = k.get("main_self_ns", 0) > 0 or k.get("main_samples", 0) > 0
            s["on_main"] = s["on_main"] or on_main
            sampled = ticked and on_main
            s["main_ns"] += k.get("main_samples", 0) * tick_ns if sampled else k.get("main_self_ns", 0)
            s["main_outer_ns"] += k.get("main_outer_samples", 0) * tick_ns if sampled else k.get("main_top_ns", 0)
    return stats, app_ns / 1e9


def tuned_shares(record_dir, kernels, min_events=MIN_SAMPLE_EVENTS):
    """{kernel: share of the run} for the set ``kernels`` (symbol names) as a build that
    tunes them runs them: each one's time on the main thread with none of the set below it
    on the stack, its callees included (they run as its own copies, and replay timed it
    with them), from the run's calling-context trees (runtime/probes.c, cct). These shares add up to
    at most the run. Kernels the trees do not hold (never called on the main thread) are
    left out; {} where a process's tree is missing or incomplete (the caller keeps the
    kernels' own shares)."""
    wanted, totals, app_ns = set(kernels), {}, 0
    for prof in _profiles(record_dir):
        if not prof.get("cct_complete") or not prof.get("cct"):
            return {}
        app_ns = max(app_ns, prof.get("app_ns", 0) - prof.get("paused_ns", 0))
        names = {k["id"]: k["name"] for k in prof.get("kernels", []) if k.get("id", -1) >= 0}
        tick_ns = prof.get("sample_ns", 0) if prof.get("main_sample_events", 0) >= min_events else 0
        nodes = prof["cct"]  # [parent, kernel id, ns, samples]; a node comes after its parent
        samples = [n[3] for n in nodes]
        for i in range(len(nodes) - 1, 0, -1):
            samples[nodes[i][0]] += samples[i]
        below = [False] * len(nodes)  # a kernel of the set is at or below this node on the stack
        for i in range(1, len(nodes)):
            parent, name = nodes[i][0], names.get(nodes[i][1])
            if name in wanted:  # (0 where always called by another of the set)
                totals[name] = totals.get(name, 0) + (0 if below[parent] else
                                                      samples[i] * tick_ns if tick_ns else nodes[i][2])
            below[i] = below[parent] or name in wanted
    if not app_ns:
        return {}
    return {name: min(1.0, ns / app_ns) for name, ns in totals.items()}


def _profiles(record_dir):
    """The readable profile.<pid>.json of a record run, one per process."""
    out = []
    for path in sorted(glob.glob(os.path.join(record_dir, "profile.*.json"))):
        try:
            with open(path) as f:
                out.append(json.load(f))
        except (OSError, ValueError):
            continue
    return out


def share_of(stats, app_s):
    """A kernel's share of the application's run time. Self time summed over threads would
    count a function called from every thread of a parallel loop once per thread (shares
    over 100%); the main thread's own time in it is what the run waits for, as the main
    thread works in every parallel region too. Kernels never called there: their self time
    summed over threads."""
    if not app_s:
        return None
    ns = stats["main_ns"] if stats["on_main"] else stats["self_ns"]
    return min(1.0, ns / 1e9 / app_s)


def outer_share_of(stats, app_s):
    """A kernel's share of the run as the outermost recorded kernel: its calls' inclusive
    time, less the calls other recorded kernels make. In a run where only the tuned kernels
    are recorded, these shares add up without counting a nested one twice, and each is the
    time its kernel's own tuned build (its callees as its copies) changes. Kernels never
    called on the main thread: their top calls' time summed over threads."""
    if not app_s:
        return None
    ns = stats["main_outer_ns"] if stats["on_main"] else stats["top_ns"]
    return min(1.0, ns / 1e9 / app_s)


def ingest(record_dir, workspace, tolerance=None):
    """Move every finished capture of a record run into the workspace.

    Returns the list of Capture objects written (ids are content hashes, so
    recording the same thing twice yields the same id).
    """
    failed = write_failures(record_dir)
    if failed:
        raise CaptureError(failed[0] + (" (and %d more)" % (len(failed) - 1) if len(failed) > 1 else "")
                           + "; the run's captures stay in %s" % record_dir)
    stats, app_s = load_profiles(record_dir)
    target = _host_target()
    exporters = _exporters(record_dir)
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
        written.append(_write_capture(workspace, cdir, meta, tu, kinfo, units, stats, app_s, target, tolerance,
                                      run=os.path.abspath(record_dir)))
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
        name = os.path.basename(path)[len(ERROR_MARK):]
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
            out.append("the profile of process %s could not be written: %s (%s)" % (rest.rsplit("-", 1)[-1], reason,
                                                                                   where))
        else:
            out.append("capture of %s could not be written: %s (%s)" % (info.get("kernel") or kernel, reason, where))
    return out


def _exporters(record_dir):
    """Function name -> (unit directory, what it calls elsewhere), over a run's units."""
    index = {}
    for path in sorted(glob.glob(os.path.join(record_dir, "tus", "*", "tu.json"))):
        try:
            with open(path) as f:
                exports = json.load(f).get("exports", {})
        except (OSError, ValueError):
            continue
        for name, calls in exports.items():
            index.setdefault(name, (os.path.dirname(path), calls))
    return index


def _link_units(kinfo, own_unit, exporters):
    """The other units defining functions the kernel calls, transitively."""
    units, todo, seen = set(), list(kinfo.get("calls", [])), set()
    while todo:
        name = todo.pop()
        if name in seen or name not in exporters:
            continue  # already followed, or a library function
        seen.add(name)
        unit, calls = exporters[name]
        if unit != own_unit:
            units.add(unit)
        todo.extend(calls)
    return sorted(units)


def _unreplayable_through(kinfo, exporters):
    """Why the kernel cannot replay because of what its callees in other units call
    (its own unit's calls were judged at record time, see ``record.libstate``)."""
    library, todo, seen = set(), list(kinfo.get("calls", [])), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in exporters:
            todo.extend(exporters[name][1])
        else:
            library.add(name)
    return unreplayable_reason(library)


def _write_capture(workspace, cdir, meta, tu, kinfo, units, stats, app_s, target, tolerance, run):
    module = os.path.join(meta["tu_dir"], "module.bc")
    digests = {"module.bc": sha256_file(module)}
    for name in ("pre.bin", "post.bin"):
        digests[name] = sha256_file(os.path.join(cdir, name))
    link_units = {"units/%s.bc" % os.path.basename(u): os.path.join(u, "module.bc") for u in units}
    for name, path in link_units.items():
        digests[name] = sha256_file(path)
    ident = hashlib.sha256(json.dumps(
        [meta["kernel"], digests, meta["args"], meta.get("byval")], sort_keys=True).encode()).hexdigest()[:12]
    final = workspace.capture_dir(ident)
    s = stats.get((meta["tu_dir"], meta["kernel"]), {})
    capture = Capture(
        id=ident,
        kernel=meta["kernel"],
        source_file=tu["source_file"],
        compile_command=tu["compile_command"],
        compile_dir=tu["compile_dir"],
        signature={"ret": kinfo["ret_type"], "ret_size": kinfo["ret_size"],
                   "params": kinfo["param_types"], "byval": kinfo["byval_sizes"]},
        args=meta["args"],
        byval_data=meta.get("byval") or [None] * len(meta["args"]),
        ret=meta.get("ret"),
        # (an offload launch adds its backend and geometry: record/runtime/r3offload.c)
        launch=dict({"threads": meta.get("threads", 1), "openmp": kinfo.get("openmp", False)},
                    **meta.get("launch", {})),
        target=dict(target, triple=tu.get("triple")),
        app={"app_s": app_s, "calls": s.get("calls", 0), "total_s": s.get("total_ns", 0) / 1e9,
             "self_s": s.get("self_ns", 0) / 1e9,
             "share": share_of(s, app_s),
             # calls with no recorded kernel below them on the main thread's stack
             "top_calls": s.get("main_top_calls", 0),
             "run": run},  # which captures ran beside it (replay.cachestate)
        instance=meta["instance"],
        instance_s=meta.get("instance_ns", 0) / 1e9,
        arena=dict({"base": meta["arena_base"], "end": meta["arena_end"]},
                   **({"runtime_base": meta["runtime_base"], "runtime_end": meta["runtime_end"]}
                      if "runtime_base" in meta else {})),
        memory=meta.get("memory", {}),
        globals=meta.get("globals", []),
        files={},
        tolerance=tolerance,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        link_units=sorted(link_units),
        unreplayable=(kinfo.get("unreplayable") or meta.get("unreplayable") or _foreign_memory(meta, kinfo)
                      or _holds_system_pointers(os.path.join(cdir, "pre.bin"), meta)
                      or _leaves_allocations(os.path.join(cdir, "post.bin"), meta)),
        bitcode_args=tu.get("bitcode_args", []),
    )
    if os.path.exists(os.path.join(final, "capture.json")):
        # The same call recorded again (the same memory, arguments and code): it now belongs
        # to the newest run and its source tree, where its place among the kernel's calls
        # is counted (a sequence: recorded_calls).
        existing = load_capture(workspace, ident)
        if run_key(existing) != run_key(capture):
            existing = replace(capture, files=existing.files, created=existing.created)
            write_atomic(os.path.join(final, "capture.json"), json.dumps(existing.to_json(), indent=1))
        return existing
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=workspace.captures_dir)
    shutil.copyfile(module, os.path.join(tmp, "module.bc"))
    for name in ("pre.bin", "post.bin"):
        shutil.move(os.path.join(cdir, name), os.path.join(tmp, name))
    for src in glob.glob(os.path.join(meta["tu_dir"], "source.*")):
        shutil.copyfile(src, os.path.join(tmp, os.path.basename(src)))
    if link_units:
        os.makedirs(os.path.join(tmp, "units"))
    for name, path in link_units.items():
        shutil.copyfile(path, os.path.join(tmp, name))
    for name in list(CAPTURE_FILES) + capture.link_units:
        capture.files[name] = {"size": os.path.getsize(os.path.join(tmp, name)), "sha256": digests[name]}
    with open(os.path.join(tmp, "capture.json"), "w") as f:
        json.dump(capture.to_json(), f, indent=1)
    os.rename(tmp, final)
    return capture


def _foreign_memory(meta, kinfo):
    """Why the capture cannot replay because a pointer argument points into memory no
    image holds (the runtime's "foreign" mappings: mmap'ed shared memory, another thread's
    stack, a library's own maps), or None. Replay would find nothing at that address."""
    params = kinfo.get("param_types") or []
    for f in meta.get("foreign", []):
        if 0 <= f["arg"] < len(params) and params[f["arg"]] != "ptr":
            continue  # an integer that looks like an address
        how = "its argument %d points into" % (f["arg"] + 1) if f["arg"] >= 0 else "it reaches"
        return ("%s %s-%s (%s %s), memory the capture does not hold (mapped outside the record runtime's "
                "heap: shared or at a fixed address, or by a library); replay would not find it"
                % (how, f["lo"], f["hi"], f.get("perms", "?"), f.get("name") or "anonymous"))
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
            found += _pointers_into(view[r.offset:r.offset + r.size], r.addr, ranges)
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
    return ("its memory holds %d pointer(s) into memory the capture does not hold (%s: mapped outside the record "
            "runtime's heap, shared or at a fixed address); replay would not find it"
            % (found, ", ".join("0x%x-0x%x (%s)" % m for m in maps)))


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
        return ("it leaves %d block(s) it allocated live after the call, and the recording could not list them "
                "all to check the caller's pointers into them" % memory["left_blocks"])
    left = sorted((lo, lo + size) for lo, size in memory.get("left", []))
    if not left:
        return None
    found = _pointers_into(bytes.fromhex(meta["ret"]), 0, left) if meta.get("ret") else 0
    found += _image_pointers_into(post_path, left, skip=left)
    if not found:
        return None
    return ("it leaves %d pointer(s) to memory it allocated (%d block(s), %d bytes, still live after the call) "
            "where its caller reads them; replay allocates those blocks elsewhere, so the pointers cannot match "
            "the recording" % (found, meta["memory"].get("left_blocks", len(left)),
                               meta["memory"].get("left_bytes", 0)))


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
    for name, kind in (("id", str), ("kernel", str), ("source_file", str), ("instance", int), ("app", dict),
                       ("files", dict)):
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
                reason = ("capture.json is not JSON: %s" % err if isinstance(err, json.JSONDecodeError)
                          else "capture.json: %s" % (err.strerror if isinstance(err, OSError) else err))
                corrupt.append(CorruptCapture(os.path.basename(os.path.dirname(path)), reason))
    return out


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
    same = [c for c in list_captures(workspace)
            if c.kernel == capture.kernel and run_key(c) == run_key(capture)
            and (c.compile_dir, c.source_file) == (capture.compile_dir, capture.source_file)]
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
            raise CaptureError("'%s' was recorded in %d runs; name the first call of the one to replay: %s" % (
                ref, len(runs), ", ".join("%s (%d call%s)" % (calls[0].id, len(calls), "" if len(calls) == 1 else "s")
                                          for calls in runs.values())))
        matches = [calls[0] for calls in runs.values()]
    if len(matches) == 1:
        return workspace.capture_dir(matches[0].id)
    if not matches:
        raise CaptureError("unknown capture '%s' in %s (see: r3 kernels)" % (ref, workspace.root))
    raise CaptureError("'%s' is ambiguous: %s" % (ref, ", ".join(
        "%s (%s)" % (c.id, cxxnames.display(c.kernel)) for c in matches)))


def load_capture_dir(path, verify_digests=True):
    """Load and check a capture directory; CaptureError if anything is off."""
    meta_path = os.path.join(path, "capture.json")
    try:
        with open(meta_path) as f:
            capture = _check_capture(json.load(f))
    except FileNotFoundError:
        raise CaptureError("capture %s has no capture.json" % path)
    except (ValueError, TypeError) as err:
        raise CaptureError("capture %s: capture.json is corrupt (%s)" % (path, err))
    for name in list(CAPTURE_FILES) + capture.link_units:
        fpath = os.path.join(path, name)
        want = capture.files.get(name)
        if not want or not os.path.exists(fpath):
            raise CaptureError("capture %s: %s is missing" % (capture.id, name))
        want = FileDigest(**want)
        size = os.path.getsize(fpath)
        if size != want.size:
            raise CaptureError("capture %s: %s is truncated or corrupt (%d bytes, recorded %d)"
                               % (capture.id, name, size, want.size))
        if verify_digests and sha256_file(fpath) != want.sha256:
            raise CaptureError("capture %s: %s is corrupt (checksum mismatch)" % (capture.id, name))
    for name in ("pre.bin", "post.bin"):
        read_regions(os.path.join(path, name))  # raises CaptureError on a bad image
    return capture


def load_capture(workspace, ref, verify_digests=True):
    return load_capture_dir(resolve(workspace, ref), verify_digests)

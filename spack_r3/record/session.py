"""``r3 record``: build a source tree with the record launcher, run it, keep the captures.

The user's tree is never written to: it is copied into the workspace's run
directory and built there.
"""

import datetime
import glob
import json
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from typing import List

from .. import cxxnames, sourcetree
from ..capture import load_capture_dir
from ..childoutput import run_logged, short
from ..errors import R3Error
from ..fileutil import write_atomic
from ..machine import cache_bytes
from ..toolchain import clang_release, clangxx_beside, find_clang, flang_beside
from .offload import region_key
from . import inputs, instances, profiles
from .ingest import ingest
from .instances import COVER


RECORD_JSON = "record.json"

# --instances auto: each kernel's calls are captured until the pages they touch together
# reach half this machine's last-level cache (or every page of the blocks they touch), at
# most AUTO_MOST_CALLS of them, so that a sequence of them (replay/sequence.py) outgrows the
# caches and the TLB as the application's calls do (see enough_calls in runtime/capture.c).
# Half, from XSBench's lookups: calls covering half the LLC or all of it replayed nearer
# the application's speedup than a few calls did, which replayed well above it.
AUTO = "auto"
AUTO_MOST_CALLS = 256
AUTO_LLC_SHARE = 0.5
AUTO_BYTES_UNKNOWN_LLC = 16 << 20


def parse_instances(text):
    """``--instances``: a count of calls (the first ones), ``auto`` (the first ones, until
    their pages fill the caches), or ``cover`` (calls picked where the time goes:
    record/instances.py)."""
    if str(text) in (AUTO, COVER):
        return str(text)
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise R3Error("--instances takes a number of calls (at least 1), 'auto' or 'cover', not %r" % text)
    return n


def instances_environment(instances):
    """R3_INSTANCES (and with ``auto``, R3_INSTANCE_BYTES) for the record runtime."""
    if instances == AUTO:  # R3_INSTANCE_BYTES set by the user: the bytes to reach instead
        llc = cache_bytes()
        return {
            "R3_INSTANCES": str(AUTO_MOST_CALLS),
            "R3_INSTANCE_BYTES": os.environ.get("R3_INSTANCE_BYTES")
            or str(int(llc * AUTO_LLC_SHARE) if llc else AUTO_BYTES_UNKNOWN_LLC),
        }
    if instances == COVER:  # the calls named by R3_CAPTURE_CALLS (run_and_ingest), else the first
        return {"R3_INSTANCES": "1", "R3_INSTANCE_BYTES": ""}
    return {"R3_INSTANCES": str(parse_instances(instances)), "R3_INSTANCE_BYTES": ""}


@dataclass
class RecordResult:
    run_dir: str
    captures: List = field(default_factory=list)
    hotness: List = field(default_factory=list)  # dicts: kernel, source, calls, total_s, self_s, share
    app_s: float = 0.0


def launcher_command():
    """How to invoke ``r3-record`` from a build (the console script beside our Python)."""
    script = os.path.join(os.path.dirname(sys.executable), "r3-record")
    if os.access(script, os.X_OK):
        return shlex.quote(script)
    found = shutil.which("r3-record")
    if found:
        return shlex.quote(found)
    return "%s -m spack_r3.record.launcher" % shlex.quote(sys.executable)


def _run_logged(cmd, cwd, env, log_path, what, timeout=None, echo=None):
    """Run a shell command, its output into ``log_path`` (and, with ``echo``, shown as it
    comes). A timeout kills the command's whole process group, not just the shell. Output
    is streamed in bounded chunks and only its head and tail stay in memory, for the
    failure's one line (``childoutput``): a run that prints gigabytes, or one endless line,
    costs no more memory than one that prints nothing."""
    done = run_logged(cmd, log_path, cwd=cwd, env=env, timeout=timeout, echo=echo)
    if done.returncode is None:
        raise R3Error("%s timed out after %ss (log: %s)" % (what, timeout, log_path))
    if done.returncode != 0:
        if "undefined reference to `__r3_" in done.output:
            raise R3Error(
                "%s linked without the record runtime: links must go through r3-record too "
                "(CMake: -DCMAKE_C_LINKER_LAUNCHER=$R3_LAUNCHER, likewise CXX) (log: %s)" % (what, log_path)
            )
        raise R3Error(
            "%s failed with exit code %d: %s (log: %s)" % (what, done.returncode, first_errors(done.output), log_path)
        )


_DIAGNOSTIC = re.compile(
    r"^\S+:\d+(:\d+)?: (fatal )?error: |^(clang|gcc|cc|ld|ld\.lld)(-\d+)?: error: |"
    r"^\S*\bld: .*undefined reference"
)


def first_errors(text, most=2):
    """What a failed command's output says first went wrong: its compiler's or linker's
    first error lines (make's last line only names the target), else its last line; each
    line cut to a message's length. ``text``: the output, or its head and tail
    (``childoutput.Kept``, ``read_excerpt``)."""
    lines = [l.strip() for l in text.splitlines() if l.strip() and not _LEFT_OUT.match(l)]
    errors = [l for l in lines if _DIAGNOSTIC.search(l)]
    if errors:
        return " | ".join(short(l) for l in errors[:most])
    worded = [l for l in lines if re.search(r"[A-Za-z]{3}", l)]  # not a rule of ====
    return short((worded or lines or ["(no output)"])[-1])


_LEFT_OUT = re.compile(r"^\[\.\.\. \d+ bytes left out \.\.\.\]$")  # (childoutput's marker)


TARGETS = {"native": "-march=native", "as-built": ""}


def _check_requested(kernels, record_dir, say, build_log):
    """(the symbols that the --kernel names stand for, every symbol the build instrumented).

    A name is a symbol or a C++ name (see ``cxxnames``), or an OpenMP target region's
    function and line (``jacobi_step_l8``, as ``r3 tune --kernel`` takes it: its full name
    holds its source file's ids). One that matched nothing is an error if no name matched,
    else a warning; a qualified C++ name that fits several overloads is an error that lists them."""
    found = set()
    for path in glob.glob(os.path.join(record_dir, "tus", "*", "tu.json")):
        with open(path) as f:
            found |= {k["name"] for k in json.load(f)["kernels"]}
    symbols, missing = set(), []
    for ref in kernels:
        _, matched = cxxnames.best_matches(ref, found)
        if not matched:
            matched = [n for n in found if region_key(n) == ref != n]
        if len(matched) > 1:
            raise R3Error(
                "--kernel %s is ambiguous: %s (give the parameter list or the mangled name)"
                % (ref, "; ".join("%s = %s" % (cxxnames.tidy(m), m) for m in matched))
            )
        symbols |= set(matched)
        if not matched:
            missing.append(ref)
    if missing and len(missing) == len(kernels):
        raise R3Error("no function named %s was compiled through r3-record (see %s)" % (", ".join(missing), build_log))
    if missing:
        say("warning: no function named %s was compiled; recording the others" % ", ".join(missing))
    return symbols, found


def _probed_functions(record_dir):
    """The functions the record build compiled with probes (its units' tu.json)."""
    names = set()
    for path in glob.glob(os.path.join(record_dir, "tus", "*", "tu.json")):
        try:
            with open(path) as f:
                names |= {k["name"] for k in json.load(f).get("kernels", [])}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return names


def _profiling_run(run, tree, env, run_dir, timeout, say, output, why):
    """A first run with probes only (no captures), each kernel's calls logged: its folder."""
    say("profiling run (no captures) %s: %s" % (why, run))
    profile_dir = os.path.join(run_dir, "profile")
    _run_logged(
        run,
        tree,
        dict(env, R3_RECORD_DIR=profile_dir, R3_CAPTURE="none", **{instances.LOG_ENV: "1"}),
        os.path.join(run_dir, "profile.log"),
        "the application run",  # (profiled: its log says which run)
        timeout,
        echo=output,
    )
    return profile_dir


def _hottest(profile_dir, top):
    """The ``top`` kernels of a profiling run by share."""
    stats, app_s = profiles.load_profiles(profile_dir)
    ranked = sorted(stats.items(), key=lambda item: (-(profiles.share_of(item[1], app_s) or 0), -item[1]["self_ns"]))
    return [name for (_, name), _ in ranked[:top]]


def _pick_calls(profile_dir, run_dir, say):
    """Each kernel's calls to capture, from a profiling run's call logs (record/instances.py);
    written to the run's ``instances.json``. Returns ``R3_CAPTURE_CALLS``."""
    calls = instances.load_calls(profile_dir)
    driving = profiles.drivers(profile_dir, [name for _, name in calls])
    for name in sorted(driving):  # named with no call: the runtime captures none of it
        say("not capturing %s: most of its time is in kernels it calls, captured instead" % cxxnames.display(name))
    picks = {key: [] if key[1] in driving else kc.picks() for key, kc in calls.items()}
    instances.write_selection(run_dir, calls, picks)
    several = sum(len(p) > 1 for p in picks.values())
    say(
        "picked the calls to capture where each kernel's time goes: %d kernel(s), %d of them "
        "with calls of different cost (several calls each)" % (len(picks), several)
    )
    return instances.capture_calls_env(picks)


def record(
    workspace,
    source,
    run,
    build=None,
    kernels=(),
    instances=1,
    tolerance=None,
    timeout=None,
    target="native",
    top=None,
    progress=None,
    output=None,
):
    """Build ``source`` with probes, run ``run`` in it, ingest captures. Returns RecordResult.

    ``progress`` receives one line per step, ``output`` each line the application prints.
    """
    say = progress or (lambda msg: None)
    source = os.path.abspath(source)
    if not os.path.isdir(source):
        raise R3Error("source directory %s does not exist" % source)
    parse_instances(instances)
    if top is not None and top < 1:
        raise R3Error("--top must be at least 1")
    if target not in TARGETS:
        raise R3Error("unknown --target %s (choose: %s)" % (target, ", ".join(TARGETS)))
    clang = find_clang()
    workspace.ensure()
    request = _request(workspace, source, run, build, kernels, instances, tolerance, target)
    run_dir = new_run_dir(workspace, os.path.basename(source.rstrip("/")))
    tree = os.path.join(run_dir, "src")
    record_dir = os.path.join(run_dir, "record")
    say("copying %s to %s" % (source, tree))
    for link in sourcetree.copy(source, tree, ignore=_copy_filter(workspace.root)):
        say("warning: left out %s: a link out of the tree to nothing" % link)
    os.makedirs(record_dir)
    env = record_environment(record_dir, clang, kernels, instances, target)
    build = build or default_build(env)
    say("building with probes: %s" % build)
    _run_logged(build, tree, env, os.path.join(run_dir, "build.log"), "the record build")
    return run_and_ingest(
        workspace,
        request,
        run_dir,
        record_dir,
        env,
        run,
        tree,
        kernels=kernels,
        top=top,
        tolerance=tolerance,
        timeout=timeout,
        say=say,
        output=output,
    )


def default_build(env):
    """``make`` with the record launcher as its C compiler, and as its Fortran one
    where a flang of the record clang's version is installed."""
    fortran = " FC=%s F77=%s" % ((shlex.quote(env["R3_FC"]),) * 2) if env.get("R3_FC") else ""
    return "make CC=%s%s" % (shlex.quote(env["R3_CC"]), fortran)


def new_run_dir(workspace, label):
    """A fresh directory under the workspace's runs/ for one record."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    run_dir = os.path.join(workspace.runs_dir, "%s-%s" % (stamp, label))
    os.makedirs(run_dir)
    return run_dir


def record_environment(record_dir, clang, kernels=(), instances=1, target="native"):
    """The variables a record build and run need. What a --build command can use:
    $R3_CC / $R3_CXX (launcher + compiler, for Make), $R3_LAUNCHER and $R3_CLANG /
    $R3_CLANGXX (for CMAKE_<LANG>_COMPILER_LAUNCHER); $R3_FC and $R3_FLANG the same for
    Fortran, where a flang of the clang's version is installed."""
    launcher = launcher_command()
    cc = "%s %s" % (launcher, shlex.quote(clang))
    clangxx = clangxx_beside(clang) or clang
    flang = flang_beside(clang)
    fortran = dict(R3_FLANG=flang, R3_FC="%s %s" % (launcher, shlex.quote(flang))) if flang else {}
    return dict(
        os.environ,
        R3_RECORD_DIR=record_dir,
        R3_CC=cc,
        R3_CLANG=clang,
        R3_CLANGXX=clangxx,
        R3_LAUNCHER=launcher,
        R3_CXX="%s %s" % (launcher, shlex.quote(clangxx)),
        R3_KERNELS="\n".join(kernels),
        R3_CAPTURE="*",
        R3_TARGET_FLAGS=TARGETS[target],
        **fortran,
        **instances_environment(instances),
    )


def run_and_ingest(
    workspace,
    request,
    run_dir,
    record_dir,
    env,
    run,
    cwd,
    kernels=(),
    top=None,
    tolerance=None,
    timeout=None,
    say=None,
    output=None,
    build_log=None,
    own=(),
):
    """After a build with probes: run ``run`` in ``cwd``, ingest the captures, write
    record.json. Returns RecordResult. ``own``: directories besides ``run_dir`` that hold
    the build's own tree (a Spack record's build stage): what the build read outside them
    is kept by content (``inputs``), and the run is reused only while it is unchanged."""
    say = say or (lambda msg: None)
    build_log = build_log or os.path.join(run_dir, "build.log")
    env = dict(env)
    if kernels:
        meant, instrumented = _check_requested(kernels, record_dir, say, build_log)
        if meant != instrumented:
            # A unit instruments whatever a name may mean there (``saxpy`` is also a C++
            # overload's qualified name); what it means across units is captured.
            env["R3_CAPTURE"] = ",".join(sorted(meant))
    cover = request.get("instances") == COVER
    if top or cover:
        why = " and ".join(
            w
            for w in (
                "to find the %d hottest kernels" % top if top else "",
                "to log each kernel's calls" if cover else "",
            )
            if w
        )
        profile_dir = _profiling_run(run, cwd, env, run_dir, timeout, say, output, why)
        if top:
            env["R3_CAPTURE"] = ",".join(_hottest(profile_dir, top)) or "none"
        if cover:
            env[instances.ENV] = _pick_calls(profile_dir, run_dir, say)
    say("running: %s" % run)
    try:
        _run_logged(run, cwd, env, os.path.join(run_dir, "run.log"), "the application run", timeout, echo=output)
    except R3Error as err:
        # A run that failed computed something else than the application does (a failed
        # self-check, an abort, a timeout): its captures are no recording of it. They stay
        # in the run's directory for diagnosis, and no command lists or tunes them.
        raise R3Error("%s; its captures are not used (kept for diagnosis in %s)" % (err, record_dir))
    captures = ingest(record_dir, workspace, tolerance, selection=instances.read_selection(run_dir))
    probed = _probed_functions(record_dir)
    ran = glob.glob(os.path.join(record_dir, "profile.*.json"))
    if not ran and not probed:
        raise R3Error(
            "the application ran without the record runtime: its build did not compile and link "
            "through r3-record (Make must use $(CC); see --build) (log: %s)" % build_log
        )
    stats, app_s = profiles.load_profiles(record_dir)
    if not stats:
        run_log = os.path.join(run_dir, "run.log")
        if not probed:  # (the runtime ran: the build linked it, but compiled nothing to record)
            raise R3Error(
                "the run executed no recorded kernel: the build compiled no function with probes "
                "(none has a loop) (log: %s)" % build_log
            )
        # The build did its part: the run never reached what it built.
        raise R3Error(
            "the run executed no recorded kernel: the build was fine (%d function(s) compiled with "
            "probes), but %s; --run must run the program the build made, through the calls to "
            "record (log: %s)"
            % (
                len(probed),
                "no process of %r loaded the record runtime" % run if not ran else "%r called none of them" % run,
                run_log,
            )
        )
    by_kernel = {c.kernel: c for c in captures}
    hotness = []
    units = {}
    for (tu_dir, name), s in stats.items():
        unit = units.setdefault(tu_dir, _read_unit(tu_dir))
        hotness.append(
            {
                "kernel": name,
                "kernel_demangled": cxxnames.demangle(name),
                "source": os.path.basename(unit.get("source_file", "?")),
                "calls": s["calls"],
                "total_s": s["total_ns"] / 1e9,
                "self_s": s["self_ns"] / 1e9,
                "share": profiles.share_of(s, app_s),
                "capture": by_kernel[name].id if name in by_kernel else None,
                "not_captured": None
                if name in by_kernel
                else next((k.get("unreplayable") for k in unit.get("kernels", []) if k["name"] == name), None),
            }
        )
    hotness.sort(key=lambda h: (-(h["share"] or 0), -h["self_s"]))
    result = RecordResult(run_dir, captures, hotness, app_s)
    # What was recorded, and how: ``r3 tune`` reuses a run recorded the same way, from the
    # same files outside its tree (headers through -I/elsewhere, units compiled from there).
    write_atomic(
        os.path.join(run_dir, RECORD_JSON),
        json.dumps(
            {
                "request": request,
                "app_s": app_s,
                "hotness": hotness,
                "captures": [c.id for c in captures],
                inputs.KEY: inputs.outside_inputs(record_dir, [run_dir] + list(own)),
            },
            indent=1,
        ),
    )
    return result


# The environment a build reads its flags from: part of what a record is keyed on.
FLAG_VARIABLES = (
    "CC",
    "CXX",
    "FC",
    "F77",
    "CFLAGS",
    "CXXFLAGS",
    "CPPFLAGS",
    "LDFLAGS",
    "LDLIBS",
    "FFLAGS",
    "FCFLAGS",
    "OMP_NUM_THREADS",
)


def compiler_identity(clang):
    """The record compiler, as a record is keyed on it: its real path and full version."""
    return {"clang": os.path.realpath(clang), "version": clang_release(clang)}


def _request(workspace, source, run, build, kernels, instances, tolerance, target):
    """How a run was recorded, as record.json keeps it (``build`` as the user gave it):
    the tree by its content, the commands, the compiler and the flags the environment gives."""
    return {
        "source": os.path.abspath(source),
        "tree": sourcetree.digest(source, _copy_filter(workspace.root)),
        "run": run,
        "build": build,
        "kernels": sorted(kernels),
        "instances": instances,
        "tolerance": tolerance,
        "target": target,
        "compiler": compiler_identity(find_clang()),
        "environment": {k: os.environ[k] for k in FLAG_VARIABLES if k in os.environ},
    }


def previous_record(
    workspace, source, run, build=None, kernels=(), instances=1, tolerance=None, target="native", say=None
):
    """The latest run recorded with exactly these settings, from a tree with this content
    and the same compiler, whose captures are all still in the workspace and whose inputs
    outside the tree are unchanged (a RecordResult), or None. ``say`` gets one line naming
    the file when a run recorded this way is not reused because one changed."""
    request = _request(workspace, source, run, build, kernels, instances, tolerance, target)
    return find_record(workspace, lambda data: data.get("request") == request, check_inputs=True, say=say)


def stale_inputs(workspace, run_dir, data, captures):
    """Why the run's captures are no longer of the code a build makes now: a file its build
    read outside its tree ("PATH changed", "PATH is gone"; ``inputs``), or None. A run
    recorded before record.json kept them: the headers its captures name."""
    if inputs.KEY in data:
        return inputs.changed(data[inputs.KEY])
    return inputs.changed(inputs.capture_inputs(captures, [run_dir, workspace.spack_dir]))


def find_record(workspace, wanted, with_data=False, check_inputs=False, say=None):
    """The latest recorded run whose record.json satisfies ``wanted`` and whose captures
    are all still in the workspace: a RecordResult (with ``with_data``: and the record.json
    contents), or None. With ``check_inputs``, a run whose inputs outside its tree changed
    (``stale_inputs``) is passed over, and ``say`` told why in one line (the latest such run)."""
    told = False
    for path in sorted(glob.glob(os.path.join(workspace.runs_dir, "*", RECORD_JSON)), reverse=True):
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        if not wanted(data):
            continue
        captures = []
        for cid in data.get("captures", []):
            try:
                captures.append(load_capture_dir(workspace.capture_dir(cid), verify_digests=False))
            except R3Error:
                break
        else:
            run_dir = os.path.dirname(path)
            why = stale_inputs(workspace, run_dir, data, captures) if check_inputs else None
            if why:
                if say and not told:
                    say("recording again: %s since %s recorded it" % (why, run_dir))
                    told = True
                continue
            result = RecordResult(run_dir, captures, data.get("hotness", []), data.get("app_s", 0.0))
            return (result, data) if with_data else result
    return None


def _copy_filter(workspace_root):
    """What the copy of a source tree leaves out: VCS data, objects, and the workspace itself
    when it lies inside the tree (the copy would otherwise copy itself without end)."""
    patterns = shutil.ignore_patterns(".git", "*.o")
    inside = os.path.realpath(workspace_root)

    def ignore(directory, names):
        skip = set(patterns(directory, names))
        skip |= {n for n in names if os.path.realpath(os.path.join(directory, n)) == inside}
        return skip

    return ignore


def _read_unit(tu_dir):
    """A unit's record data (tu.json: source file, kernels and why any would not replay),
    or {} if it cannot be read."""
    try:
        with open(os.path.join(tu_dir, "tu.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}

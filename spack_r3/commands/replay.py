"""Replay one captured kernel under compiler pipelines, verify it and time it.

With one --pipeline it prints that replay; with several, a table that compares
them side by side (use --pairs for speedups measured against the
baseline: the kernel as its build compiled it).
"""

import json

from .. import backends, cxxnames
from ..capture import load_capture_dir, recorded_calls, resolve
from ..data import CACHE_STATES, WARM, Launch, Variant
from ..device.geometry import MOST_THREADS
from ..errors import R3Error
from ..compile.pipeline import format_spec, parse
from ..replay.server import TIMEOUT_S, ReplayServer
from ..report import seconds, table
from ..workspace import Workspace
from .common import (
    MOST_PAIRS,
    MOST_RUNS,
    MOST_TEAMS,
    add_json,
    add_timeout,
    add_tolerance,
    check_most,
    check_timeout,
    check_tolerance,
    thread_bound,
)

description = "replay a captured kernel in isolation"


def setup_parser(subparser):
    subparser.add_argument(
        "capture",
        help="capture id (or unique prefix, or kernel name, or directory); a C++ "
        "kernel by its mangled or demangled name, or its qualified name alone",
    )
    subparser.add_argument(
        "--pipeline",
        action="append",
        default=[],
        metavar="SPEC",
        help="compiler pipeline, e.g. O2,vectorize=0,fast=reassoc+contract (default: O3, "
        "native CPU); repeat it to compare several in one table",
    )
    subparser.add_argument("--repeat", type=int, default=10, help="timed runs (after an untimed check run)")
    subparser.add_argument(
        "--pairs",
        type=int,
        default=0,
        help="also measure the speedup over the baseline (the kernel as built: the "
        "object the build's clang makes with the build's flags) with N alternating pairs",
    )
    subparser.add_argument("--threads", type=int, default=None, help="OpenMP threads (default: as recorded)")
    subparser.add_argument(
        "--teams",
        type=int,
        default=None,
        metavar="N",
        help="an OpenMP target region's number of teams (num_teams; default: as compiled)",
    )
    subparser.add_argument(
        "--thread-limit",
        type=int,
        default=None,
        metavar="N",
        help="an OpenMP target region's threads per team (thread_limit; default: as compiled)",
    )
    add_tolerance(subparser, help="relative tolerance for floating-point data (default: the capture's, else exact)")
    add_timeout(subparser, TIMEOUT_S, help="seconds before a run counts as hung")
    subparser.add_argument(
        "--cache",
        choices=CACHE_STATES,
        default=WARM,
        help="caches at the start of each timed run: warm (as the previous run left them), "
        "shared (each thread's own caches emptied: data in the last-level cache at most) "
        "or cold (all emptied: data in memory)",
    )
    subparser.add_argument(
        "--sequence",
        action="store_true",
        help="replay every call of the kernel recorded in the capture's run (r3 record "
        "--instances N), in order, each timed run a pass over them all: the caches see "
        "the calls' different data, as in the application",
    )
    add_json(subparser, help="print one JSON object (a list of them for several pipelines)")


def check_ranges(args):
    """Values no run can mean, refused before any work (a negative count read as a crash)."""
    if args.pairs < 0:
        raise R3Error("--pairs must be at least 0 (0: no speedup measured)")
    if args.threads is not None and args.threads < 1:
        raise R3Error("--threads must be at least 1")
    for name in ("teams", "thread_limit"):
        if getattr(args, name, None) is not None and getattr(args, name) < 1:
            raise R3Error("--%s must be at least 1" % name.replace("_", "-"))
    check_timeout(args)
    check_tolerance(args)
    check_most(
        args,
        {
            "repeat": MOST_RUNS,
            "pairs": MOST_PAIRS,
            "threads": thread_bound(),
            "teams": MOST_TEAMS,
            "thread_limit": (MOST_THREADS, " (threads a GPU block may have)"),
        },
    )


def replay(args):
    if args.repeat < 1:
        raise R3Error("--repeat must be at least 1")
    check_ranges(args)
    ws = Workspace(args.workspace)
    pipelines = [parse(spec) for spec in (args.pipeline or [""])]  # every SPEC checked before any work
    directory = resolve(ws, args.capture, first_call=args.sequence)
    # Sizes and image structure here, for a clear line at once; the worker that
    # loads the capture checks the digests, so large images are hashed only once.
    capture = load_capture_dir(directory, verify_digests=False)
    launch = _launch(args, capture)
    sequence = recorded_calls(ws, capture) if args.sequence else None
    if sequence is not None:
        if len(sequence) < 2:
            raise R3Error(
                "%s has one recorded call in its run: record it with --instances N to replay a sequence"
                % cxxnames.display(capture.kernel)
            )
        if args.cache != WARM:
            raise R3Error("--sequence is timed in warm caches: the calls' own data is their cache state")
        if directory != sequence[0]:  # a later call named by its id: the sequence starts at the first
            directory = sequence[0]
            capture = load_capture_dir(directory, verify_digests=False)
    results = []
    with ReplayServer(timeout=args.timeout, cache_dir=ws.cache_dir) as server:
        for pipeline in pipelines:
            variant = Variant(pipeline=pipeline, launch=launch)
            ev = server.submit(
                directory,
                variant,
                repeat=args.repeat,
                pairs=args.pairs,
                tolerance=args.tolerance,
                cache=args.cache,
                sequence=sequence,
            )
            results.append(_result(capture, pipeline, ev, launch))
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=1))
    elif len(results) == 1:
        _print_one(results[0])
    else:
        _print_table(capture, results)
    return 0 if all(r["status"] == "ok" for r in results) else 1


def _launch(args, capture):
    """The launch settings asked for: OpenMP threads, and for an offload region its
    geometry (a backend's ``geometry`` fields); geometry for a kernel without it: one line."""
    geometry = {"num_teams": args.teams, "thread_limit": args.thread_limit}
    asked = [name for name, value in geometry.items() if value is not None]
    backend = backends.of_capture(capture)
    if asked and not set(asked) <= set(backend.geometry):
        raise R3Error(
            "--teams and --thread-limit set an OpenMP target region's launch geometry: %s is a %s kernel"
            % (cxxnames.display(capture.kernel), backend.name)
        )
    return Launch(threads=args.threads, **{name: geometry[name] for name in asked})


def in_app_per_call(capture):
    """The kernel's mean time per call in the recorded run, the captured call left out
    where there are others: taking the capture slows it by orders of magnitude (cg's dot)."""
    calls, total = capture.app.get("calls"), capture.app.get("total_s")
    if calls and total and calls > 1 and total > capture.instance_s:
        return (total - capture.instance_s) / (calls - 1)
    return total / calls if calls and total else capture.instance_s


def _result(capture, pipeline, ev, launch=None):
    return {
        "capture": capture.id,
        "kernel": capture.kernel,
        "kernel_demangled": cxxnames.demangle(capture.kernel),
        "pipeline": format_spec(pipeline),
        "launch": {k: v for k, v in (launch or Launch()).to_json().items() if v is not None},
        "status": ev.status,
        "verified": ev.verified,
        "max_rel_error": ev.max_rel_error,
        "mismatched_bytes": ev.mismatched_bytes,
        "time_median_s": ev.time_median_s,
        "time_min_s": ev.time_min_s,
        "time_max_s": ev.time_max_s,
        "repeat": ev.repeat,
        "compiled": ev.compiled,
        "compile_s": ev.compile_s,
        "speedup": ev.speedup,
        "speedup_min": ev.speedup_min,
        "speedup_max": ev.speedup_max,
        "pairs": ev.pairs,
        "relaxes_fp": pipeline.relaxes_fp,
        "in_app_s": in_app_per_call(capture),
        "cache": ev.cache,
        "resampled": ev.resampled,
        "calls": ev.calls,
        "code": ev.code,
        "stages": ev.stages,
        "diagnostics": ev.diagnostics,
    }


def _print_one(r):
    launch = "".join(" %s=%s" % item for item in sorted(r["launch"].items()))
    print(
        "%s (%s) pipeline %s%s: %s"
        % (
            cxxnames.display(r["kernel"]),
            r["capture"],
            r["pipeline"],
            " launch" + launch if launch else "",
            r["status"],
        )
    )
    if r["compiled"]:
        print("  compile   %s" % seconds(r["compile_s"]))
        print("  verified  %s (max relative error %.3g)" % ("yes" if r["verified"] else "NO", r["max_rel_error"]))
    if r["time_median_s"] is not None:
        runs = (
            ("%d runs" % r["repeat"])
            if r["calls"] < 2
            else ("%d passes over %d recorded calls, per call" % (r["repeat"], r["calls"]))
        )
        print(
            "  time      median %s  min %s  max %s  over %s, %s cache  (in the app: %s per call)"
            % (
                seconds(r["time_median_s"]),
                seconds(r["time_min_s"]),
                seconds(r["time_max_s"]),
                runs,
                r["cache"],
                seconds(r["in_app_s"]),
            )
        )
    if r["speedup"] is not None:
        print(
            "  speedup   %.3fx over the kernel as built (min %.3f, max %.3f, %d pairs)"
            % (r["speedup"], r["speedup_min"], r["speedup_max"], r["pairs"])
        )
    if r["relaxes_fp"]:
        print("  note      this pipeline relaxes floating-point semantics")
    if r["diagnostics"]:
        print("  " + r["diagnostics"])


def _print_table(capture, results):
    calls = results[0]["calls"] if results else 1
    print(
        "%s (%s%s), in the app %s per call"
        % (
            cxxnames.display(capture.kernel),
            capture.id,
            ", a sequence of %d recorded calls" % calls if calls > 1 else "",
            seconds(in_app_per_call(capture)),
        )
    )
    rows = []
    for r in results:
        speedup = (
            "-" if r["speedup"] is None else "%.3fx [%.2f-%.2f]" % (r["speedup"], r["speedup_min"], r["speedup_max"])
        )
        rows.append(
            [
                r["pipeline"] + (" *" if r["relaxes_fp"] else ""),
                r["status"],
                "%.2g" % r["max_rel_error"] if r["compiled"] else "-",
                seconds(r["compile_s"]),
                seconds(r["time_median_s"]),
                "-" if r["time_min_s"] is None else "%s-%s" % (seconds(r["time_min_s"]), seconds(r["time_max_s"])),
                speedup,
            ]
        )
    print(table(["pipeline", "status", "max rel err", "compile", "median", "range", "speedup vs as built"], rows))
    if any(r["relaxes_fp"] for r in results):
        print("* relaxes floating-point semantics")

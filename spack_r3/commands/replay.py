"""Replay one captured kernel under a compiler pipeline, verify it and time it."""

import json

from ..capture import load_capture, resolve
from ..data import Launch, Variant
from ..errors import R3Error
from ..replay.pipeline import format_spec, parse
from ..replay.server import ReplayServer
from ..report import seconds
from ..workspace import Workspace

description = "replay a captured kernel in isolation"


def setup_parser(subparser):
    subparser.add_argument("capture", help="capture id (or unique prefix, or kernel name, or directory)")
    subparser.add_argument("--pipeline", default="", metavar="SPEC",
                           help="compiler pipeline, e.g. O2,vectorize=0,fast=reassoc+contract (default: O3, "
                                "native CPU)")
    subparser.add_argument("--repeat", type=int, default=10, help="timed runs (after an untimed check run)")
    subparser.add_argument("--pairs", type=int, default=0,
                           help="also measure the speedup over the O3 baseline with N alternating pairs")
    subparser.add_argument("--threads", type=int, default=None, help="OpenMP threads (default: as recorded)")
    subparser.add_argument("--tolerance", type=float, default=None,
                           help="relative tolerance for floating-point data (default: the capture's, else exact)")
    subparser.add_argument("--timeout", type=float, default=60.0, help="seconds before a run counts as hung")
    subparser.add_argument("--json", action="store_true", help="print one JSON object")


def replay(args):
    if args.repeat < 1:
        raise R3Error("--repeat must be at least 1")
    ws = Workspace(args.workspace)
    pipeline = parse(args.pipeline)
    directory = resolve(ws, args.capture)
    capture = load_capture(ws, directory)
    variant = Variant(pipeline=pipeline, launch=Launch(threads=args.threads))
    with ReplayServer(timeout=args.timeout) as server:
        ev = server.submit(directory, variant, repeat=args.repeat, pairs=args.pairs, tolerance=args.tolerance)
    result = {"capture": capture.id, "kernel": capture.kernel, "pipeline": format_spec(pipeline),
              "status": ev.status, "verified": ev.verified, "max_rel_error": ev.max_rel_error,
              "mismatched_bytes": ev.mismatched_bytes, "time_median_s": ev.time_median_s,
              "time_min_s": ev.time_min_s, "time_max_s": ev.time_max_s, "repeat": ev.repeat,
              "compile_s": ev.compile_s, "speedup": ev.speedup, "speedup_min": ev.speedup_min,
              "speedup_max": ev.speedup_max, "pairs": ev.pairs, "relaxes_fp": pipeline.relaxes_fp,
              "in_app_s": capture.instance_s, "diagnostics": ev.diagnostics}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print("%s (%s) pipeline %s: %s" % (capture.kernel, capture.id, result["pipeline"], ev.status))
        if ev.compiled:
            print("  compile   %s" % seconds(ev.compile_s))
        if ev.status == "ok" or ev.compiled:
            print("  verified  %s (max relative error %.3g)" % ("yes" if ev.verified else "NO", ev.max_rel_error))
        if ev.time_median_s is not None:
            print("  time      median %s  min %s  max %s  over %d runs  (in the app: %s)" % (
                seconds(ev.time_median_s), seconds(ev.time_min_s), seconds(ev.time_max_s), ev.repeat,
                seconds(capture.instance_s)))
        if ev.speedup is not None:
            print("  speedup   %.3fx over O3 (min %.3f, max %.3f, %d pairs)" % (
                ev.speedup, ev.speedup_min, ev.speedup_max, ev.pairs))
        if ev.diagnostics:
            print("  " + ev.diagnostics)
    return 0 if ev.ok else 1

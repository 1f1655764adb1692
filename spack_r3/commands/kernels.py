"""List the captured kernels of the workspace."""

import json
import os
from collections import Counter

from .. import cxxnames
from ..capture import list_captures, run_name
from ..report import percent, seconds, size, table
from ..workspace import Workspace
from .common import add_json

description = "list captured kernels"

FIELDS = (
    "id",
    "kernel",
    "kernel_demangled",
    "source",
    "run",
    "share",
    "calls",
    "instance",
    "instances",
    "instance_s",
    "weight",
    "stands_for",
    "bytes",
    "tolerance",
    "unreplayable",
    "corrupt",
)


def setup_parser(subparser):
    add_json(subparser, help="print a JSON list")


def kernels(args):
    ws = Workspace(args.workspace)
    corrupt = []
    caps = sorted(list_captures(ws, corrupt), key=lambda c: (-(c.app.get("share") or 0), c.kernel, c.instance))
    instances = Counter((c.kernel, c.source_file, run_name(c)) for c in caps)  # captured calls of each kernel
    entries = []
    for c in caps:
        nbytes = sum(f.get("size", 0) for f in c.files.values() if isinstance(f, dict))
        entries.append(
            {
                "id": c.id,
                "kernel": c.kernel,
                "kernel_demangled": cxxnames.demangle(c.kernel),
                "source": os.path.basename(c.source_file),
                "run": run_name(c),
                "share": c.app.get("share"),
                "calls": c.app.get("calls"),
                "instance": c.instance,
                "instances": instances[(c.kernel, c.source_file, run_name(c))],
                "instance_s": c.instance_s,
                # picked where the kernel's time goes (--instances cover): its share of that
                # time, and the calls of its stratum
                "weight": (c.selection or {}).get("weight"),
                "stands_for": (c.selection or {}).get("calls"),
                "bytes": nbytes,
                "tolerance": c.tolerance,
                "unreplayable": c.unreplayable,
                "corrupt": None,
            }
        )
    if args.json:  # a corrupt capture: its id and why, every other field null
        print(
            json.dumps(
                entries + [dict({k: None for k in FIELDS}, id=b.id, corrupt=b.reason) for b in corrupt], indent=1
            )
        )
        return 0
    if not entries and not corrupt:
        print("no captures in %s (record some with: r3 record --source DIR --run CMD)" % ws.root)
        return 0
    if entries:
        rows = [
            [
                e["id"],
                cxxnames.display(e["kernel"]),
                e["source"],
                e["run"] or "-",
                percent(e["share"]),
                e["calls"],
                "%d/%d" % (e["instance"], e["instances"]),
                "-" if e["weight"] is None else "%s of %d calls" % (percent(e["weight"]), e["stands_for"] or 0),
                seconds(e["instance_s"]),
                size(e["bytes"]),
            ]
            for e in entries
        ]
        print(table(["id", "kernel", "source", "run", "share", "calls", "instance", "weight", "in app", "size"], rows))
    for e in entries:  # recorded for their hotness, refused by replay
        if e["unreplayable"]:
            print("%s cannot replay: %s" % (e["id"], e["unreplayable"]))
    for b in corrupt:  # unreadable: no command uses them
        print("%s is corrupt: %s" % (b.id, b.reason))
    return 0

"""List the captured kernels of the workspace."""

import json
import os
from collections import Counter

from .. import cxxnames
from ..capture import list_captures
from ..report import percent, seconds, size, table
from ..workspace import Workspace

description = "list captured kernels"


def setup_parser(subparser):
    subparser.add_argument("--json", action="store_true", help="print a JSON list")


def kernels(args):
    ws = Workspace(args.workspace)
    caps = sorted(list_captures(ws), key=lambda c: (-(c.app.get("share") or 0), c.kernel, c.instance))
    instances = Counter((c.kernel, c.source_file) for c in caps)  # captured calls of each kernel
    entries = []
    for c in caps:
        nbytes = sum(f["size"] for f in c.files.values())
        entries.append({"id": c.id, "kernel": c.kernel, "kernel_demangled": cxxnames.demangle(c.kernel),
                        "source": os.path.basename(c.source_file),
                        "share": c.app.get("share"), "calls": c.app.get("calls"), "instance": c.instance,
                        "instances": instances[(c.kernel, c.source_file)], "instance_s": c.instance_s,
                        "bytes": nbytes, "tolerance": c.tolerance, "unreplayable": c.unreplayable})
    if args.json:
        print(json.dumps(entries, indent=1))
        return 0
    if not entries:
        print("no captures in %s (record some with: r3 record --source DIR --run CMD)" % ws.root)
        return 0
    rows = [[e["id"], cxxnames.display(e["kernel"]), e["source"], percent(e["share"]), e["calls"],
             "%d/%d" % (e["instance"], e["instances"]), seconds(e["instance_s"]), size(e["bytes"])] for e in entries]
    print(table(["id", "kernel", "source", "share", "calls", "instance", "in app", "size"], rows))
    for e in entries:  # recorded for their hotness, refused by replay
        if e["unreplayable"]:
            print("%s cannot replay: %s" % (e["id"], e["unreplayable"]))
    return 0

"""Pattern inheritance: rewrites that won, offered first to the next kernel.

    patterns = Patterns(workspace)
    patterns.add(kernel, child, facts)      # a source variant that beat its kernel's baseline
    patterns.rule_ranking()                 # {"interchange": 7.1, ...}: the rules mutator's order
    patterns.examples(kernel)               # a model's prompt examples (rule, description, speedup, patch)

One JSON file per workspace (``patterns.json``), so later kernels and later packages
tuned in the same workspace inherit what worked, with the kernel's features beside each
entry (parallel or not, whether FP could be relaxed).
"""

import json
import os
import threading

from ..fileutil import write_atomic

FILE = "patterns.json"
MAX_EXAMPLES = 3
MAX_PATCH_CHARS = 4000  # a prompt example, not a whole unit


class Patterns:
    def __init__(self, workspace):
        self.path = os.path.join(workspace.root, FILE)
        self._lock = threading.Lock()

    def entries(self):
        if not os.path.isfile(self.path):
            return []
        try:
            with open(self.path) as f:
                return json.load(f).get("patterns", [])
        except (OSError, ValueError):  # a damaged file costs the inheritance, not the run
            return []

    def add(self, kernel, child, facts):
        entry = {"kernel": kernel, "id": child.id, "rule": child.rule, "rules": list(child.rules),
                 "description": child.description, "speedup": round(child.speedup, 4), "patch": child.patch,
                 "features": {"parallel": bool(facts.parallel), "relax_fp": bool(facts.relax_fp)}}
        with self._lock:
            entries = [e for e in self.entries() if (e["kernel"], e["id"]) != (kernel, child.id)]
            write_atomic(self.path, json.dumps({"patterns": entries + [entry]}, indent=1))

    def rule_ranking(self):
        """Each rule's best measured speedup: rules that won before are proposed first."""
        rank = {}
        for e in self.entries():
            rank[e["rule"]] = max(rank.get(e["rule"], 0.0), e["speedup"])
        return rank

    def examples(self, kernel, n=MAX_EXAMPLES):
        """The best winning rewrites, other kernels' first (they teach something new)."""
        entries = sorted(self.entries(), key=lambda e: (e["kernel"] == kernel, -e["speedup"]))
        return [dict(e, patch=e["patch"][:MAX_PATCH_CHARS]) for e in entries[:n]]

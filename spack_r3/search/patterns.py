"""Pattern inheritance: rewrites that won, offered first to the next kernel.

    patterns = Patterns(workspace)
    patterns.add(kernel, child, facts, gain)  # a source variant that beat its kernel's best settings
    patterns.rule_ranking()                   # {"unroll-and-jam": 1.14, ...}: the rules mutator's order
    patterns.examples(kernel)                 # a model's prompt examples (rule, description, gain, patch)

A rewrite's effect is its ``gain``: the child's best speedup over the original's best,
the kernel's best without the rewrite. Only a rewrite that beat that by more than two
evaluations tell apart is a pattern. The speedup over the build would say more of the
compiler settings than of the rewrite: every child of cg's dot reads about the same,
whatever it changed, and ranked by that, dot's ``restrict`` was proposed first to every later kernel
(matmul's unroll-and-jam came fifth, after the budget).

One JSON file per workspace (``patterns.json``), so later kernels and later packages
tuned in the same workspace inherit what worked, with the kernel's features beside each
entry (parallel or not, whether FP could be relaxed).
"""

import json
import os
import threading

from ..fileutil import write_atomic
from .noise import clearly_above

MAX_EXAMPLES = 3
MAX_PATCH_CHARS = 4000  # a prompt example, not a whole unit


class Patterns:
    def __init__(self, workspace):
        self.path = workspace.patterns_file
        self._lock = threading.Lock()

    def entries(self):
        if not os.path.isfile(self.path):
            return []
        try:
            with open(self.path) as f:
                return json.load(f).get("patterns", [])
        except (OSError, ValueError):  # a damaged file costs the inheritance, not the run
            return []

    def add(self, kernel, child, facts, gain):
        """Keep ``child`` if its ``gain`` over its kernel's best without it is clearly a gain;
        whether it was kept."""
        if not clearly_above(gain, 1.0):
            return False
        entry = {
            "kernel": kernel,
            "id": child.id,
            "rule": child.rule,
            "rules": list(child.rules),
            "description": child.description,
            "speedup": round(child.speedup, 4),
            "gain": round(gain, 4),
            "patch": child.patch,
            "features": {"parallel": bool(facts.parallel), "relax_fp": bool(facts.relax_fp)},
        }
        with self._lock:
            entries = [e for e in self.entries() if (e["kernel"], e["id"]) != (kernel, child.id)]
            write_atomic(self.path, json.dumps({"patterns": entries + [entry]}, indent=1))
        return True

    def winners(self):
        """The entries that carry a gain (those written before gains were kept rank nothing)."""
        return [e for e in self.entries() if "gain" in e]

    def rule_ranking(self):
        """Each rule's best gain: rules that won before are proposed first, the larger gain
        first."""
        rank = {}
        for e in self.winners():
            rank[e["rule"]] = max(rank.get(e["rule"], 0.0), e["gain"])
        return rank

    def examples(self, kernel, n=MAX_EXAMPLES):
        """The winning rewrites of the largest gains, other kernels' first (they teach
        something new)."""
        entries = sorted(self.winners(), key=lambda e: (e["kernel"] == kernel, -e["gain"]))
        return [dict(e, patch=e["patch"][:MAX_PATCH_CHARS]) for e in entries[:n]]

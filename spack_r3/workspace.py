"""The workspace: captures, record runs and reports of one user (default ~/.spack-r3)."""

import os

from .errors import R3Error


def workspace_root(path=None):
    root = path or os.environ.get("R3_WORKSPACE") or os.path.join(os.path.expanduser("~"), ".spack-r3")
    root = os.path.abspath(root)
    if os.path.exists(root) and not os.path.isdir(root):
        raise R3Error("workspace %s is not a directory" % root)
    return root


class Workspace:
    """Directory layout; every writer below it writes atomically (temp + rename)."""

    def __init__(self, path=None):
        self.root = workspace_root(path)

    @property
    def captures_dir(self):
        return os.path.join(self.root, "captures")

    @property
    def runs_dir(self):
        return os.path.join(self.root, "runs")

    @property
    def cache_dir(self):
        """What compile stages built (Polly's output), reusable by any later replay."""
        return os.path.join(self.root, "cache")

    @property
    def results_dir(self):
        """Each kernel's confirmed tune result, by its first capture's id (what emit reads)."""
        return os.path.join(self.root, "results")

    def capture_dir(self, capture_id):
        return os.path.join(self.captures_dir, capture_id)

    def ensure(self):
        for d in (self.root, self.captures_dir, self.runs_dir):
            os.makedirs(d, exist_ok=True)
        return self

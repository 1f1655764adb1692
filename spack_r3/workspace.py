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
    """The one map of a workspace's paths: no other module joins its root with a name.
    Every writer below it writes atomically (temp + rename)."""

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

    def result_file(self, capture_id):
        return os.path.join(self.results_dir, capture_id + ".json")

    @property
    def reports_dir(self):
        """r3 tune's report: tune.txt, tune.json, tune.png."""
        return os.path.join(self.root, "reports")

    @property
    def journal_file(self):
        """The Optuna studies (search/store.py)."""
        return os.path.join(self.root, "r3.journal")

    @property
    def legacy_journal_file(self):
        """The studies of r3 before the journal: SQLite, one writer (migrated once)."""
        return os.path.join(self.root, "r3.db")

    @property
    def locks_dir(self):
        return os.path.join(self.root, "locks")

    @property
    def remix_dir(self):
        """The outer loop's state, a file per kernel, capture and mutator."""
        return os.path.join(self.root, "remix")

    @property
    def patterns_file(self):
        """Source rewrites that won, examples for the model's prompts."""
        return os.path.join(self.root, "patterns.json")

    @property
    def cluster_config_file(self):
        """What ``r3 tune --cluster config`` reads."""
        return os.path.join(self.root, "cluster.json")

    @property
    def logs_dir(self):
        """Tracebacks of internal errors."""
        return os.path.join(self.root, "logs")

    @property
    def spack_dir(self):
        """What r3 keeps for Spack: the sandbox, the recording repository, the +r3/~r3 check."""
        return os.path.join(self.root, "spack")

    def repo_dir(self, namespace):
        """A Spack repository r3 writes (the tuned packages: r3tuned)."""
        return os.path.join(self.root, "repos", namespace)

    @property
    def recipes_dir(self):
        """r3 recipe's attempts, a directory per package."""
        return os.path.join(self.root, "recipes")

    @property
    def recipe_repo_dir(self):
        """The repository generated recipes go to unless --repo names one."""
        return os.path.join(self.root, "repo")

    def ensure(self):
        for d in (self.root, self.captures_dir, self.runs_dir):
            os.makedirs(d, exist_ok=True)
        return self

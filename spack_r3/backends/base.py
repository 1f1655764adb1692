"""The Backend interface: what records, replays, lowers and builds the kernels of one kind
of device. Each backend is one module beside this one (host, offload, cuda, hip) and one
line of ``backends.REGISTRY``; the stages ask a backend, never its name.

The methods import the stage code they run when called: a backend sits above the stages it
plugs into, and the stage modules that implement it (``record/cuda.py``, ``emit/offload.py``,
...) never import the registry back.
"""

from typing import List, Optional, Tuple


class Backend:
    # what a report says runs a replayed kernel
    runs_on: str = ""
    # record: the record runtime of a link (``record_link_args``) and how a unit is compiled
    # replay: the module a replay server runs for its captures (``python -m``), and whether
    # the host engine (replay/engine.py, llvmlite's JIT) runs its kernels itself
    worker: str = "spack_r3.replay.worker"
    host_engine: bool = True
    # lower: the data.Launch fields its kernels' launch geometry adds to the search space
    # (written into the code: compile.module.apply_geometry, emit/cuda.py's launch shim)
    geometry: Tuple[str, ...] = ()
    # search: source rewrites (search/mutators) apply to its kernels
    rewrites: bool = False

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return "Backend(%s)" % self.name

    def claims(self, args: List[str]) -> bool:
        """Whether a compile line's kernels are this backend's (``args``: the compiler's)."""
        return False

    # -- record (the r3-record launcher, record/launcher.py) --
    def record_line(self, line, record_dir: str, warn) -> Optional[int]:
        """Run a whole compile line this backend records itself, its exit status; None:
        the launcher compiles the line's sources one by one (``record_source``)."""
        return None

    def record_source(self, line, argv: List[str], source: str, obj: str, record_dir: str, wanted, warn) -> int:
        """Compile ``source`` of ``line`` (alone: ``argv``) into ``obj``, its kernels
        recorded; its exit status (recording never breaks a build: a failure is a warning)."""
        raise NotImplementedError("%s records whole lines" % self.name)

    def record_link_args(self, clang: str, line) -> List[str]:
        """What the link ``line`` of an executable adds to record this backend's launches."""
        return []

    # -- build (the +r3 build, emit/apply.py) --
    def build_unit(self, line, source: str, obj: str, unit, plan, run, error) -> bool:
        """Build the planned ``unit`` from ``source`` into ``obj`` tuned; False: emit/apply's
        host path builds it (``run(argv, what)`` runs a tool, raising ``error``)."""
        return False

    def timed_link_args(self, clang: str, line) -> List[str]:
        """What a link of a timed ``+r3`` build (probes: the check in the application) adds to
        time this backend's kernels."""
        return []

    def build_link_args(self, clang: str, plan, line) -> List[str]:
        """What a link of the ``+r3`` build adds for this backend's tuned kernels."""
        return []

"""The data objects every stage shares: plain dataclasses that round-trip through JSON.

Capture     one recorded kernel instance (a content-addressed directory).
Pipeline    how a kernel's IR is optimized and compiled.
Launch      how it is run (threads, OpenMP schedule and chunk).
Variant     what differs from the recording: source patch, pipeline, launch.
Evaluation  what replaying one variant of one capture measured.
"""

from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Dict, Iterable, List, Optional, Protocol, Tuple, Type, TypeVar, cast

from .settings import RELAXES_FP, SPARSE

# A JSON object as json.load gives it.
Json = Dict[str, Any]


class _Dataclass(Protocol):  # any dataclass, as fields() takes it
    __dataclass_fields__: ClassVar[Dict[str, Any]]


_T = TypeVar("_T", bound=_Dataclass)

CAPTURE_FORMAT = 1


def _from_dict(cls: Type[_T], data: Json) -> _T:
    """Build ``cls`` from a dict, ignoring keys a newer writer may have added."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class FileDigest:
    size: int
    sha256: str


def opt_level(args: Iterable[str]) -> str:
    """A compile line's optimization level: 0, 1, 2, 3, s or z (its last -O; none: 0, as
    the compiler takes it)."""
    levels = [a[2:] for a in args if a.startswith("-O")]
    level = levels[-1] if levels else "0"
    aliases = {"": "1", "g": "1", "fast": "3", "4": "3"}
    return aliases.get(level, level if level in ("0", "1", "2", "3", "s", "z") else "2")


@dataclass
class Capture:
    """``capture.json``: everything needed to replay one kernel instance.

    Argument values are raw 64-bit slots (hex) as the kernel received them;
    pointers are valid as recorded because replay maps memory at the recorded
    addresses. ``signature`` holds the LLVM parameter types (``byval`` sizes
    for aggregates passed by value, whose bytes are in ``byval_data``).
    """

    id: str
    kernel: str
    source_file: str
    compile_command: List[str]
    compile_dir: str
    signature: Json
    args: List[str]
    byval_data: List[Optional[str]]
    ret: Optional[str]
    launch: Json
    target: Json
    app: Json
    instance: int
    instance_s: float
    arena: Json
    globals: List[Json]
    files: Json
    tolerance: Optional[float] = None
    created: str = ""
    format: int = CAPTURE_FORMAT
    link_units: List[str] = field(default_factory=list)  # other units' bitcode the kernel calls into
    memory: Json = field(default_factory=dict)  # mode (pages|heap), live_bytes, touched_bytes, thread
    unreplayable: Optional[str] = None  # why replay refuses it: library state the recording does not keep
    # The flags module.bc was compiled with (besides the source and output): a source
    # variant is compiled with the same ones.
    bitcode_args: List[str] = field(default_factory=list)
    # The unit's own headers (record.headers): {absolute path: sha256}, each kept as
    # headers/SHA in the capture, for source variants compiled where the tree is not
    # (None: recorded before they were kept).
    headers: Optional[Json] = None

    def to_json(self) -> Json:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Json) -> "Capture":
        return _from_dict(cls, data)

    @property
    def opt_level(self) -> str:
        """The build's optimization level (``opt_level`` of its compile line)."""
        return opt_level(self.compile_command[1:])


@dataclass
class Pipeline:
    """Compiler settings for one replay. The defaults are ``-O3 -march=native``, with
    a*b+c contracted exactly as the build contracted it. Each field's type and default
    are here; its SPEC key, value syntax and search offer are its row in
    ``settings.SETTINGS``."""

    opt: str = "3"  # 0, 1, 2, 3, s, z
    loop_vectorize: Optional[bool] = None  # None: what the O-level does
    slp_vectorize: Optional[bool] = None
    unroll: Optional[bool] = None
    interleave: Optional[bool] = None
    inline_threshold: Optional[int] = None
    passes: Tuple[str, ...] = ()  # extra passes run after the standard pipeline
    codegen: int = 3
    cpu: str = "host"  # host, built (the kernel's own target attributes: as the build compiled it), or a name
    features: str = "host"  # host, built, or +feat,-feat,...
    fast_math: Tuple[str, ...] = ()  # subset of settings.FAST_MATH_FLAGS
    # built: fuse llvm.fmuladd only where the build's target did (a generic x86-64 build
    # does not), so the results are the application's; on: fuse where the target can;
    # off: split into fmul + fadd
    fma: str = "built"
    noalias: bool = False  # mark the kernel's pointer parameters noalias
    # An opt stage with Polly (LLVM's polyhedral loop optimizer) before the pipeline:
    polly: bool = False
    polly_tile: Optional[int] = None  # None: Polly's default tile size; 0: no tiling; N: tiles of N
    polly_matmul: bool = True  # Polly's matrix-multiplication pattern optimization
    polly_vectorizer: str = "none"  # none or stripmine
    # Polly's scheduler and code generation options (issue 46), each off by default:
    polly_parallel: bool = False  # -polly-parallel: OpenMP (libomp's GOMP entry points) over an outer parallel loop
    polly_fusion: bool = False  # -polly-loopfusion-greedy: fuse every band it can
    polly_coincidence: bool = False  # -polly-opt-outer-coincidence=yes: outer band members parallel
    polly_tile2: bool = False  # -polly-2nd-level-tiling
    polly_regtile: bool = False  # -polly-register-tiling
    # The build's own compiler with the build's own flags (``stages.build_object``): the
    # code the untuned application runs, which every speedup is against. The fields above
    # only describe it then.
    build_compiler: bool = False
    # Arguments folded in as constants, ((index, value), ...): a clone of the kernel with
    # them, behind a guard that runs the original for other values (replay/specialize.py).
    specialize: Tuple[Tuple[int, int], ...] = ()

    @property
    def relaxes_fp(self) -> bool:
        """True when the pipeline changes floating-point semantics (a setting that
        relaxes FP, ``settings.RELAXES_FP``, away from its default)."""
        return any(not _at_default(self, name) for name in RELAXES_FP)

    def to_json(self) -> Json:
        d = asdict(self)
        d["passes"] = list(self.passes)
        d["fast_math"] = list(self.fast_math)
        d["specialize"] = [list(p) for p in self.specialize]
        for name in SPARSE:  # absent when unused: variants and plans written before them read the same
            if _at_default(self, name):
                del d[name]
        return d

    @classmethod
    def from_json(cls, data: Json) -> "Pipeline":
        p = _from_dict(cls, data)
        p.passes = tuple(p.passes)
        p.fast_math = tuple(p.fast_math)
        # JSON gives each pair as a list; cast: mypy cannot count a generator's items
        pairs = tuple(tuple(int(x) for x in pair) for pair in p.specialize)
        p.specialize = cast(Tuple[Tuple[int, int], ...], pairs)
        return p


def _at_default(p: Pipeline, name: str) -> bool:
    """Whether a field of ``p`` is at its default (an empty list counts as the empty tuple)."""
    value, default = getattr(p, name), Pipeline.__dataclass_fields__[name].default
    return value == default or (isinstance(default, tuple) and not default and not value)


@dataclass
class Launch:
    threads: Optional[int] = None  # None: as recorded
    # OpenMP loops whose schedule is chosen at run time (dynamic, guided, runtime: clang's
    # __kmpc_dispatch_init calls) take any schedule and chunk; None: as compiled.
    schedule: Optional[str] = None  # static, dynamic or guided
    chunk: Optional[int] = None
    # An OpenMP target region's launch geometry (backends.apply_geometry); None: as compiled.
    num_teams: Optional[int] = None
    thread_limit: Optional[int] = None

    def to_json(self) -> Json:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Optional[Json]) -> "Launch":
        return _from_dict(cls, data or {})


@dataclass
class Variant:
    pipeline: Pipeline = field(default_factory=Pipeline)
    launch: Launch = field(default_factory=Launch)
    source_patch: Optional[str] = None  # unified diff against the capture's source file
    # Macro knobs a source rewrite exposes (e.g. a tile size), compiled in as -DNAME=VALUE.
    source_defines: Dict[str, int] = field(default_factory=dict)
    source_rule: Optional[str] = None  # what made the patch: a rule's name, or "llm"

    def to_json(self) -> Json:
        return {
            "pipeline": self.pipeline.to_json(),
            "launch": self.launch.to_json(),
            "source_patch": self.source_patch,
            "source_defines": dict(self.source_defines),
            "source_rule": self.source_rule,
        }

    @classmethod
    def from_json(cls, data: Json) -> "Variant":
        return cls(
            pipeline=Pipeline.from_json(data.get("pipeline", {})),
            launch=Launch.from_json(data.get("launch", {})),
            source_patch=data.get("source_patch"),
            source_defines=dict(data.get("source_defines") or {}),
            source_rule=data.get("source_rule"),
        )


# Evaluation.status values: only "ok" is a usable measurement.
OK, COMPILE_ERROR, CRASH, TIMEOUT, WRONG_OUTPUT = "ok", "compile-error", "crash", "timeout", "wrong-output"
# The cache state each timed run of a replay starts from (see replay.engine.CacheFlush).
WARM, SHARED, COLD = "warm", "shared", "cold"
CACHE_STATES = (WARM, SHARED, COLD)


@dataclass
class Evaluation:
    capture: str
    variant: Json
    status: str = OK
    compiled: bool = False
    verified: bool = False
    max_rel_error: float = 0.0
    mismatched_bytes: int = 0
    time_median_s: Optional[float] = None
    time_min_s: Optional[float] = None
    time_max_s: Optional[float] = None
    repeat: int = 0
    compile_s: Optional[float] = None
    speedup: Optional[float] = None  # median of paired baseline/candidate ratios
    speedup_min: Optional[float] = None
    speedup_max: Optional[float] = None
    pairs: int = 0
    ratios: List[float] = field(default_factory=list)  # the per-pair ratios behind speedup
    baseline_median_s: Optional[float] = None  # the baseline's runs of the same pairs
    verify_runs: int = 0  # verification runs (several for parallel kernels: a race may verify once)
    threads: Optional[int] = None  # OpenMP threads the candidate ran with (None: left as it was)
    baseline_threads: Optional[int] = None  # and the baseline of its pairs (as recorded, within the CPUs)
    runs_per_sample: int = 1  # runs summed in each timing sample of a pair (short kernels: several)
    resampled: int = 0  # pairs measured again because the worker was preempted during them
    cache: str = WARM  # the caches each timed run started with: WARM, SHARED or COLD (replay.engine.CacheFlush)
    calls: int = 1  # recorded calls each timed run replayed, in order (replay.sequence); times are per call
    code: str = ""  # digest of what ran: optimized IR, target, codegen level, launch (engine.code_digest)
    diagnostics: str = ""
    # seconds by stage (compile: source, opt, pipeline, codegen, object, link; map, restore,
    # verify, calibrate, timed, check; the worker's process, other): where the evaluation went
    stages: Dict[str, float] = field(default_factory=dict)
    raced_out: bool = False  # its pairs stopped early, clearly slower than the baseline (never a winner)

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_json(self) -> Json:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Json) -> "Evaluation":
        return _from_dict(cls, data)

"""The data objects every stage shares: plain dataclasses that round-trip through JSON.

Capture     one recorded kernel instance (a content-addressed directory).
Pipeline    how a kernel's IR is optimized and compiled.
Launch      how it is run (threads, OpenMP schedule and chunk).
Variant     what differs from the recording: source patch, pipeline, launch.
Evaluation  what replaying one variant of one capture measured.
"""

from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Dict, Iterable, List, Optional, Protocol, Tuple, Type, TypeVar, cast


# A JSON object as json.load gives it.
Json = Dict[str, Any]


class _Dataclass(Protocol):  # any dataclass, as fields() takes it
    __dataclass_fields__: ClassVar[Dict[str, Any]]


_T = TypeVar("_T", bound=_Dataclass)
_V = TypeVar("_V")

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
    # The stratum of the kernel's calls this call was picked for (``record.instances.Pick``:
    # its weight, the calls and mean call it stands for, its own time in the logged run);
    # None: captured as ``--instances N|auto`` says (the first calls).
    selection: Optional[Json] = None

    def to_json(self) -> Json:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Json) -> "Capture":
        return _from_dict(cls, data)

    @property
    def opt_level(self) -> str:
        """The build's optimization level (``opt_level`` of its compile line)."""
        return opt_level(self.compile_command[1:])


# In a row's flags (``settings.lower``): the build's own -march/-mcpu/-mtune.
BUILD_TARGET = "$build-target"
# Each fast-math flag as clang's driver flag (reassoc needs traps off to reassociate).
FAST_MATH_CLANG = {
    "reassoc": ("-fno-trapping-math", "-fassociative-math"),
    "nnan": ("-fno-honor-nans",),
    "ninf": ("-fno-honor-infinities",),
    "nsz": ("-fno-signed-zeros",),
    "arcp": ("-freciprocal-math",),
    "contract": ("-ffp-contract=fast",),
    "afn": ("-fapprox-func",),
}


def setting(default: _V, **row: Any) -> _V:
    """A ``Pipeline`` field's default and its row of ``settings.SETTINGS``: the arguments of
    a ``settings.Setting`` but ``fields`` (the field's own name); ``key`` defaults to that
    name. (Typed as the default, so mypy checks the default against the field's type.)"""
    return cast(_V, field(default=default, metadata={"setting": row}))


@dataclass
class Pipeline:
    """Compiler settings for one replay. The defaults are ``-O3 -march=native``, with
    a*b+c contracted exactly as the build contracted it.

    Each field is one setting, declared in one line: its type, its default and its row
    (``setting(default, ...)``): the SPEC key and the aliases ``replay/pipeline.parse``
    takes, the value syntax (``kind``), whether it relaxes floating-point results or needs
    Polly, and what the search offers (``offer``: "bool", "tristate", "fast-math", or the
    values). ``settings.py`` reads the rows (``settings.SETTINGS``) and says what each
    argument means. The fields' order is the JSON's (``to_json``)."""

    # fmt: off
    opt: str = setting("3", kind="choice", choices=("0", "1", "2", "3", "s", "z"), build=True, offer=("2", "3", "s"),
                       doc="optimization level", clang="-O%s")
    # None: what the O-level does
    loop_vectorize: Optional[bool] = setting(None, key="vectorize", kind="bool", aliases=("loop_vectorize",),
                                             offer="tristate", doc="loop vectorizer",
                                             clang={True: ("-fvectorize",), False: ("-fno-vectorize",)})
    slp_vectorize: Optional[bool] = setting(None, key="slp", kind="bool", aliases=("slp_vectorize",),
                                            offer="tristate", doc="SLP vectorizer",
                                            clang={True: ("-fslp-vectorize",), False: ("-fno-slp-vectorize",)})
    unroll: Optional[bool] = setting(None, kind="bool", offer="tristate", doc="loop unrolling",
                                     clang={True: ("-funroll-loops",), False: ("-fno-unroll-loops",)})
    interleave: Optional[bool] = setting(None, kind="bool", offer="tristate", doc="loop interleaving",
                                         llvm={False: ("-force-vector-interleave=1",)},
                                         unlowered="clang interleaves at the cost model's choice")
    inline_threshold: Optional[int] = setting(None, key="inline", kind="int", aliases=("inline_threshold",), low=0,
                                              high=100000, offer=(None, 25, 225, 500, 1000), doc="inlining threshold",
                                              llvm="-inline-threshold=%d")
    # searched as a count and the passes themselves (search/space.py: passes, pass0, pass1, ...)
    passes: Tuple[str, ...] = setting((), kind="passes", doc="extra passes after the standard pipeline",
                                      unlowered="extra passes after the pipeline")
    codegen: int = setting(3, kind="int", low=0, high=3, build=True, offer=(1, 2, 3), doc="code generation level",
                         unlowered="clang's code generation level follows -O")
    # host, built (the kernel's own target attributes: as the build compiled it), or a name;
    # with features, also set as one by target= (settings.TARGET)
    cpu: str = setting("host", kind="cpu", droppable=False,
                       clang={"host": ("-march=native",), "built": (BUILD_TARGET,), "*": ("-march=%s",)})
    features: str = setting("host", kind="features", droppable=False,  # host, built, or +feat,-feat,...
                            clang={"host": (), "built": (), "": ()}, unlowered="target features beyond -march")
    # a subset of settings.FAST_MATH_FLAGS
    fast_math: Tuple[str, ...] = setting((), key="fast", kind="fast", aliases=("fast_math",), relaxes_fp=True,
                                         offer="fast-math", param="fast_math", doc="fast-math flags",
                                         clang=FAST_MATH_CLANG)
    # built: fuse llvm.fmuladd only where the build's target did (a generic x86-64 build
    # does not), so the results are the application's; on: fuse where the target can;
    # off: split into fmul + fadd
    fma: str = setting("built", kind="choice", choices=("built", "on", "off"), relaxes_fp=True,
                       offer=("built", "on", "off"), doc="FMA contraction",
                       clang={"built": (), "on": ("-ffp-contract=fast",), "off": ("-ffp-contract=off",)})
    # mark the kernel's pointer parameters noalias
    noalias: bool = setting(False, kind="bool", offer="bool",
                            doc="pointer parameters do not alias (verified on every instance)",
                            unlowered="the kernel's pointer parameters marked noalias; restrict in the source says it")
    # An opt stage with Polly (LLVM's polyhedral loop optimizer) before the pipeline:
    polly: bool = setting(False, kind="bool", offer="bool",
                          doc="Polly polyhedral loop optimizer (opt stage before the pipeline)", llvm={True: ("-polly",)})
    # None: Polly's default tile size; 0: no tiling; N: tiles of N
    polly_tile: Optional[int] = setting(None, kind="int", low=0, high=4096, polly=True,
                                        offer=(None, 0, 16, 32, 64, 128, 256), doc="Polly tile size (0: no tiling)",
                                        # -polly-tile-sizes=N sizes the first dimension only
                                        llvm={0: ("-polly-tiling=false",), "*": ("-polly-default-tile-size=%d",)})
    polly_matmul: bool = setting(True, kind="bool", polly=True, offer="bool",
                                 doc="Polly's matrix-multiplication pattern optimization",
                                 llvm={True: ("-polly-pattern-matching-based-opts=true",),
                                       False: ("-polly-pattern-matching-based-opts=false",)})
    polly_vectorizer: str = setting("none", key="polly_vec", kind="choice", aliases=("polly_vectorizer",),
                                    choices=("none", "stripmine"), polly=True, offer=("none", "stripmine"),
                                    doc="Polly vectorizer", llvm={"none": (), "*": ("-polly-vectorizer=%s",)})
    # Polly's scheduler and code generation options (issue 46), each off by default:
    # -polly-parallel: OpenMP (libomp's GOMP entry points) over an outer parallel loop
    polly_parallel: bool = setting(False, kind="bool", polly=True, sparse=True, offer="bool",
                                   doc="Polly's OpenMP code for parallel outer loops",
                                   llvm={True: ("-polly-parallel",)}, clang={True: ("-fopenmp",)})
    # -polly-loopfusion-greedy: fuse every band it can
    polly_fusion: bool = setting(False, kind="bool", polly=True, sparse=True, offer="bool",
                                 doc="Polly's greedy loop fusion", llvm={True: ("-polly-loopfusion-greedy",)})
    # -polly-opt-outer-coincidence=yes
    polly_coincidence: bool = setting(False, kind="bool", polly=True, sparse=True, offer="bool",
                                      doc="Polly: outer band members parallel (outer coincidence)",
                                      llvm={True: ("-polly-opt-outer-coincidence=yes",)})
    # -polly-2nd-level-tiling
    polly_tile2: bool = setting(False, kind="bool", polly=True, sparse=True, offer="bool",
                                doc="Polly's 2nd-level tiling", llvm={True: ("-polly-2nd-level-tiling",)})
    # -polly-register-tiling
    polly_regtile: bool = setting(False, kind="bool", polly=True, sparse=True, offer="bool",
                                  doc="Polly's register tiling", llvm={True: ("-polly-register-tiling",)})
    # The build's own compiler with the build's own flags (``stages.build_object``): the
    # code the untuned application runs, which every speedup is against. The fields above
    # only describe it then.
    build_compiler: bool = setting(False, key="compiler", kind="choice", choices={"build": True, "r3": False},
                                   build=True, expect="build (the build's own compiler and flags) or r3",
                                   unlowered="the build's own compiler and flags")
    # Arguments folded in as constants, ((index, value), ...): a clone of the kernel with
    # them, behind a guard that runs the original for other values (compile/specialize.py);
    # searched over the argument values a capture suggests (KernelFacts.specialize)
    specialize: Tuple[Tuple[int, int], ...] = setting((), kind="specialize", sparse=True,
                                                      doc="recorded-constant arguments folded into a guarded clone",
                                                      unlowered="a clone of the kernel with recorded arguments "
                                                      "folded in, behind a guard")
    # fmt: on

    @property
    def relaxes_fp(self) -> bool:
        """True when the pipeline changes floating-point semantics (a setting whose row
        says ``relaxes_fp``, away from its default)."""
        return any(not _at_default(self, name) for name in _RELAXES_FP)

    def to_json(self) -> Json:
        d = asdict(self)
        d["passes"] = list(self.passes)
        d["fast_math"] = list(self.fast_math)
        d["specialize"] = [list(p) for p in self.specialize]
        for name in _SPARSE:  # absent when unused: variants and plans written before them read the same
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


def _declared(flag: str) -> Tuple[str, ...]:
    """The fields whose row says ``flag``."""
    return tuple(f.name for f in fields(Pipeline) if f.metadata["setting"].get(flag))


_RELAXES_FP = _declared("relaxes_fp")  # a value other than the default changes FP results
_SPARSE = _declared("sparse")  # left out of to_json at the default (added after plans were written)


@dataclass
class Launch:
    threads: Optional[int] = None  # None: as recorded
    # OpenMP loops whose schedule is chosen at run time (dynamic, guided, runtime: clang's
    # __kmpc_dispatch_init calls) take any schedule and chunk; None: as compiled.
    schedule: Optional[str] = None  # static, dynamic or guided
    chunk: Optional[int] = None
    # An OpenMP target region's launch geometry (compile.module.apply_geometry); None: as compiled.
    num_teams: Optional[int] = None
    thread_limit: Optional[int] = None
    # A CUDA kernel's register cap (ptxas -maxrregcount, .maxnreg); None: the compiler's choice.
    max_registers: Optional[int] = None

    # Fields written only where set: a plan, variant or code digest (replay.engine.code_digest
    # reads repr) without them keeps its digest.
    _SPARSE = ("max_registers",)

    def to_json(self) -> Json:
        out = asdict(self)
        for name in self._SPARSE:
            if out[name] is None:
                del out[name]
        return out

    def __repr__(self) -> str:
        return "Launch(%s)" % ", ".join("%s=%r" % item for item in self.to_json().items())

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
    # The patched unit compiles with -fopenmp added: a rewrite that adds threads to a unit
    # its build compiles without it (search/openmp.py).
    source_openmp: bool = False

    def to_json(self) -> Json:
        d: Json = {
            "pipeline": self.pipeline.to_json(),
            "launch": self.launch.to_json(),
            "source_patch": self.source_patch,
            "source_defines": dict(self.source_defines),
            "source_rule": self.source_rule,
        }
        if self.source_openmp:  # (absent otherwise: variants stored before it read the same)
            d["source_openmp"] = True
        return d

    @classmethod
    def from_json(cls, data: Json) -> "Variant":
        return cls(
            pipeline=Pipeline.from_json(data.get("pipeline", {})),
            launch=Launch.from_json(data.get("launch", {})),
            source_patch=data.get("source_patch"),
            source_defines=dict(data.get("source_defines") or {}),
            source_rule=data.get("source_rule"),
            source_openmp=bool(data.get("source_openmp", False)),
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
    # verify, calibrate, timed, check; probe: the capture's first-write probe, once per worker;
    # the worker's process, other): where the evaluation went
    stages: Dict[str, float] = field(default_factory=dict)
    raced_out: bool = False  # its pairs stopped early, clearly slower than the baseline (never a winner)
    # A kernel timed on several picked calls (replay.weighted): each one's speedup and weight;
    # ``speedup`` is their time-weighted (harmonic) mean.
    instance_speedups: List[Optional[float]] = field(default_factory=list)
    instance_weights: List[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_json(self) -> Json:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Json) -> "Evaluation":
        return _from_dict(cls, data)

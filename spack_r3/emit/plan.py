"""A build plan: what ``r3-apply`` builds differently, for one target, as JSON.

    {"format": 1, "target": "zen3", "gpu": "sm_90", "units": [   # gpu: device plans only
      {"source": "src/kernels.c",                 # relative to the source root
       "defines": {"R3_TILE_1": 32},               # the source variant's macro knobs
       "openmp": true,                             # compiled with -fopenmp added (only when so)
       "kernels": [{"symbol": "matmul", "pipeline": {...}, "launch": {...},
                    "relaxes_fp": false, "speedup": 9.8, "share": 0.71}]}]}

Emit writes it beside the package; ``r3-apply`` reads it (``R3_APPLY_PLAN``). Source
patches are not in the plan: the package applies them before the build.

The plan holds the winner typed (``Pipeline``, ``Launch``) from emit to r3-apply: one
loader (``Plan.from_json``) and one writer (``to_json`` of each part); ``build_digest`` is
the writer's output less what was measured.
"""

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

from ..data import Json, Launch, Pipeline

PLAN_FORMAT = 1


@dataclass
class PlannedKernel:
    symbol: str
    pipeline: Pipeline
    launch: Launch = field(default_factory=Launch)
    relaxes_fp: bool = False
    speedup: float = 1.0  # confirmed replay speedup
    share: float = 0.0  # of the application's run time, as recorded
    rule: Optional[str] = None  # the source rewrite's rule, if any

    # What r3-apply builds from (the build digest's part); the rest was measured.
    BUILT = ("symbol", "pipeline", "launch")

    def to_json(self) -> Json:
        return {
            "symbol": self.symbol,
            "pipeline": self.pipeline.to_json(),
            "launch": self.launch.to_json(),
            "relaxes_fp": self.relaxes_fp,
            "speedup": self.speedup,
            "share": self.share,
            "rule": self.rule,
        }

    @classmethod
    def from_json(cls, data: Json) -> "PlannedKernel":
        return cls(
            data["symbol"],
            Pipeline.from_json(data.get("pipeline") or {}),
            Launch.from_json(data.get("launch")),
            bool(data.get("relaxes_fp", False)),
            float(data.get("speedup", 1.0)),
            float(data.get("share", 0.0)),
            data.get("rule"),
        )


@dataclass
class PlannedUnit:
    source: str
    kernels: List[PlannedKernel] = field(default_factory=list)
    defines: Dict[str, int] = field(default_factory=dict)
    patch: Optional[str] = None  # the patch file's name in the package directory
    # A rewrite added OpenMP threads to a unit its build compiles without -fopenmp
    # (``search.openmp``): r3-apply compiles it with -fopenmp and links LLVM's OpenMP runtime.
    openmp: bool = False

    def to_json(self) -> Json:
        d: Json = {
            "source": self.source,
            "defines": dict(self.defines),
            "patch": self.patch,
            "kernels": [k.to_json() for k in self.kernels],
        }
        if self.openmp:  # (absent otherwise: the digests of plans without it stay as they were)
            d["openmp"] = True
        return d

    @classmethod
    def from_json(cls, data: Json) -> "PlannedUnit":
        return cls(
            data["source"],
            [PlannedKernel.from_json(k) for k in data.get("kernels", [])],
            dict(data.get("defines") or {}),
            data.get("patch"),
            bool(data.get("openmp", False)),
        )


@dataclass
class Plan:
    target: str
    units: List[PlannedUnit] = field(default_factory=list)
    format: int = PLAN_FORMAT
    # What the plan was tuned with (for staleness): package, namespace, version, compiler,
    # spec, source_root, sources ({unit: sha256 of the original}), app measurements.
    facts: Json = field(default_factory=dict)
    # The GPU a plan of device kernels is tuned for (sm_90, gfx942); None: host kernels only.
    gpu: Optional[str] = None

    def spec_keys(self) -> str:
        """The Spack spec keys this plan is for: the CPU microarchitecture, and for device
        kernels the GPU as Spack's variant (``target=zen3 cuda_arch=90``)."""
        from ..device.targets import gpu_target, variant_key

        return variant_key(self.target, gpu_target(self.gpu) if self.gpu else None)

    def name(self) -> str:
        """What names this plan's files beside the package (``r3-<name>.json``, its
        patches ``r3-<name>-<n>.patch``): the CPU microarchitecture, and the GPU for a
        device plan (``zen3-sm_90``), so plans for several GPUs of one host sit side by side."""
        return "%s-%s" % (self.target, self.gpu) if self.gpu else self.target

    def unit_for(self, path: str) -> Optional[PlannedUnit]:
        """The unit planned for the source file at ``path`` (absolute, in some build's
        stage); matched by its path relative to the source root, so any stage directory
        matches."""
        norm = os.path.normpath(path)
        for unit in self.units:
            rel = os.path.normpath(unit.source)
            if norm == rel or norm.endswith(os.sep + rel):
                return unit
        return None

    def predicted_app_speedup(self) -> float:
        """The application's speedup predicted from the recorded shares (see ``amdahl``)."""
        return amdahl((k.share, k.speedup) for u in self.units for k in u.kernels)

    def build_digest(self) -> str:
        """What ``r3-apply`` builds from this plan, as a short hash: the emitted package
        carries it, so Spack's hash of the package changes with the plan (a ``+r3`` install
        from an earlier plan is not reused). Measurements and facts are left out."""
        units = [
            dict(unit, kernels=[{key: k[key] for key in PlannedKernel.BUILT} for k in unit["kernels"]])
            for unit in self.to_json()["units"]
        ]
        built: Json = {"format": self.format, "target": self.target, "units": units}
        if self.gpu:  # absent for host plans: their digests stay as they were
            built["gpu"] = self.gpu
        text = json.dumps(built, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_json(self) -> Json:
        d: Json = {
            "format": self.format,
            "target": self.target,
            "facts": self.facts,
            "units": [u.to_json() for u in self.units],
        }
        if self.gpu:
            d["gpu"] = self.gpu
        return d

    @classmethod
    def from_json(cls, data: Json) -> "Plan":
        units = [PlannedUnit.from_json(u) for u in data.get("units", [])]
        return cls(
            data["target"], units, data.get("format", PLAN_FORMAT), dict(data.get("facts") or {}), data.get("gpu")
        )


def amdahl(shares_and_speedups: Iterable[Tuple[float, float]]) -> float:
    """The application's speedup if each kernel's share of the run shrinks by its speedup
    and the rest of the run stays as it was."""
    saved = sum(share * (1.0 - 1.0 / speedup) for share, speedup in shares_and_speedups if speedup > 0)
    return 1.0 / max(1e-9, 1.0 - saved)


def load_plan(path: str) -> Plan:
    with open(path) as f:
        return Plan.from_json(json.load(f))

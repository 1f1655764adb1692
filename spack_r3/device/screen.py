"""Reject before GPU time: a candidate's code for each GPU target, and why it cannot run
there well (it spills) or at all (its geometry cannot launch).

``screen(unit, pipeline, geometry, targets)`` compiles the unit's device side for each
target (``deviceir``), generates code under the candidate's pipeline (``codegen``) and
judges each kernel: rejected when it spills registers, when no SM/CU can hold a block of
its geometry, or when it does not compile for the target; else accepted, with its
resources and theoretical occupancy. Code that calls a device math function no library
here defines (``DeviceIR.unresolved``: ROCm's device libraries not installed) is never
rejected on its figures, which are not the real code's: it is accepted, with what is
unresolved named.
"""

import re
from dataclasses import dataclass, field
from typing import Optional, Tuple

from ..errors import R3Error
from .codegen import generate
from .deviceir import device_ir
from .occupancy import Geometry, Occupancy, Resources, occupancy


@dataclass
class DeviceUnit:
    """A unit with device code: its source and the compile command that built it."""

    source: str
    command: Tuple[str, ...] = ()
    cwd: Optional[str] = None
    _irs: dict = field(default_factory=dict, repr=False, compare=False)

    def ir(self, target):
        """The unit's DeviceIR for ``target`` (compiled once per target)."""
        if target.name not in self._irs:
            self._irs[target.name] = device_ir(self.source, list(self.command) or None, target, self.cwd)
        return self._irs[target.name]


@dataclass
class Verdict:
    target: str
    kernel: str
    ok: bool
    reason: str = ""  # why rejected
    resources: Optional[Resources] = None
    occupancy: Optional[Occupancy] = None
    unresolved: Tuple[str, ...] = ()  # device library calls left unresolved: the figures are not the real code's

    def to_json(self):
        return {
            "target": self.target,
            "kernel": self.kernel,
            "ok": self.ok,
            "reason": self.reason,
            "resources": self.resources.to_json() if self.resources else None,
            "occupancy": self.occupancy.to_json() if self.occupancy else None,
            "unresolved": list(self.unresolved),
        }


_REGION = re.compile(r"^__omp_offloading_[0-9a-f]+_[0-9a-f]+_(.*?)(?:_l\d+)?$")


def matches(kernel, wanted):
    """Whether a device kernel's symbol is the one ``wanted`` names: the symbol, its
    demangled name, or the function an OpenMP region's kernel is named after
    (``__omp_offloading_<device>_<file>_<function>_l<line>``: the device and file ids
    differ between the build that recorded it and a compile of the same file elsewhere,
    and a source patch moves lines, so two region kernels match by their function)."""
    if not wanted or kernel == wanted:
        return True
    here, there = _REGION.match(kernel), _REGION.match(wanted)
    if here and (there.group(1) if there else wanted) == here.group(1):
        return True
    from .. import cxxnames

    try:
        if cxxnames.demangle(kernel).split("(")[0] == wanted:
            return True
    except Exception:  # a name no demangler reads is compared as it is
        pass
    return False


def screen(unit, pipeline, geometry, targets, kernel=None):
    """[Verdict] for each target and each of the unit's kernels (``kernel``: only those it
    names). A target the unit does not compile for is one rejected verdict with the reason."""
    geometry = geometry or Geometry()
    verdicts = []
    for target in targets:
        try:
            dev = unit.ir(target)
            code = generate(dev, pipeline, geometry.max_registers, geometry.threads)
        except R3Error as err:
            verdicts.append(Verdict(target.name, kernel or "*", False, str(err)))
            continue
        names = [k for k in sorted(code.resources) if matches(k, kernel)]
        if not names:
            verdicts.append(
                Verdict(target.name, kernel or "*", False, "no device kernel %s in %s" % (kernel or "", unit.source))
            )
        for name in names:
            verdicts.append(judge(name, target, code.resources[name], geometry, dev.unresolved_in(name)))
    return verdicts


def judge(name, target, res, geometry, unresolved=()):
    """The Verdict of one kernel's resources on ``target`` at ``geometry``; ``unresolved``:
    the device library calls its code leaves unresolved (then never rejected: an
    unresolved call costs registers and stack the real, linked code does not)."""
    occ = occupancy(res, target, geometry)
    if unresolved:
        return Verdict(target.name, name, True, "", res, occ, tuple(unresolved))
    if res.spills:
        cap = " with at most %d registers" % geometry.max_registers if geometry.max_registers else ""
        if target.vendor == "nvidia":
            what = "%d bytes spill stores, %d bytes spill loads" % (res.spill_stores, res.spill_loads)
        else:
            what = "%d registers spilled" % res.spill_stores
        return Verdict(target.name, name, False, "spills on %s%s: %s" % (target, cap, what), res, occ)
    if not occ.launchable:
        return Verdict(
            target.name,
            name,
            False,
            "cannot launch on %s at %d threads: %s" % (target, geometry.threads_for(res), occ.reason),
            res,
            occ,
        )
    return Verdict(target.name, name, True, "", res, occ)


def rejection(verdicts):
    """One line naming why a candidate is rejected (the first rejected verdict), or None."""
    for v in verdicts:
        if not v.ok:
            return "%s: %s" % (v.kernel, v.reason) if v.kernel != "*" else v.reason
    return None

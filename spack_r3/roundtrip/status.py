"""``spack r3 status``: tuned packages, their targets and speedups, and which are stale.

A tuned variant is stale when what it was measured on changed: the package's version
(the recipe now prefers another), the compiler (another clang than the one it was tuned
with), the source (a tuned unit differs from the one recorded, or its patch no longer
applies to it), or r3 itself (the package was emitted by an r3 whose build stages differ
from this one's: Spack builds it again with these, so its speedups were measured on
other code). A kernel specialized on recorded arguments is flagged too when its guard
never matched in the check's runs (the application ran with other sizes).
"""

import hashlib
import os
import re
from dataclasses import asdict, dataclass, field
from typing import List, Optional

from ..emit.apply import toolchain_digest
from ..sourcepatch import PatchError, apply_patch
from ..toolchain import clang_release, find_clang
from .emit import tuned_plans


@dataclass
class KernelStatus:
    """One tuned kernel: replay's speedup and, after a check, its speedup inside the application."""

    kernel: str
    predicted: float
    measured: Optional[float] = None
    measured_min: Optional[float] = None
    measured_max: Optional[float] = None


@dataclass
class TargetStatus:
    package: str
    target: str
    kernels: List[str]
    predicted_app_speedup: float
    measured_app_speedup: Optional[float]
    version: Optional[str]
    compiler: Optional[str]
    stale: List[str] = field(default_factory=list)  # why, one line each; empty: current
    kernel_speedups: List[KernelStatus] = field(default_factory=list)

    def to_json(self):
        return asdict(self)


def preferred_version(recipe_text):
    """The version Spack would pick from a recipe's ``version(...)`` lines (preferred=True
    first, else the highest), or None."""
    found = re.findall(r"^\s*version\(\s*[\"']([^\"']+)[\"']([^)]*)\)", recipe_text, re.M)
    preferred = [v for v, rest in found if re.search(r"preferred\s*=\s*True", rest)]
    if preferred:
        return preferred[0]
    numeric = [v for v, _ in found if re.match(r"^\d", v)]

    def key(v):
        return [int(p) if p.isdigit() else -1 for p in re.split(r"[.-]", v)]

    return max(numeric, key=key) if numeric else (found[0][0] if found else None)


def _clang_version():
    try:
        return clang_release(find_clang())
    except Exception:  # no clang: the compiler is not checked
        return None


def status(repo_root, recipe_text_of=None, package=None):
    """One TargetStatus per (package, target) in the tuned repository.
    ``recipe_text_of(name)``: the original recipe's text (None: the version is not checked)."""
    clang = _clang_version()
    current = None  # this r3's toolchain_digest (it hashes r3's build sources): read once, when needed
    out = []
    for name, plans in sorted(tuned_plans(repo_root).items()):
        if package and name != package:
            continue
        emitted_by = _emitted_toolchain(repo_root, name)
        if emitted_by:
            current = current or toolchain_digest()
        for target, plan in sorted(plans.items()):
            facts = plan.facts
            check = facts.get("check") or {}
            # After a check, its prediction: from the timed build's shares, where a tuned kernel
            # called by another counts once (the recorded shares count it in both).
            st = TargetStatus(
                name,
                target,
                [k.symbol for u in plan.units for k in u.kernels],
                check.get("predicted_app_speedup") or plan.predicted_app_speedup(),
                check.get("app_speedup"),
                facts.get("version"),
                facts.get("compiler"),
            )
            st.kernel_speedups = kernel_speedups(plan)
            text = recipe_text_of(name) if recipe_text_of else None
            now = preferred_version(text) if text else None
            if now and facts.get("version") and now != facts["version"]:
                st.stale.append("version: tuned on %s, the recipe now prefers %s" % (facts["version"], now))
            tuned_clang = (facts.get("compiler") or "").partition("@")[2]
            if clang and tuned_clang and clang != tuned_clang:
                st.stale.append("compiler: tuned with clang %s, this machine's is %s" % (tuned_clang, clang))
            if emitted_by and emitted_by != current:
                st.stale.append(
                    "r3: emitted by an r3 that builds tuned units differently (toolchain %s, this "
                    "one's %s); a build now uses this one's stages, not the measured ones" % (emitted_by, current)
                )
            st.stale += _source_changes(plan, repo_root, name)
            st.stale += unmatched_guards(plan)
            out.append(st)
    return out


def _emitted_toolchain(repo_root, name):
    """The ``R3_TOOLCHAIN`` digest the emitted package.py carries (None: an older r3's)."""
    from ..spack.repos import open_repo

    repo = open_repo(repo_root)
    try:
        with open(repo.recipe_path(name)) as f:
            found = re.search(r"^R3_TOOLCHAIN = ['\"]([0-9a-f]+)['\"]", f.read(), re.M)
    except (OSError, AttributeError):
        return None
    return found.group(1) if found else None


def kernel_speedups(plan):
    """Each tuned kernel's replay speedup, with the check's measurement inside the
    application beside it when the check timed it (``facts.check.kernels``)."""
    timed = {k["kernel"]: k for k in ((plan.facts.get("check") or {}).get("kernels") or [])}
    out = []
    for unit in plan.units:
        for k in unit.kernels:
            t = timed.get(k.symbol)
            out.append(
                KernelStatus(
                    k.symbol, k.speedup, *((t["app_speedup"], t["app_speedup_min"], t["app_speedup_max"]) if t else ())
                )
            )
    return out


def unmatched_guards(plan):
    """Kernels specialized on recorded arguments whose guard never matched in the check's
    runs: the application ran with other sizes than the recording, so the tuned clone never
    ran (the original did, correctly)."""
    out = []
    for g in (plan.facts.get("check") or {}).get("guards") or []:
        if g["calls"] and not g["hits"]:
            out.append(
                "guard: %s is specialized on recorded arguments that none of its %d calls in the check "
                "run had (the run used other sizes than the recording): its original ran" % (g["kernel"], g["calls"])
            )
    return out


def _source_changes(plan, repo_root, name):
    """Tuned units whose source (in the record build's kept stage) changed, or whose patch
    no longer applies there."""
    root = plan.facts.get("source_root")
    if not root or not os.path.isdir(root):
        return []
    from ..spack.repos import open_repo

    repo = open_repo(repo_root)
    directory = os.path.dirname(repo.recipe_path(name)) if repo else ""
    out = []
    for unit in plan.units:
        path = os.path.join(root, unit.source)
        try:
            with open(path, errors="surrogateescape") as f:
                text = f.read()
        except OSError:
            out.append("source: %s is gone from %s" % (unit.source, root))
            continue
        want = (plan.facts.get("sources") or {}).get(unit.source)
        if want and hashlib.sha256(text.encode(errors="surrogateescape")).hexdigest() != want:
            out.append("source: %s changed since tuning" % unit.source)
        if unit.patch:
            try:
                with open(os.path.join(directory, unit.patch)) as f:
                    apply_patch(text, f.read())
            except (OSError, PatchError) as err:
                out.append("patch: %s no longer applies to %s (%s)" % (unit.patch, unit.source, err))
    return out

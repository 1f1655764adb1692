"""``spack r3 status``: tuned packages, their targets and speedups, and which are stale.

A tuned variant is stale when what it was measured on changed: the package's version
(the recipe now prefers another), the compiler (another clang than the one it was tuned
with), the source (a tuned unit differs from the one recorded, or its patch no longer
applies to it), or r3 itself (the package was emitted by an r3 whose build stages differ
from this one's: Spack builds it again with these, so its speedups were measured on
other code). A kernel specialized on recorded arguments is flagged too when its guard
never matched in the check's runs (the application ran with other sizes).

What it calls current is verified, not assumed: each plan's build digest is recomputed and
compared with the one package.py names for it (``R3_PLANS``: what Spack's hash of the
package follows), and the patches each names with the other's. A mismatch (a package.py
and a plan of two emits) is reported: Spack would reuse a ``+r3`` install of the other plan.
"""

import hashlib
import os
import re
from dataclasses import asdict, dataclass, field
from typing import List, Optional

from ..emit.apply import toolchain_digest
from ..emit.plan import Plan
from ..sourcepatch import PatchError, apply_patch
from ..toolchain import clang_release, find_clang
from . import pkgtxn


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
    ``recipe_text_of(name)``: the original recipe's text (None: the version is not checked).

    Each package is read as one version of its directory (``pkgtxn.snapshot``), and what
    it claims is verified: each plan's digest, recomputed, is the one package.py names
    for it (``disagreements``)."""
    from ..spack.repos import open_repo

    clang = _clang_version()
    current = None  # this r3's toolchain_digest (it hashes r3's build sources): read once, when needed
    out = []
    repo = open_repo(repo_root)
    for name in repo.package_names() if repo else []:
        if package and name != package:
            continue
        recipe = repo.recipe_path(name)
        files = pkgtxn.snapshot(os.path.dirname(recipe))
        text = (files or {}).get(os.path.basename(recipe))
        if text is None:
            continue  # removed meanwhile
        text = text.decode(errors="surrogateescape")
        plans = _plans_of(files)
        named = named_plans(text)
        emitted_by = toolchain_of(text)
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
            st.stale += disagreements(plan, named, text, files)
            recipe_text = recipe_text_of(name) if recipe_text_of else None
            now = preferred_version(recipe_text) if recipe_text else None
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
            st.stale += _source_changes(plan, files)
            st.stale += unmatched_guards(plan)
            out.append(st)
        for target, (plan_file, digest) in sorted((named or {}).items()):
            if target not in plans:  # named, and no plan of that name reads beside it
                out.append(
                    TargetStatus(
                        name,
                        target,
                        [],
                        1.0,
                        None,
                        None,
                        None,
                        [
                            "plan: package.py builds %s (digest %s), which is missing or unreadable"
                            % (plan_file, digest)
                        ],
                    )
                )
    out += _interrupted(repo, package)
    return out


PLANS_VARIABLE = "R3_PLANS"


def named_plans(text):
    """What package.py builds: its ``R3_PLANS`` ({plan name: (plan file, build digest)}),
    or None when it names none (a package from an r3 before plan digests, or not ours)."""
    import ast

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return {}  # (names nothing readable: each plan beside it is then not built)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == PLANS_VARIABLE for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
                return {str(k): (str(v[0]), str(v[1])) for k, v in value.items()}
            except (ValueError, TypeError, IndexError, AttributeError, SyntaxError):
                return {}
    return None


def _patches_named(text):
    """{patch file: the spec keys it applies for} of package.py's ``patch(...)`` lines."""
    return {m.group(1): m.group(2).replace("+r3", "", 1).strip() for m in _PATCH_LINE.finditer(text)}


_PATCH_LINE = re.compile(r"""^\s*patch\(\s*["']([^"']+)["']\s*,\s*when\s*=\s*["']([^"']*)["']""", re.M)


def disagreements(plan, named, text, files):
    """Where package.py and the plan beside it disagree, one line each: the plan's digest
    (recomputed from the plan) is not the one package.py names for it (Spack would reuse a
    ``+r3`` install of the plan package.py names), package.py does not build the plan, or a
    patch one names the other does not, or is missing. ``named``: ``named_plans(text)``
    (None: a package from before plan digests, not checked)."""
    if named is None:
        return []
    name = plan.name()
    plan_file = "r3-%s.json" % name
    out = []
    if name not in named:
        out.append(
            "plan: %s is not among the plans package.py builds (%s)" % (plan_file, ", ".join(sorted(named)) or "none")
        )
    elif named[name][1] != plan.build_digest():
        out.append(
            "digest: %s builds %s, package.py names %s for it (an interrupted emit?): Spack would take an "
            "install of the other plan for this one" % (plan_file, plan.build_digest(), named[name][1])
        )
    applied = {p for p, keys in _patches_named(text).items() if keys == plan.spec_keys()}
    wanted = {u.patch for u in plan.units if u.patch}
    for patch in sorted(wanted - applied):
        out.append("patch: the plan names %s, package.py does not apply it" % patch)
    for patch in sorted(applied - wanted):
        out.append("patch: package.py applies %s for %s, the plan does not name it" % (patch, plan.spec_keys()))
    for patch in sorted((wanted | applied) - set(files)):
        out.append("patch: %s is missing" % patch)
    return out


def _plans_of(files):
    """{plan name: Plan} of a package directory's files (plans that do not read: left out)."""
    import json

    out = {}
    for fname, data in sorted(files.items()):
        if not (fname.startswith("r3-") and fname.endswith(".json")):
            continue
        try:
            plan = Plan.from_json(json.loads(data))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        out[plan.name()] = plan
    return out


def _interrupted(repo, package):
    """A row for each package whose emit was killed between the two renames of its swap
    (where the file system could not exchange them: ``pkgtxn``): no package until the next emit."""
    out = []
    folder = repo.packages_dir if repo else None
    if not folder or not os.path.isdir(folder):
        return out
    for entry in sorted(os.listdir(folder)):
        if not (entry.startswith(pkgtxn.PREFIX) and entry.endswith(".new")):
            continue
        dirname = entry[len(pkgtxn.PREFIX) : -len(".new")]
        name = dirname if repo.layout == "v1" else dirname.lstrip("_").replace("_", "-")
        if (package and name != package) or not pkgtxn.interrupted(os.path.join(folder, dirname)):
            continue
        why = "emit: killed while swapping the package in; spack r3 emit %s puts the new one in place" % name
        out.append(TargetStatus(name, "-", [], 1.0, None, None, None, [why]))
    return out


def toolchain_of(text):
    """The ``R3_TOOLCHAIN`` digest the emitted package.py carries (None: an older r3's)."""
    found = re.search(r"^R3_TOOLCHAIN = ['\"]([0-9a-f]+)['\"]", text, re.M)
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


def _source_changes(plan, files):
    """Tuned units whose source (in the record build's kept stage) changed, or whose patch
    (in ``files``, the package directory's) no longer applies there."""
    root = plan.facts.get("source_root")
    if not root or not os.path.isdir(root):
        return []
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
        if unit.patch and unit.patch in files:
            try:
                apply_patch(text, files[unit.patch].decode(errors="replace"))
            except PatchError as err:
                out.append("patch: %s no longer applies to %s (%s)" % (unit.patch, unit.source, err))
    return out

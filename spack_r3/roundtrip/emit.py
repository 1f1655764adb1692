"""``spack r3 emit <package>``: the winners of ``r3 tune`` as a tuned variant in a Spack repo.

    <repo>/packages/<name>/package.py     inherits the recipe; variant r3; patch(..., when=
                                          "+r3 target=<uarch>"); r3-apply when +r3
    <repo>/packages/<name>/r3-<uarch>.json the build plan of one target (``emit.plan``)
    <repo>/packages/<name>/r3-<uarch>-<n>.patch  the source rewrites, relative to the source root

A plan of device kernels (OpenMP target regions) is keyed to its GPU beside the
microarchitecture: ``r3-<uarch>-sm_90.json``, ``when="+r3 target=<uarch> cuda_arch=90"``.

The package is written again from every ``r3-*.json`` beside it, so emitting for a
second target adds to the package instead of replacing it. Each emit (and each withdraw,
and each check kept in a plan) rewrites the package's directory as one transaction
(``pkgtxn``): a copy beside it is edited, fsynced and swapped in with one rename, so a kill
at any point leaves the old package or the new one, never a plan of one beside the
package.py of the other; what a killed emit left is cleaned by the next.
"""

import datetime
import glob
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field, replace
from typing import List

from .. import backends
from ..device.targets import gpu_target
from ..errors import R3Error
from ..report import warn
from ..emit.apply import toolchain_digest
from ..emit.plan import Plan, PlannedKernel, PlannedUnit, load_plan
from ..search.results import load_result
from ..sourcepatch import Composer, PatchError, make_patch
from ..replay.source import unit_text
from . import pkgtxn
from .record import latest_spack_record
from ..spack.repos import create_repo
from ..spack.wrap import tuned_package

NAMESPACE = "r3tuned"


def default_repo(workspace):
    return workspace.repo_dir(NAMESPACE)


@dataclass
class Emitted:
    package: str
    target: str
    recipe: str
    plan: Plan
    plan_path: str
    targets: List[str] = field(default_factory=list)  # every target the package now has
    skipped: List[str] = field(default_factory=list)  # "kernel: why it is not in the plan"


def build_plan(workspace, package, gpu=None, gpu_required=False, exclude=None, alternate=None):
    """(Plan, skipped lines, {patch name: text}) from the package's latest record and the
    tune results of its captures. ``gpu`` (sm_90, gfx942; default: the one the recorded
    spec names, ``cuda_arch=90``) keys a plan of device kernels; host plans have none
    (``gpu_required``: a ``gpu`` for a plan of host kernels is an error, not ignored).
    ``exclude``: {kernel: why} left out (the check in the application took them out);
    ``alternate``: {kernel: n}, the kernel's n-th alternate (``KernelResult.alternates``,
    from 1) in its winner's place (the check found the winner slower in the application)."""
    exclude, alternate = exclude or {}, alternate or {}
    record, facts = latest_spack_record(workspace, package)
    if record is None:
        raise R3Error(
            "nothing recorded for %s: run spack r3 record %s (or spack r3 tune %s) first" % (package, package, package)
        )
    target = facts.get("target") or "unknown"
    plan = Plan(target, facts=dict(facts, emitted=datetime.datetime.now().isoformat(timespec="seconds")))
    asked = gpu_target(gpu) if gpu else None
    device = False  # a planned kernel runs on a device (an OpenMP target region)
    skipped, units, texts, patches = [], {}, {}, {}
    for capture in record.captures:
        result = load_result(workspace, capture.id, strict=True)  # a torn result is said, not "not tuned"
        if result is None or result.captures[:1] != [capture.id]:
            continue  # not tuned, or another instance of a kernel counted already
        if not result.won:  # (decided where the result was made: noise.beats_build)
            skipped.append("%s: nothing beat the baseline" % result.kernel)
            continue
        if result.kernel in exclude:
            skipped.append("%s: %s" % (result.kernel, exclude[result.kernel]))
            continue
        variant, speedup = result.variant, result.speedup
        if alternate.get(result.kernel):
            chosen = result.alternates[alternate[result.kernel] - 1]
            variant, speedup = chosen.variant, chosen.speedup
        rel = _relative(capture.source_file, facts.get("source_root"))
        unit = units.setdefault(rel, PlannedUnit(rel))
        directory = workspace.capture_dir(capture.id)
        if rel not in texts:
            original = unit_text(capture, directory)
            texts[rel] = Composer(original)
            plan.facts.setdefault("sources", {})[rel] = hashlib.sha256(original.encode()).hexdigest()
        if variant.source_patch:
            clash = {k for k, v in variant.source_defines.items() if unit.defines.get(k, v) != v}
            if clash:
                skipped.append(
                    "%s: its knobs clash with another kernel's: %s" % (result.kernel, ", ".join(sorted(clash)))
                )
                continue
            try:  # rewrites of different kernels of one unit must compose
                texts[rel].add(variant.source_patch)
            except PatchError as err:
                skipped.append("%s: its rewrite does not compose with the unit's others (%s)" % (result.kernel, err))
                continue
            unit.defines.update(variant.source_defines)
            unit.openmp = unit.openmp or variant.source_openmp
        launch = variant.launch
        if variant.source_openmp and not launch.threads:  # replay ran it on the recorded threads, not the runtime's
            launch = replace(launch, threads=capture.launch.get("threads") or 1)
        unit.kernels.append(
            PlannedKernel(
                result.kernel,
                variant.pipeline,
                launch,
                variant.pipeline.relaxes_fp,
                speedup,
                result.share,
                variant.source_rule,
            )
        )
        device = device or backends.of_capture(capture) is not backends.HOST
    if asked and gpu_required and units and not device:
        raise R3Error(
            "--gpu %s: the tuned kernels of %s are host kernels; a GPU target keys device kernels only"
            % (asked, package)
        )
    key = asked or (recorded_gpu(facts.get("spec")) if device else None)
    plan.gpu = key.name if key else None  # host plans: no GPU, their files and digests as before
    for n, (rel, unit) in enumerate(sorted(units.items())):
        original, changed = texts[rel].original, texts[rel].text
        if changed != original:
            unit.patch = "r3-%s-%d.patch" % (plan.name(), n)
            patches[unit.patch] = make_patch(original, changed, rel)
        plan.units.append(unit)
    if not plan.units:
        if skipped:  # tuned, and no winner to build
            raise R3Error("no tuned kernel of %s to build: %s" % (package, "; ".join(skipped)))
        raise R3Error("nothing tuned for %s: run spack r3 tune %s first" % (package, package))
    return plan, skipped, patches


def recorded_gpu(spec):
    """The GPU target a recorded Spack spec names (``cuda_arch=90``, ``amdgpu_target=gfx942``),
    or None: one only, a spec built for several GPUs keys no single one."""
    found = re.findall(r"\b(?:cuda_arch|amdgpu_target)=([\w,]+)", spec or "")
    names = [n for value in found for n in value.split(",") if n and n != "none"]
    try:
        return gpu_target(names[0]) if len(names) == 1 else None
    except R3Error:  # a GPU this r3 has no limits for: keyed to the CPU only, as before
        return None


def _relative(path, source_root):
    if source_root and path.startswith(source_root.rstrip(os.sep) + os.sep):
        return os.path.relpath(path, source_root)
    return os.path.basename(path)


def emit(workspace, package, repo_root=None, layout=None, gpu=None, gpu_required=False, exclude=None, alternate=None):
    """Write (or add to) the tuned package, as one transaction (``pkgtxn.rewrite``: a kill
    at any point leaves the old package or the new one); returns Emitted. ``exclude`` and
    ``alternate``: see ``build_plan``."""
    plan, skipped, patches = build_plan(workspace, package, gpu, gpu_required, exclude, alternate)
    facts = plan.facts
    repo = create_repo(repo_root or default_repo(workspace), NAMESPACE, layout or facts.get("layout") or "v1")
    if repo.namespace == facts.get("namespace"):
        raise R3Error("the tuned repository cannot be the package's own (%s)" % repo.path)
    recipe = repo.recipe_path(package)
    directory = os.path.dirname(recipe)
    with pkgtxn.rewrite(directory) as stage:
        for old in glob.glob(os.path.join(stage, "r3-%s-[0-9]*.patch" % plan.name())):
            os.remove(old)  # this target's earlier rewrites (not those of a GPU plan beside it)
        for other in _plans(stage, "r3-%s*.json" % plan.target).values():
            # A CPU target has one plan keyed to no GPU, or plans keyed to GPUs: never both, or a
            # spec with the GPU would get both plans' patches of the same sources.
            if other.target == plan.target and bool(other.gpu) != bool(plan.gpu):
                for path in [os.path.join(stage, "r3-%s.json" % other.name())] + glob.glob(
                    os.path.join(stage, "r3-%s-[0-9]*.patch" % other.name())
                ):
                    os.remove(path)
                skipped.append("the plan for %s is replaced by this one for %s" % (other.spec_keys(), plan.spec_keys()))
        for name, text in patches.items():
            _write(os.path.join(stage, name), text)
        pkgtxn.pause("writing")
        _write(os.path.join(stage, "r3-%s.json" % plan.name()), _json(plan.to_json()))
        plans = _plans(stage)
        # The parent is imported as its own repository's layout says (records from before
        # ``parent_layout`` was kept: their record repository's layout, which was the same).
        parent_layout = facts.get("parent_layout") or facts.get("layout") or repo.layout
        _write(
            os.path.join(stage, os.path.basename(recipe)),
            tuned_package(facts["namespace"], package, parent_layout, plans, toolchain_digest()),
        )
    plan_path = os.path.join(directory, "r3-%s.json" % plan.name())
    return Emitted(package, plan.target, recipe, plan, plan_path, sorted(plans), skipped)


def withdraw(emitted):
    """Take ``emitted``'s plan (its target's) out of the tuned package: its plan and patches
    go, and the package is written again from the plans left; with none left the package
    goes (one transaction, as emit's). No variant is left that the check found slower than
    the untuned build (the report says why: ``roundtrip.verdict``). Returns the plans left."""
    directory = os.path.dirname(emitted.recipe)
    name = emitted.plan.name()
    with pkgtxn.rewrite(directory) as stage:
        for path in [os.path.join(stage, os.path.basename(emitted.plan_path))] + glob.glob(
            os.path.join(stage, "r3-%s-[0-9]*.patch" % name)
        ):
            if os.path.exists(path):
                os.remove(path)
        plans = _plans(stage)
        if plans:
            facts = emitted.plan.facts
            parent_layout = facts.get("parent_layout") or facts.get("layout") or "v1"
            _write(
                os.path.join(stage, os.path.basename(emitted.recipe)),
                tuned_package(facts["namespace"], emitted.package, parent_layout, plans, toolchain_digest()),
            )
        else:  # an empty stage: the package goes
            for entry in os.listdir(stage):
                path = os.path.join(stage, entry)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
    return sorted(plans)


def record_check(emitted, check):
    """Keep the application check in the plan (``spack r3 status`` shows it)."""
    emitted.plan.facts["check"] = check.to_json()
    with pkgtxn.rewrite(os.path.dirname(emitted.plan_path)) as stage:
        _write(os.path.join(stage, os.path.basename(emitted.plan_path)), _json(emitted.plan.to_json()))


def _plans(directory, pattern="r3-*.json"):
    """{plan name: Plan} of the plans in ``directory`` (a stage). A plan that does not read
    (a torn file: written by hand, or an r3 from before emit was one transaction) is set
    aside beside the package as ``.r3-corrupt-<file>-<time>`` (Spack skips dot-names),
    said in one line, and left out: the package is written again from the plans that read."""
    plans = {}
    for path in sorted(glob.glob(os.path.join(directory, pattern))):
        try:
            plan = load_plan(path)
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            aside = os.path.join(
                os.path.dirname(os.path.abspath(directory)),
                ".r3-corrupt-%s-%d" % (os.path.basename(path), int(time.time())),
            )
            os.replace(path, aside)
            warn("warning: the plan %s does not read (%s): set aside as %s" % (os.path.basename(path), err, aside))
            continue
        plans[plan.name()] = plan
    return plans


def _write(path, text):
    """A file of the stage (``pkgtxn`` fsyncs it before the swap)."""
    with open(path, "w") as f:
        f.write(text)


def _json(data):
    return json.dumps(data, indent=1, sort_keys=True) + "\n"

"""After ``spack r3 tune`` has tuned a spec's kernels: the tuned variant emitted into a
Spack repository, then measured in the application against the untuned build; a kernel
slower there is taken out (or replaced by its next confirmed candidate) and the rest measured
again, and a variant that is not faster is withdrawn (``verdict.act``). The command reads
this flow's outcome as a dict (``r3 tune --json``'s part) and prints ``spack_part_text``."""

from dataclasses import dataclass, field
from typing import List, Optional

from .. import cxxnames
from ..errors import R3Error
from ..report import table
from .check import check_app
from .emit import emit, record_check
from .record import latest_spack_record, package_name
from .verdict import act


@dataclass
class CheckRequest:
    """What the emit and the check need of ``r3 tune``'s command line."""

    spec: str
    run: Optional[str]  # the application's run command (None: no check in the application)
    repo: Optional[str] = None  # the Spack repository the variant goes to (None: the workspace's)
    gpus: List[str] = field(default_factory=list)  # --gpu targets of device kernels: one keys the variant
    check_pairs: int = 0  # +r3/~r3 pairs in the application (0: no check)
    kernel_pairs: int = 0
    keep_variant: bool = False  # --keep-variant: report, never take a kernel out
    spack_repos: List[str] = field(default_factory=list)
    spack_config: Optional[List[str]] = None


def emit_and_check(ws, request, results, progress):
    """After tuning a spec: the tuned variant into the repository, then +r3 against ~r3 in
    the application; a kernel slower there is taken out and the rest measured again, and a
    variant that is not faster is withdrawn (``roundtrip.verdict``). What it did, as
    ``r3 tune --json`` reports it: the emitted variant, the verdict, the last check."""
    name = package_name(request.spec)
    gpus = request.gpus
    if len(gpus) > 1:
        progress("the tuned variant is keyed to no GPU: --gpu names %d (emit --gpu TARGET keys it to one)" % len(gpus))
    gpu = gpus[0] if len(gpus) == 1 else None

    def emit_once(exclude, alternate):
        done = emit(ws, name, request.repo, gpu=gpu, exclude=exclude, alternate=alternate)
        for line in done.skipped:
            progress("not emitted: " + line)
        progress("tuned variant of %s for target=%s: %s" % (name, done.target, done.recipe))
        return done

    try:
        done = emit_once({}, {})
    except R3Error as err:  # nothing beat the baseline: no variant to write
        progress("no tuned variant written: %s" % err)
        return {"emitted": None}
    out = {"emitted": emitted_json(done)}
    if request.check_pairs < 1 or not request.run:
        if request.check_pairs >= 1:
            progress("no application check: the record ran the package's tests, give --run CMD to time a run")
        return out
    _, facts = latest_spack_record(ws, name)
    repos = list(request.spack_repos) + [r for r in (facts or {}).get("repos", []) if r not in request.spack_repos]
    last = {}

    def check_once(emitted):
        check = check_app(
            ws,
            emitted,
            request.spec,
            request.run,
            pairs=request.check_pairs,
            user_scopes=request.spack_config,
            extra_repos=repos,
            repo_root=request.repo,
            say=progress,
            kernel_pairs=request.kernel_pairs,
        )
        record_check(emitted, check)
        last["emitted"] = emitted
        return check

    first = [done]
    verdict = act(
        lambda exclude, alternate: first.pop() if first else emit_once(exclude, alternate),
        check_once,
        {r.kernel: r for r in results},
        say=progress,
        acting=not request.keep_variant,
    )
    out["verdict"] = verdict.to_json()
    out["check"] = verdict.check
    out["emitted"] = emitted_json(last["emitted"]) if verdict.emitted else None
    return out


def emitted_json(done):
    return {
        "recipe": done.recipe,
        "target": done.target,
        "targets": done.targets,
        "skipped": done.skipped,
        "predicted_app_speedup": done.plan.predicted_app_speedup(),
    }


def spack_part_text(part):
    """What ``r3 tune`` prints of the emit and its checks (\"\": nothing)."""
    lines = []
    verdict = part.get("verdict") or {}
    emitted = part.get("emitted")
    if emitted:
        lines.append("tuned variant: %s (target=%s)" % (emitted["recipe"], emitted["target"]))
    elif verdict.get("why"):
        lines.append("no tuned variant: %s" % verdict["why"])
    if not emitted and not verdict:
        return "\n".join(lines)
    checks = verdict.get("checks") or ([part["check"]] if part.get("check") else [])
    for i, check in enumerate(checks):
        # (one check of the variant left: unlabelled; else each check says which it was)
        lines += check_lines(check, "" if len(checks) == 1 and emitted else "check %d: " % (i + 1))
    taken = verdict.get("taken_out") or []
    if taken:
        lines.append(
            table(
                ["taken out of the variant", "check", "in the application", "replay", "why", "likely cause"],
                [
                    [
                        cxxnames.display(t["kernel"]),
                        t["round"],
                        "%.2fx [%.2f-%.2f]" % (t["app_speedup"], t["app_speedup_min"], t["app_speedup_max"]),
                        "%.2fx" % t["replay_speedup"],
                        t["why"],
                        t["cause"],
                    ]
                    for t in taken
                ],
            )
        )
    replaced = verdict.get("replaced") or []
    if replaced:
        lines.append(
            table(
                ["replaced in the variant", "check", "ran", "in the application", "by", "replay", "likely cause"],
                [
                    [
                        cxxnames.display(r["kernel"]),
                        r["round"],
                        r["was"],
                        "%.2fx" % r["app_speedup"],
                        r["now"],
                        "%.2fx" % r["replay_speedup"],
                        r["cause"],
                    ]
                    for r in replaced
                ],
            )
        )
    for f in verdict.get("flagged") or []:
        lines.append(
            "%s: %.2fx in the application against %.2fx in replay; likely cause: %s"
            % (cxxnames.display(f["kernel"]), f["app_speedup"], f["replay_speedup"], f["cause"])
        )
    return "\n".join(lines)


def check_lines(check, label):
    """One check of +r3 against ~r3 in the application: its line, then its kernels' table."""
    lines = [
        "%sapplication: untuned %.3fs, +r3 %.3fs: %.2fx [%.2f-%.2f] over %d pairs; replay predicted %.2fx "
        "(fidelity %.2f; kernel shares of the %s)"
        % (
            label,
            check["app_untuned_s"],
            check["app_tuned_s"],
            check["app_speedup"],
            check["app_speedup_min"],
            check["app_speedup_max"],
            check["pairs"],
            check["predicted_app_speedup"],
            check["fidelity"],
            check["shares_from"],
        )
    ]
    if check.get("kernels"):
        # the share the prediction weighs: the kernel as the outermost tuned one (check.py)
        rows = [
            [
                cxxnames.display(k["kernel"]),
                k["calls"],
                "%.1f%%" % (100 * k.get("outer_share", k["share"])),
                "%.4fs" % k["untuned_s"],
                "%.4fs" % k["tuned_s"],
                "%.2fx [%.2f-%.2f]" % (k["app_speedup"], k["app_speedup_min"], k["app_speedup_max"]),
                "%.2fx" % k["replay_speedup"],
                "%.2f" % k["fidelity"],
            ]
            for k in check["kernels"]
        ]
        lines.append(
            table(
                ["kernel in the application", "calls", "share", "untuned", "tuned", "speedup", "replay", "fidelity"],
                rows,
            )
        )
    return lines

"""Write the winners of r3 tune for a package into a Spack repository as its tuned
variant: a package that inherits the recipe, with variant r3, the source patches and the
tuned pipeline and launch settings keyed to the microarchitecture they were tuned on
(spack install <package>+r3 then builds exactly what was measured)."""

import json

from ..report import say
from ..userpaths import check_output_dir
from ..workspace import Workspace
from .common import add_json

description = "write the tuned variant of a package into a Spack repository"


def setup_parser(subparser):
    subparser.add_argument("package", help="package whose tuned kernels to emit (recorded with r3 record SPEC)")
    subparser.add_argument(
        "--repo",
        default=None,
        metavar="DIR",
        help="Spack repository to write (default: <workspace>/repos/r3tuned, namespace r3tuned; created if missing)",
    )
    subparser.add_argument(
        "--gpu",
        default=None,
        metavar="TARGET",
        help="the GPU device kernels (OpenMP target regions) were tuned for (sm_90, gfx942): "
        "their variant is keyed to it beside the CPU target (cuda_arch=90, "
        "amdgpu_target=gfx942); default: the one the recorded spec names, if any",
    )
    add_json(subparser)


def emit(args):
    from ..roundtrip.emit import emit as emit_package

    ws = Workspace(args.workspace)
    if args.repo:
        check_output_dir(args.repo, "--repo")
    done = emit_package(ws, args.package, args.repo, gpu=args.gpu, gpu_required=True)
    if args.json:
        print(
            json.dumps(
                {
                    "package": done.package,
                    "target": done.target,
                    "gpu": done.plan.gpu,
                    "keys": done.plan.spec_keys(),
                    "recipe": done.recipe,
                    "plan": done.plan_path,
                    "targets": done.targets,
                    "skipped": done.skipped,
                    "predicted_app_speedup": done.plan.predicted_app_speedup(),
                    "kernels": [k.to_json() for u in done.plan.units for k in u.kernels],
                },
                indent=1,
            )
        )
        return 0
    for line in done.skipped:
        say("==> not emitted: " + line)
    kernels = [k for u in done.plan.units for k in u.kernels]
    print(
        "%s: %d tuned kernel(s) for %s (targets now: %s), predicted application speedup %.2fx"
        % (
            done.package,
            len(kernels),
            done.plan.spec_keys(),
            ", ".join(done.targets),
            done.plan.predicted_app_speedup(),
        )
    )
    print("recipe: %s" % done.recipe)
    # fresh roots: Spack's reuse would take an earlier +r3 install, patches are not in its solve
    print(
        "build it: spack -C <a scope listing %s> install --fresh-roots %s+r3"
        % (done.recipe.rsplit("/packages/", 1)[0], done.package)
    )
    return 0

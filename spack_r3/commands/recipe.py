"""Retrieve the Spack recipe of a package, or generate one from its source.

If a configured Spack repository has the package, report it and stop (unless
--regenerate). Otherwise analyze the source tree, retrieve similar recipes as examples,
generate a package.py (with a model when one is configured, else rule-based), validate it
before Spack loads it, and refine it from real `spack spec` / `spack install` diagnostics
for up to --max-attempts attempts. Every attempt is kept in
<workspace>/recipes/<name>/attempt-N/.
"""

import json
import sys

from spack_r3.model import client as model_client
from spack_r3.recipe.pipeline import DEFAULT_NAMESPACE, RecipeRequest, make_recipe
from spack_r3.userpaths import check_output_dir
from spack_r3.workspace import Workspace

from spack_r3.errors import R3Error

from .common import MOST_ROUNDS, add_json, check_most

description = "retrieve or generate the Spack recipe of a package"


def setup_parser(subparser):
    subparser.add_argument("name", help="Spack package name")
    subparser.add_argument(
        "--source", default=None, help="source tree: a directory, a tarball (path or URL), or git+URL / *.git"
    )
    subparser.add_argument(
        "--repo",
        default=None,
        help="repository for a generated recipe (default: <workspace>/repo; created "
        "in the layout of the Spack at hand)",
    )
    subparser.add_argument(
        "--namespace", default=DEFAULT_NAMESPACE, help="namespace of a repository created here (default: %(default)s)"
    )
    subparser.add_argument(
        "--regenerate", action="store_true", help="generate a recipe even when a repository already has one"
    )
    subparser.add_argument(
        "--max-attempts", type=int, default=3, metavar="K", help="attempts of the refine loop (default: %(default)s)"
    )
    subparser.add_argument(
        "--examples",
        type=int,
        default=3,
        metavar="K",
        help="similar recipes retrieved as examples (default: %(default)s)",
    )
    subparser.add_argument("--no-install", action="store_true", help="stop after `spack spec` succeeds (no build)")
    subparser.add_argument(
        "--no-check", action="store_true", help="do not run the installed package's stand-alone test"
    )
    subparser.add_argument(
        "--spack-config",
        action="append",
        default=[],
        metavar="DIR",
        help="extra Spack configuration scope for every spack call (spack -C DIR); repeatable",
    )
    add_json(subparser)
    model_client.add_arguments(subparser)


def _print_human(res, out):
    if res.status == "existing":
        e = res.existing
        print("%s: recipe exists in repository %s: %s" % (res.name, res.namespace, res.recipe), file=out)
        print(
            "  build system: %s; versions: %s; variants: %s"
            % (res.build_system or "?", ", ".join(e["versions"][:8]) or "-", ", ".join(e["variants"]) or "-"),
            file=out,
        )
        return
    print(
        "%s: %s (%s project, %s, %d attempt(s))"
        % (res.name, res.status, res.build_system, res.generator, len(res.attempts)),
        file=out,
    )
    for a in res.attempts:
        extra = ""
        if a["fixes"]:
            extra = "; next: " + "; ".join(a["fixes"])
        elif a["reasons"]:
            extra = "; " + "; ".join(a["reasons"][:3])
        print("  attempt %d (%s): %s%s" % (a["number"], a["generator"], a["outcome"], extra), file=out)
    if res.unresolved:
        print("  not mapped to Spack packages: %s" % "; ".join(res.unresolved), file=out)
    if res.check_passed is not None:
        print("  installed package's check: %s" % ("passed" if res.check_passed else "FAILED"), file=out)
    print("  recipe: %s" % res.recipe, file=out)
    print("  attempts kept in: %s" % res.directory, file=out)


def recipe(args):
    if args.examples < 0:
        raise R3Error("--examples must be at least 0")
    check_most(args, {"max_attempts": MOST_ROUNDS, "examples": MOST_ROUNDS})
    model = model_client.resolve(args.llm_url, args.llm_model, args.llm_key, args.llm_timeout)
    request = RecipeRequest(
        name=args.name,
        source=args.source,
        repo=args.repo,
        namespace=args.namespace,
        regenerate=args.regenerate,
        max_attempts=args.max_attempts,
        examples=args.examples,
        install=not args.no_install,
        run_check=not args.no_check,
        model=model,
        spack_scopes=args.spack_config,
    )
    if args.repo:
        check_output_dir(args.repo, "--repo")
    check_output_dir(Workspace(args.workspace).root, "--workspace")
    ws = Workspace(args.workspace).ensure()
    progress = (lambda msg: None) if args.json else (lambda msg: print("==> " + msg, file=sys.stderr, flush=True))
    res = make_recipe(request, ws, progress)
    if args.json:
        print(json.dumps(res.to_dict(), indent=1, default=str))
    else:
        _print_human(res, sys.stdout)
    return 0 if res.ok else 1

"""Push a tuned package's +r3 build (the one the check measured) and its dependencies to
a Spack build cache, with the recipes and a configuration scope another Spack installs it
with: spack -C <mirror>/r3/scope install --cache-only /<hash> (roundtrip.publish)."""

import json

from ..report import say, warn
from ..workspace import Workspace
from .common import add_json, add_spack_arguments

description = "push a tuned package's +r3 build to a Spack build cache, for other users and nodes"


def setup_parser(subparser):
    subparser.add_argument("package", help="a package tuned in this workspace (spack r3 tune)")
    subparser.add_argument(
        "--mirror", required=True, metavar="DIR", help="the build cache: a directory (created if missing)"
    )
    subparser.add_argument(
        "--key",
        default=None,
        metavar="KEY",
        help="sign with this GPG key (spack gpg list); default: unsigned (installers then pass --no-check-signature)",
    )
    add_spack_arguments(subparser)
    add_json(subparser)


def publish(args):
    from ..roundtrip.publish import publish as push
    from ..userpaths import check_output_dir

    check_output_dir(args.mirror, "--mirror")
    done = push(
        Workspace(args.workspace),
        args.package,
        args.mirror,
        key=args.key,
        user_scopes=args.spack_config,
        extra_repos=args.spack_repo,
        # (progress on stderr when stdout carries the JSON)
        say=lambda line: (warn if args.json else say)("==> " + line),
    )
    # by its hash: exactly the build the check measured (a consumer's own solve of PKG+r3 may
    # choose another compiler or variant, which the cache has no binary of)
    install = "spack -C %s install --cache-only%s /%s" % (
        done.scope,
        "" if done.entry.signed else " --no-check-signature",
        done.entry.hash,
    )
    if args.json:
        print(
            json.dumps(
                {
                    "mirror": done.mirror,
                    "scope": done.scope,
                    "repos": done.repos,
                    "pushed": done.pushed,
                    "entry": done.entry.__dict__,
                    "install": install,
                },
                indent=1,
            )
        )
        return 0
    print(
        "%s+r3 target=%s (/%s) is in the build cache %s%s"
        % (
            done.entry.package,
            done.entry.target,
            done.entry.hash[:7],
            done.mirror,
            "" if done.entry.signed else " (unsigned)",
        )
    )
    print("install it elsewhere: %s" % install)
    return 0

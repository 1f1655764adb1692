"""Which packages have tuned variants, for which targets, with which speedups (replay's
prediction and, after a check, the application's), and which are stale: the package
version, the compiler or a tuned source changed since tuning, a patch no longer applies,
or package.py does not name the digest of the plan beside it (``roundtrip.status``)."""

import json
import os

from .. import cxxnames
from ..report import table
from ..workspace import Workspace
from .common import add_json

description = "tuned packages, their targets and speedups, and which are stale"


def setup_parser(subparser):
    subparser.add_argument("package", nargs="?", default=None, help="only this package")
    subparser.add_argument(
        "--repo", default=None, metavar="DIR", help="tuned Spack repository (default: <workspace>/repos/r3tuned)"
    )
    subparser.add_argument(
        "--spack-config",
        action="append",
        default=[],
        metavar="DIR",
        help="extra Spack configuration scope (to find the original recipes)",
    )
    subparser.add_argument(
        "--mirror",
        default=None,
        metavar="DIR",
        help="a build cache spack r3 publish wrote to: which targets it serves, whether this machine "
        "can run each, and which are stale against this workspace's tuned packages",
    )
    add_json(subparser)


def status(args):
    from ..errors import R3Error
    from ..roundtrip.emit import default_repo
    from ..roundtrip.status import status as tuned_status

    ws = Workspace(args.workspace)
    if args.mirror:
        return _cache_status(ws, args)
    if args.repo and not os.path.isdir(args.repo):  # (read, never made here: a typo)
        raise R3Error(
            "--repo %s %s" % (args.repo, "is not a directory" if os.path.exists(args.repo) else "does not exist")
        )
    repo = args.repo or default_repo(ws)
    rows = tuned_status(repo, _recipe_texts(args.spack_config), args.package)
    if args.package and not rows:
        raise R3Error("%s has no tuned variant in %s" % (args.package, repo))
    if args.json:
        print(json.dumps({"repo": repo, "packages": [r.to_json() for r in rows]}, indent=1))
        return 1 if any(r.stale for r in rows) else 0
    if not rows:
        print("no tuned packages in %s" % repo)
        return 0
    print(
        table(
            ["package", "target", "kernels", "predicted", "measured", "version", "compiler", "state"],
            [
                [
                    r.package,
                    r.target,
                    len(r.kernels),
                    "%.2fx" % r.predicted_app_speedup,
                    "-" if r.measured_app_speedup is None else "%.2fx" % r.measured_app_speedup,
                    r.version or "-",
                    r.compiler or "-",
                    "stale" if r.stale else "current",
                ]
                for r in rows
            ],
        )
    )
    kernels = [
        [
            r.package,
            r.target,
            cxxnames.display(k.kernel),
            "%.2fx" % k.predicted,
            "-" if k.measured is None else "%.2fx [%.2f-%.2f]" % (k.measured, k.measured_min, k.measured_max),
        ]
        for r in rows
        for k in r.kernel_speedups
    ]
    if kernels:
        print(table(["package", "target", "kernel", "replay", "in the application"], kernels))
    for r in rows:
        for why in r.stale:
            print("%s target=%s is stale: %s" % (r.package, r.target, why))
    return 1 if any(r.stale for r in rows) else 0


def _cache_status(ws, args):
    from ..errors import R3Error
    from ..roundtrip.publish import published, runs_here

    entries = published(args.mirror, ws, args.package)
    if args.package and not entries:
        raise R3Error("%s is not in the build cache %s" % (args.package, args.mirror))
    if args.json:
        rows = [dict(e.__dict__, runs_here=runs_here(e.target)) for e in entries]
        print(json.dumps({"mirror": os.path.abspath(args.mirror), "entries": rows}, indent=1))
        return 1 if any(e.stale for e in entries) else 0
    if not entries:
        print("nothing published in %s" % args.mirror)
        return 0
    print(
        table(
            ["package", "target", "hash", "published", "measured", "runs here", "state"],
            [
                [
                    e.package,
                    e.target,
                    e.hash[:7],
                    e.published,
                    "-" if e.measured_app_speedup is None else "%.2fx" % e.measured_app_speedup,
                    {True: "yes", False: "no"}.get(runs_here(e.target), "?"),
                    "stale" if e.stale else "current",
                ]
                for e in entries
            ],
        )
    )
    for e in entries:
        for why in e.stale:
            print("%s target=%s in the cache is stale: %s" % (e.package, e.target, why))
    return 1 if any(e.stale for e in entries) else 0


def _recipe_texts(scopes):
    """name -> the original recipe's text, through Spack when there is one (else None).
    The package index is read once, on the first call."""
    index = []

    def text_of(name):
        try:
            if not index:
                from ..roundtrip.record import recipe_index
                from ..spack.runner import Spack

                index.append(recipe_index(Spack(scopes=scopes)))
            info = index[0].find(name)
            return info.text() if info else None
        except Exception:  # no Spack: the version is not checked
            return None

    return text_of

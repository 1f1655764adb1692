#!/usr/bin/env python3
"""Recipe success over the test source trees: concretizes? installs? check passes? attempts?

Each tree under tests/trees/ goes from source to an installed package with the rule-based
generator (or --llm-* for a model), offline, in a sandbox (its own Spack config scope,
install tree, caches and stage under --work, default a temporary directory). Writes
bench/recipes.json: {"trees": [{name, build_system, concretized, installed, check_passed,
attempts, seconds}], ...}.

With --real DIR[:BUILTIN] (repeatable) or --real-dir DIR (each subdirectory one tree), public
source trees nobody here wrote (never committed: the script takes their paths) are packaged
under a new name (r3x-<name>), so retrieval cannot find them by name, and their own builtin
recipe (BUILTIN, default the directory's name) is left out of retrieval (--keep-own keeps it).
Each row of "real" says: installed, tested (spack test run passed), attempts, and agreement
with the builtin recipe: the share of its dependencies (unconditional ones apart) and variants
the generated recipe also has. The sandbox registers what a facility has as externals, as a
user would (`spack external find`: MPI, the autotools; a Fortran compiler): --no-facility not.

Usage: .venv/bin/python scripts/bench_recipes.py [--max-attempts 3] [--out bench/recipes.json]
       .venv/bin/python scripts/bench_recipes.py --real-only --real-dir /tmp/trees
"""

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from spack_r3.errors import R3Error  # noqa: E402
from spack_r3.model import client as model_client  # noqa: E402
from spack_r3.recipe.pipeline import RecipeRequest, make_recipe  # noqa: E402
from spack_r3.spack.runner import Spack  # noqa: E402
from spack_r3.spack.sandbox import make_sandbox  # noqa: E402
from spack_r3.workspace import Workspace  # noqa: E402

TREES = os.path.join(ROOT, "tests", "trees")
FIRST = ["r3tvec"]  # libraries other trees depend on


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-attempts", type=int, default=3)
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "recipes.json"))
    p.add_argument("--work", default=None, help="sandbox directory (default: a temporary one)")
    p.add_argument("--no-repair", action="store_true", help="skip the planted-fault repair run")
    p.add_argument("trees", nargs="*", help="tree names (default: all under tests/trees)")
    p.add_argument(
        "--real",
        action="append",
        default=[],
        metavar="DIR[:BUILTIN]",
        help="a public source tree, and the builtin recipe to compare with",
    )
    p.add_argument("--real-dir", help="every subdirectory a public source tree named like its builtin recipe")
    p.add_argument("--real-only", action="store_true", help="only the public trees")
    p.add_argument(
        "--no-facility",
        action="store_true",
        help="do not register the system's MPI, autotools and Fortran compiler in the sandbox",
    )
    p.add_argument("--keep-own", action="store_true", help="let retrieval show the package's own recipe")
    p.add_argument(
        "--collect",
        action="append",
        default=[],
        metavar="WORK[@COMMIT]",
        help="add the real-tree rows a run left in its --work directory (finished trees), made with the code of COMMIT",
    )
    p.add_argument(
        "--combine",
        action="append",
        default=[],
        metavar="JSON",
        help="add the real-tree rows of another run's output (trees run in parallel)",
    )
    model_client.add_arguments(p)
    args = p.parse_args(argv)
    model = model_client.resolve(args.llm_url, args.llm_model, args.llm_key)

    names = (
        []
        if args.real_only
        else (args.trees or sorted(d for d in os.listdir(TREES) if os.path.isdir(os.path.join(TREES, d))))
    )
    names = [n for n in FIRST if n in names] + [n for n in names if n not in FIRST]
    work = args.work or tempfile.mkdtemp(prefix="r3-bench-recipes-")
    sb = make_sandbox(os.path.join(work, "sandbox"), extra_bin_dirs=[os.path.dirname(sys.executable)])
    if not args.no_facility:
        facility_externals(sb)
    ws = Workspace(os.path.join(work, "ws")).ensure()
    rows = []
    for name in names:
        start = time.monotonic()
        row = {
            "name": name,
            "build_system": None,
            "concretized": False,
            "installed": False,
            "check_passed": False,
            "attempts": 0,
        }
        try:
            res = make_recipe(
                RecipeRequest(
                    name,
                    source=os.path.join(TREES, name),
                    regenerate=True,
                    max_attempts=args.max_attempts,
                    model=model,
                    spack_scopes=[sb.scope],
                ),
                ws,
                progress=lambda m: print("  " + m, file=sys.stderr),
            )
            row.update(
                build_system=res.build_system,
                attempts=len(res.attempts),
                concretized=any(a["concretized"] for a in res.attempts),
                installed=res.status == "installed",
                check_passed=res.check_passed is True,
                outcomes=[a["outcome"] for a in res.attempts],
            )
        except R3Error as err:
            row["error"] = str(err)
        row["seconds"] = round(time.monotonic() - start, 1)
        rows.append(row)
        print(
            "%-14s %-10s concretized=%s installed=%s check=%s attempts=%d (%.0f s)"
            % (
                name,
                row["build_system"],
                row["concretized"],
                row["installed"],
                row["check_passed"],
                row["attempts"],
                row["seconds"],
            ),
            flush=True,
        )

    # the refine loop on a planted fault: the generated CMake recipe without its r3tvec dependency
    repairs = []
    cm = os.path.join(ws.root, "repo", "packages", "r3t-cmake", "package.py")
    if not args.no_repair and os.path.isfile(cm) and any(r["name"] == "r3t-cmake" and r["installed"] for r in rows):
        import re

        planted = re.sub(r'(?m)^\s*depends_on\("r3tvec"\)\n', "", open(cm).read())
        start = time.monotonic()
        res = make_recipe(
            RecipeRequest(
                "r3t-cmake",
                source=os.path.join(TREES, "r3t-cmake"),
                regenerate=True,
                max_attempts=args.max_attempts,
                initial_text=planted,
                spack_scopes=[sb.scope],
            ),
            ws,
        )
        repairs.append(
            {
                "name": "r3t-cmake",
                "planted": "depends_on('r3tvec') removed",
                "installed": res.status == "installed",
                "check_passed": res.check_passed is True,
                "attempts": len(res.attempts),
                "outcomes": [a["outcome"] for a in res.attempts],
                "fixes": [f for a in res.attempts for f in a["fixes"]],
                "seconds": round(time.monotonic() - start, 1),
            }
        )
        print(
            "repair: r3t-cmake without depends_on('r3tvec'): installed=%s attempts=%d"
            % (repairs[-1]["installed"], repairs[-1]["attempts"]),
            flush=True,
        )

    real = [real_tree(spec, sb, ws, args, model) for spec in real_specs(args)]
    for other in args.combine:  # rows another run (on other trees, at the same time) wrote
        with open(other) as f:
            real += json.load(f).get("real", [])
    for work in args.collect:
        work, _, commit = work.partition("@")
        real += [dict(r, commit=commit or None) for r in collected(work)]
    # a tree measured again (after a fix) counts once: its last row
    real = list({r["name"]: r for r in real}.values())

    n = len(rows) or 1
    summary = {
        "real": real,
        "real_summary": real_summary(real, not args.keep_own),
        "trees": rows,
        "repairs": repairs,
        "generator": ("model " + model.model) if model else "rule-based",
        "max_attempts": args.max_attempts,
        "concretize_rate": sum(r["concretized"] for r in rows) / n,
        "install_rate": sum(r["installed"] for r in rows) / n,
        "check_rate": sum(r["check_passed"] for r in rows) / n,
        "mean_attempts": sum(r["attempts"] for r in rows) / n,
        "spack_version": Spack(None, [sb.scope]).version(),
        "externals": sb.externals,
        "real_externals": sb.externals,  # what the public trees were built with (MPI, autotools, Fortran)
        "machine": "%s %s, %d cores" % (platform.system(), platform.machine(), os.cpu_count() or 0),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    if args.real_only and os.path.isfile(args.out):
        # the test trees' results stay as the last full run left them
        with open(args.out) as f:
            kept = json.load(f)
        kept.update(real=summary["real"], real_summary=summary["real_summary"], real_externals=sb.externals)
        summary = kept
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    if real:
        rs = summary["real_summary"]
        print(
            "real trees: %d/%d installed, %d tested, mean attempts %.2f; required deps %d/%d, deps %d/%d, "
            "variants %d/%d"
            % (
                rs["installed"],
                rs["trees"],
                rs["tested"],
                rs["mean_attempts"],
                *rs["required_dependencies_matched"],
                *rs["dependencies_matched"],
                *rs["variants_matched"],
            )
        )
    print(
        ("test trees: " if rows else "no test trees: ")
        + "install rate %.0f%%, check rate %.0f%%, mean attempts %.2f -> %s"
        % (100 * summary["install_rate"], 100 * summary["check_rate"], summary["mean_attempts"], args.out)
    )
    return 0 if (summary["install_rate"] == 1.0 or not rows) else 1


# what a facility has installed and a user registers (`spack external find`): MPI and the
# autotools; Spack cannot fetch them offline
FACILITY_PACKAGES = ["openmpi", "mpich", "autoconf", "automake", "libtool", "m4"]


def facility_externals(sb):
    """Register the system's MPI, autotools and compilers (with Fortran where installed) in the
    sandbox's scope as a user would, by `spack external find` and `spack compiler find`, run
    against a throwaway user configuration whose findings are copied into the scope."""
    import subprocess

    import yaml

    spack = Spack(None, [])
    tmp = tempfile.mkdtemp(prefix="r3-facility-")
    env = dict(os.environ, SPACK_USER_CONFIG_PATH=tmp)
    exe = spack.exe
    for cmd in (
        ["external", "find", "--not-buildable", "--scope", "user"] + FACILITY_PACKAGES,
        ["compiler", "find", "--scope", "user"],
    ):
        subprocess.run([exe] + cmd, env=env, capture_output=True, text=True, timeout=300)
    found = {"packages": {}, "compilers": []}
    for d, _s, files in os.walk(tmp):  # Spack writes per-platform files too (linux/compilers.yaml)
        for name in ("packages", "compilers"):
            if name + ".yaml" in files:
                with open(os.path.join(d, name + ".yaml")) as f:
                    data = (yaml.safe_load(f) or {}).get(name) or type(found[name])()
                if name == "packages":
                    found[name].update(data)
                else:
                    found[name] += data
    shutil.rmtree(tmp, ignore_errors=True)
    packages_path = os.path.join(sb.scope, "packages.yaml")
    with open(packages_path) as f:
        packages = json.load(f)
    for pkg, conf in found["packages"].items():
        if pkg in packages["packages"]:
            continue
        packages["packages"][pkg] = conf
        for ext in conf.get("externals", []):
            sb.externals[pkg] = "%s %s" % (ext["spec"].split("%")[0].split("~")[0].split("+")[0], ext["prefix"])
    with open(packages_path, "w") as f:
        json.dump(packages, f, indent=1)
    compilers = found["compilers"]
    if any((c["compiler"]["paths"].get("fc")) for c in compilers):
        # the scope's compilers come first: the same compiler, with its Fortran
        with open(os.path.join(sb.scope, "compilers.yaml"), "w") as f:
            json.dump({"compilers": compilers}, f, indent=1)
        for c in compilers:
            if c["compiler"]["paths"].get("fc"):
                sb.externals["fortran"] = "%s %s" % (
                    c["compiler"]["spec"].replace("=", ""),
                    c["compiler"]["paths"]["fc"],
                )
    return sb


def real_summary(real, own_excluded):
    nr = len(real) or 1
    total = lambda key, i: sum(r["agreement"].get(key, [0, 0])[i] for r in real)  # noqa: E731
    return {
        "trees": len(real),
        "installed": sum(r["installed"] for r in real),
        "tested": sum(r["tested"] for r in real),
        "install_rate": sum(r["installed"] for r in real) / nr,
        "test_rate": sum(r["tested"] for r in real) / nr,
        "mean_attempts": sum(r["attempts"] for r in real) / nr,
        "required_dependencies_matched": [total("required", 0), total("required", 1)],
        "dependencies_matched": [total("dependencies", 0), total("dependencies", 1)],
        "variants_matched": [total("variants", 0), total("variants", 1)],
        "own_recipe_excluded": own_excluded,
        "build_systems": sorted({r["build_system"] or "none" for r in real}),
    }


def real_specs(args):
    specs = list(args.real)
    if args.real_dir:
        specs += [
            os.path.join(args.real_dir, d)
            for d in sorted(os.listdir(args.real_dir))
            if os.path.isdir(os.path.join(args.real_dir, d))
        ]
    out = []
    for spec in specs:
        path, _, builtin = spec.partition(":")
        name = os.path.basename(os.path.normpath(path)).lower()
        out.append((os.path.abspath(path), builtin or BUILTIN_NAMES.get(name, name)))
    return out


# public trees whose builtin recipe has another name than their directory
BUILTIN_NAMES = {"inih": "libinih", "libyaml": "libyaml", "test-drive": "test-drive"}


def _declared(text):
    import re
    from spack_r3.recipe.fixes import declared_dependencies

    try:
        deps = declared_dependencies(text)
    except SyntaxError:
        deps = []
    # the variant() directives only (not define_from_variant(...) calls)
    # tight-error and tight_error are the same variant to a reader (Spack takes both spellings)
    variants = {v.replace("-", "_") for v in re.findall(r"(?m)^\s*variant\(\s*[\"']([\w-]+)[\"']", text)}
    variants -= {"implementation"}
    return deps, variants


def agreement(generated_text, builtin_text):
    """[matched, of] for the builtin recipe's unconditional dependencies, all its dependencies,
    and its variants, found in the generated recipe (by name)."""
    g_deps, g_vars = _declared(generated_text)
    b_deps, b_vars = _declared(builtin_text)
    g_names = {n for n, _w in g_deps}
    b_req = {n for n, w in b_deps if w is None}
    b_all = {n for n, _w in b_deps}
    return {
        "required": [len(b_req & g_names), len(b_req)],
        "dependencies": [len(b_all & g_names), len(b_all)],
        "variants": [len(b_vars & g_vars), len(b_vars)],
        "builtin_dependencies": sorted(b_all),
        "generated_dependencies": sorted(g_names),
        "builtin_variants": sorted(b_vars),
        "generated_variants": sorted(g_vars),
    }


def _row(name, tree, builtin, res, spack_root):
    """A real-tree row from a recipe result (RecipeResult.to_dict(), or a summary.json)."""
    row = {
        "name": name,
        "tree": tree,
        "builtin": builtin,
        "build_system": res.get("build_system"),
        "attempts": len(res["attempts"]),
        "installed": res["status"] == "installed",
        "tested": res.get("check_passed") is True,
        "outcomes": [a["outcome"] for a in res["attempts"]],
        "fixes": [f for a in res["attempts"] for f in a["fixes"]],
        "examples": [e["name"] for e in res.get("examples", [])],
        "agreement": {},
        "seconds": round(sum(a.get("seconds", 0) for a in res["attempts"]), 1),
    }
    if not row["installed"] and res["attempts"]:
        row["last_diagnostics"] = (res["attempts"][-1].get("diagnostics") or "")[-800:]
    builtin_path = os.path.join(spack_root or "", "var", "spack", "repos", "builtin", "packages", builtin, "package.py")
    recipe = res.get("recipe")
    if os.path.isfile(builtin_path) and recipe and os.path.isfile(recipe):
        row["agreement"] = agreement(open(recipe).read(), open(builtin_path).read())
    return row


def real_tree(spec, sb, ws, args, model):
    path, builtin = spec
    tree = os.path.basename(os.path.normpath(path))
    name = "r3x-" + tree.lower().replace("_", "-")
    start = time.monotonic()
    try:
        res = make_recipe(
            RecipeRequest(
                name,
                source=path,
                regenerate=True,
                max_attempts=args.max_attempts,
                model=model,
                spack_scopes=[sb.scope],
                exclude_examples=[] if args.keep_own else [builtin],
            ),
            ws,
            progress=lambda m: print("  " + m, file=sys.stderr),
        )
        row = _row(name, tree, builtin, res.to_dict(), Spack(None, [sb.scope]).root)
        row["commit"] = _commit()
    except R3Error as err:
        row = {
            "name": name,
            "tree": tree,
            "builtin": builtin,
            "build_system": None,
            "installed": False,
            "tested": False,
            "attempts": 0,
            "agreement": {},
            "error": str(err),
        }
    row["seconds"] = round(time.monotonic() - start, 1)
    print(
        "%-18s %-10s installed=%s tested=%s attempts=%d (%.0f s)"
        % (name, row["build_system"], row["installed"], row["tested"], row["attempts"], row["seconds"]),
        flush=True,
    )
    return row


def _commit():
    import subprocess

    p = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return p.stdout.strip() or None


def collected(work):
    """Real-tree rows from what a run (perhaps stopped early) left in its workspace: each
    finished recipe's summary.json."""
    rows = []
    base = os.path.join(work, "ws", "recipes")
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        path = os.path.join(base, name, "summary.json")
        if name.startswith("r3x-") and os.path.isfile(path):
            with open(path) as f:
                res = json.load(f)
            tree = name[len("r3x-") :]
            rows.append(_row(name, tree, BUILTIN_NAMES.get(tree, tree), res, Spack(None, []).root))
    return rows


if __name__ == "__main__":
    sys.exit(main())

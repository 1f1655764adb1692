#!/usr/bin/env python3
"""Write the result tables of bench/README.md from the bench/*.json files.

bench/README.md is prose written by hand around generated blocks: each block starts with
a line ``<!-- table: NAME -->`` and ends with ``<!-- end table -->``, and this script
rewrites what lies between them from the json the bench scripts wrote, so the tables are
always the last run's numbers. Prose (why a number is what it is, runs on public code that
are not in a json) stays as written.

    python scripts/bench_readme.py            # rewrite bench/README.md in place
    python scripts/bench_readme.py --check    # exit 1 if bench/README.md is not up to date
"""

import argparse
import json
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
BLOCK = re.compile(r"(<!-- table: ([\w-]+) -->\n)(.*?)(<!-- end table -->)", re.S)


def load(name):
    with open(os.path.join(BENCH, name)) as f:
        return json.load(f)


def x(value, digits=2):
    return "-" if value is None else "%.*fx" % (digits, value)


def ranged(value, low, high):
    return "%s [%.2f-%.2f]" % (x(value), low, high) if value is not None else "-"


def mb(n):
    return "%.1f MB" % (n / 1e6) if n is not None else "-"


def secs(s):
    if s is not None and s < 0.01:
        return "%.1f us" % (s * 1e6) if s < 1e-3 else "%.2f ms" % (s * 1e3)
    return "%.2f s" % s if s is not None else "-"


def pct(f):
    return "%.1f%%" % (100 * f) if f is not None else "-"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def replay_demos():
    d = load("replay.json")
    rows = [
        (
            k["demo"],
            k["kernel"],
            "`%s`" % k["run"],
            "%.2f s" % k["rebuild_s"],
            "%.3f s" % k["replay_s"],
            "%.0fx" % k["ratio"],
            mb(k["capture_bytes"]),
            mb(k["live_heap_bytes"]),
            x(k["record_overhead"]),
        )
        for k in d["kernels"]
    ]
    out = table(
        ["demo", "kernel", "run", "rebuild + run", "replay", "saved", "capture", "live heap", "record overhead"], rows
    )
    return out + (
        "\nOne change (`%s` rebuilt, `%s` replayed), %d trials, %s, %s CPUs: replay is %.0fx cheaper "
        "(geometric mean; at least %.0fx).\n"
        % (
            d["change"]["rebuild_cflags"],
            d["change"]["replay_pipeline"],
            d["trials"],
            d["machine"]["cpu"],
            d["machine"]["nproc"],
            d["ratio_geomean"],
            d["ratio_min"],
        )
    )


def replay_shapes():
    rows = []
    for s in load("replay.json")["real_code_shapes"]:
        over = [k["capture_over_data"] for k in s["kernels"] if k.get("capture_over_data")]
        refused = ["%s (%s)" % (name, why) for name, why in s.get("hot_refused_at_record", {}).items()]
        refused += [
            "%s (replay: %s)" % (k["kernel"], k["detail"].split(": ", 1)[-1])
            for k in s["kernels"]
            if k["status"] == "refused"
        ]
        rows.append(
            (
                s["program"],
                "`%s`" % s["run"],
                pct(s["share_verified"]),
                pct(s["share_refused"]),
                pct(s["share_failed"]),
                x(s.get("record_overhead")),
                "%.2f" % max(over) if over else "-",
                "; ".join(refused) or "-",
            )
        )
    return table(
        [
            "program",
            "run",
            "verified",
            "refused",
            "failed",
            "record overhead",
            "capture / kernel's data (max)",
            "refused, why",
        ],
        rows,
    )


def verdict(v, ratio):
    return "%s, %s" % ("**%s**" % v if v in ("better", "worse") else v, ratio)


def search(name):
    d = load(name)
    rows = []
    for k in d["kernels"]:
        cells = [k["kernel_demangled"]]
        for s in ("random", "bayes", "r3"):
            r = k[s]
            cells.append(ranged(r["best_speedup"], r["speedup_min"], r["speedup_max"]))
        cells.append(verdict(k["bayes"]["vs_random"], k["bayes"]["ratio_to_random"]))
        cells.append(
            "%s; %s"
            % (
                verdict(k["r3"]["vs_random"], k["r3"]["ratio_to_random"]),
                verdict(k["r3"]["vs_bayes"], k["r3"]["ratio_to_bayes"]),
            )
        )
        cells.append(", ".join(str(k["bayes"].get(e)) for e in ("evals_to_best", "evals_to_random_best_within_noise")))
        rows.append(cells)
    t = d["throughput"]
    out = table(
        [
            "kernel",
            "random",
            "Bayesian",
            "r3 (rules)",
            "Bayesian vs random",
            "r3 vs random; vs Bayesian",
            "Bayesian: best at, random's best (within noise) at",
        ],
        rows,
    )
    return out + (
        "\nBudget %d, tolerance %g, %d CPUs. Search throughput on %s: %.0f evaluations/min with 1 worker, "
        "%.0f with 2 (%.2fx [%.2f-%.2f]).\n"
        % (
            d["budget"],
            d["tolerance"],
            d["machine_cpus"],
            d["throughput_kernel"],
            t["workers_1"],
            t["workers_2"],
            t["ratio"],
            t["ratio_min"],
            t["ratio_max"],
        )
    )


def apply_():
    d = load("apply.json")
    rows = []
    for p in d["packages"]:
        in_app = {k["kernel"]: k for k in p.get("kernels_in_app", [])}
        parts = []
        for k in p["kernels"]:
            a = in_app.get(k["kernel"])
            if a:
                parts.append(
                    "%s %s -> %s"
                    % (
                        k["kernel"],
                        x(a["replay_speedup"]),
                        ranged(a["app_speedup"], a["app_speedup_min"], a["app_speedup_max"]),
                    )
                )
        idle = [k["kernel"] for k in p["kernels"] if k["kernel"] not in in_app]
        if idle:
            parts.append("%s: nothing beat the build" % ", ".join(idle))
        if "app_speedup" in p:
            rows.append(
                (
                    p["package"],
                    "`%s`" % p["run"],
                    ranged(p["app_speedup"], p["app_speedup_min"], p["app_speedup_max"]),
                    x(p["predicted_app_speedup"]),
                    "%.2f" % p["fidelity"],
                    "; ".join(parts),
                    p["when"],
                )
            )
        else:
            rows.append((p["package"], "`%s`" % p["run"], p.get("error", "-"), "-", "-", "; ".join(parts), p["when"]))
    s = d["packages"][0]["settings"]
    out = table(
        ["package", "run", "app speedup", "predicted", "fidelity", "kernels: replay -> in the app", "when"], rows
    )
    return out + (
        "\nTarget: %s. Settings: budget %d, child budget %d, min share %g, tolerance %g, cache %s, %d paired "
        "application runs, %d paired timed-build runs; %s, %d cores.\n"
        % (
            d["target"],
            s["budget"],
            s["child_budget"],
            s["min_share"],
            s["tolerance"],
            s["cache"],
            s["pairs"],
            s["kernel_pairs"],
            d["machine"]["cpu"],
            d["machine"]["cores"],
        )
    )


def recipes():
    d = load("recipes.json")
    rows = [
        (
            t["name"],
            t["build_system"],
            t["concretized"],
            t["installed"],
            t["check_passed"],
            t["attempts"],
            "%.0f s" % t["seconds"],
        )
        for t in d["trees"]
    ]
    rows += [
        (
            "%s, %s" % (r["name"], r["planted"]),
            "repair",
            "-",
            r["installed"],
            r["check_passed"],
            r["attempts"],
            "%.0f s" % r["seconds"],
        )
        for r in d.get("repairs", [])
    ]
    out = table(["tree", "build system", "concretized", "installed", "check passed", "attempts", "time"], rows)
    return out + (
        "\nGenerator %s, at most %d attempts, Spack %s; concretized %s, installed %s, checks passed %s, "
        "%.1f attempts on average; %s.\n"
        % (
            d["generator"],
            d["max_attempts"],
            d["spack_version"],
            pct(d["concretize_rate"]),
            pct(d["install_rate"]),
            pct(d["check_rate"]),
            d["mean_attempts"],
            d["machine"],
        )
    )


def faults():
    d = load("faults.json")
    s = d["summary"]
    rows = [
        (
            kind,
            k["count"],
            ", ".join("%s %d" % kv for kv in sorted(k["classified"].items())),
            k["winner"],
            secs(k["wall_s_median"]),
            secs(k["wall_s_max"]),
            k["escaped"],
        )
        for kind, k in s["kinds"].items()
    ]
    out = table(["kind", "served", "classified as", "winners", "wall median", "wall max", "escaped"], rows)
    out += "\n" + table(
        ["verdict", "holds"], [(name, v if isinstance(v, bool) else json.dumps(v)) for name, v in s["verdicts"].items()]
    )
    out += "\n" + table(
        ["demo", "kernel", "run", "exit", "served", "model asked / answered", "study intact", "reported winner"],
        [
            (
                m["demo"],
                m["kernel"],
                "`%s`" % m["run"],
                m["exit_status"],
                m["served"],
                "%d / %d" % (m["model"]["asked"], m["model"]["answered"]),
                m["study"]["intact"],
                "`%s` %s" % (m["winner"], x(m["winner_speedup"], 0)),
            )
            for m in d["demos"]
        ],
    )
    return out + (
        "\n%d candidates, %s, timeout %g s, RLIMIT_AS %g GiB, %.0f s, %s.\n\nFindings:\n\n"
        % (
            s["candidates"],
            d["when"],
            d["settings"]["timeout_s"],
            d["settings"]["memory_limit_gib"],
            d["seconds"],
            "%s, %d cores" % (d["machine"]["cpu"], d["machine"]["cores"]),
        )
        + "".join("- %s\n" % f for f in s["findings"])
    )


def scale():
    d = load("scale.json")
    rows = []
    for label, run in d["runs"].items():
        if "throughput" in run:
            t = run["throughput"]["dask_over_local_paired"]
            o = run["dask_overhead_per_evaluation_s"]["noop_task_roundtrip"]
            rows.append(
                (
                    label,
                    run["kernel"],
                    secs(run["coordinator"]["evaluation_s"]),
                    ranged(t["median"], t["min"], t["max"]),
                    secs(o["median"]),
                )
            )
    out = table(["run", "kernel", "evaluation", "dask/local throughput (paired)", "no-op task round trip"], rows)
    run = next(r for r in d["runs"].values() if "model" in r)
    heads = list(next(iter(run["model"]["kernel_of_2s"].values())))
    out += (
        "\nModel, 32 kernels x 60 evaluations of 2 s each (inputs measured in the %s run; assumptions in "
        "the json): evaluations per minute, and what binds\n\n" % run["kernel"]
    )
    out += table(
        ["workers"] + [h.replace("_", " ") for h in heads],
        [
            (w,) + tuple("%d (%s)" % (m[h]["evals_per_min"], m[h]["bound_by"].replace("_", " ")) for h in heads)
            for w, m in run["model"]["kernel_of_2s"].items()
        ],
    )
    return out


def evalcost():
    d = load("evalcost.json")
    rows, split = [], []
    for k in d["kernels"]:
        if k.get("polly"):  # its own table (evalcost-polly)
            continue
        for name, v in k["variants"].items():
            r, b, a = v["ratio"], v["before"], v["after"]
            rows.append(
                (
                    k["kernel"],
                    "%.1f ms" % (1e3 * k["run_s"]),
                    "`%s`" % name,
                    secs(b["wall_s"]),
                    secs(a["wall_s"]),
                    ranged(r["median"], r["min"], r["max"]),
                    "%s / %s" % (x(b["over_paired"]), x(a["over_paired"])),
                    "%s / %s" % (x(b["over_nominal"]), x(a["over_nominal"])),
                    "%d of %d" % (a["raced_out"], k["rounds"]),
                )
            )
        for mode in ("before", "after"):
            groups = list(k["stage_medians"][mode])
            split.append((k["kernel"], mode) + tuple("%.3f s" % k["stage_medians"][mode][g] for g in groups))
    out = table(
        [
            "kernel",
            "run",
            "variant",
            "before",
            "after",
            "before/after (paired)",
            "over its pairs' runs as timed (before / after)",
            "over its pairs' runs idle (before / after)",
            "raced out",
        ],
        rows,
    )
    out += (
        "\nWhere an evaluation's time went: median seconds of each stage over every evaluation of a "
        "kernel in a mode (the four variants, every round)\n\n"
    )
    out += table(["kernel", "mode"] + groups, split)
    return out + "\n%s\n" % d["notes"]


def evalcost_polly():
    """The Polly kernel of evalcost.json (``bench_evalcost.py --polly``): each variant's first
    evaluation (the Polly stage cold) and the evaluations after it (cached), by mode."""
    rows = []
    for k in (k for k in load("evalcost.json")["kernels"] if k.get("polly")):
        for name, v in k["variants"].items():
            for mode in ("before", "after"):
                first, warm = v[mode]["first"], v[mode]
                rows.append(
                    (
                        k["kernel"],
                        "%.1f ms" % (1e3 * k["run_s"]),
                        "`%s`" % name,
                        mode,
                        secs(first["wall_s"]),
                        secs(first["stages"]["polly stage"]),
                        secs(first["stages"]["compile"]),
                        x(first["over_paired"]),
                        secs(warm["wall_s"]),
                        "%.3f s" % warm["stages"]["polly stage"],
                        "%.3f s" % warm["stages"]["compile"],
                        secs(warm["paired_run_s"]),
                        x(warm["over_paired"]),
                        x(warm["over_nominal"]),
                        ranged(v["ratio"]["median"], v["ratio"]["min"], v["ratio"]["max"]) if mode == "after" else "",
                    )
                )
        run = k["run"]
    if not rows:
        return ""
    out = table(
        [
            "kernel",
            "run",
            "variant",
            "mode",
            "first: wall",
            "first: Polly stage",
            "first: rest of compile",
            "first: over its pairs' runs",
            "then: wall",
            "then: Polly stage",
            "then: rest of compile",
            "then: paired runs",
            "then: over its pairs' runs as timed",
            "then: over its pairs' runs idle",
            "before/after (paired)",
        ],
        rows,
    )
    return out + "\n%d pairs an evaluation, %d rounds after the first, commit %s. %s\n" % (
        run["pairs"],
        run["rounds"],
        run["commit"],
        run["notes"],
    )


def shapes46_default():
    """Issue 46's shapes searched by r3 tune at the default budget (``bench_shapes46.py
    --search-only --searches with --budget 60``): each kernel's confirmed speedup over the
    build, its winner, where its evaluations went; the geometric mean over the kernels."""
    d = load("search-shapes46-default.json")
    rows, logs = [], []
    for k in d["kernels"]:
        w = k["with"]
        split = ", ".join("%s %d" % (name.replace("rewrite: ", ""), n) for name, n in w["evaluations"].items() if n)
        rows.append(
            (
                k["kernel"],
                "%.2f ms" % (1e3 * k["reference"]["baseline_s"]),
                ranged(w["best_speedup"], w["speedup_min"], w["speedup_max"]),
                "`%s`" % w["winner"],
                split,
                "%.0f s" % k["search_s"],
            )
        )
        logs.append(math.log(w["best_speedup"]))
    out = table(["kernel", "build's run", "confirmed over the build", "winner", "evaluations", "search"], rows)
    geomean = math.exp(sum(logs) / len(logs))
    below = sum(1 for v in logs if v < 0)
    return out + "\nGeometric mean over the %d kernels: **%.2fx**; %s. Budget %d, sizes `%s`, tolerance %g. %s\n" % (
        len(rows),
        geomean,
        "%d below the build" % below if below else "none below the build",
        d["budget"],
        d["sizes"],
        d["tolerance"],
        d["notes"],
    )


def shapes46_without():
    """The same search without issue 46's rewrites (``--searches without``: no time tile,
    wavefront, fusion, distribution, nor ``omp parallel for`` on a time loop's sweeps), beside
    the default-budget run's results with them; two runs, not paired."""
    d = load("search-shapes46-default-without.json")
    with_ = {k["kernel"]: k["with"] for k in load("search-shapes46-default.json")["kernels"]}
    rows = []
    for k in d["kernels"]:
        wo, w = k["without"], with_[k["kernel"]]
        rows.append(
            (
                k["kernel"],
                ranged(wo["best_speedup"], wo["speedup_min"], wo["speedup_max"]),
                "`%s`" % wo["winner"],
                ranged(w["best_speedup"], w["speedup_min"], w["speedup_max"]),
                "`%s`" % w["winner"],
            )
        )
    return table(["kernel", "without", "its winner", "with", "its winner"], rows) + "\n%s\n" % d["notes"]


def apps():
    """bench/apps.json: each public application through Spack's recipe, the check that acts."""
    d = load("apps.json")
    rows = []
    for r in d["apps"]:
        if "error" in r:
            rows.append((r["app"], "failed: " + r["error"], "-", "-", "-", "-", "-", "-"))
            continue
        last = r["checks"][-1] if r.get("checks") else None
        kernels = r.get("kernels", [])
        rows.append(
            (
                r["app"],
                "%d of %d" % (sum(1 for k in kernels if k.get("won")), len(kernels)),
                " ".join(str(k["instances"]) for k in kernels) or "-",
                ranged(last["app_speedup"], *last["app_speedup_range"]) if last else "-",
                x(last["predicted"]) if last else "-",
                "%.2f" % last["fidelity"] if last else "-",
                "; ".join(
                    [", ".join(t["kernel"] for t in r.get("taken_out", [])) or "-"]
                    + (["replaced: " + ", ".join(t["kernel"] for t in r["replaced"])] if r.get("replaced") else [])
                ),
                "emitted" if r.get("emitted") else "none: " + (r.get("why_none") or "-"),
            )
        )
    return table(
        [
            "application",
            "kernels won",
            "instances each",
            "+r3 over ~r3 (last check)",
            "predicted",
            "fidelity",
            "taken out; replaced",
            "variant",
        ],
        rows,
    )


def apps_kernels():
    """bench/apps.json: each tuned kernel, how well its instances stand for its calls, replay
    against the application."""
    d = load("apps.json")
    rows = []
    for r in d["apps"]:
        inapp = {k["kernel"]: k for c in r.get("checks", [])[:1] for k in c["kernels"]}
        for k in r.get("kernels", []):
            a = inapp.get(k.get("symbol"))
            rows.append(
                (
                    r["app"],
                    k["kernel"].split("(")[0],
                    pct(k["share"]),
                    k["instances"],
                    "%s / %s" % (secs(k["captured_call_s"]), secs(k["app_call_s"])),
                    ranged(k["speedup"], *k["speedup_range"]),
                    "%s / %s" % (x(k.get("serial_speedup")), x(k.get("threaded_speedup"))),
                    ranged(a["app_speedup"], *a["app_speedup_range"]) if a else "-",
                )
            )
    return table(
        [
            "application",
            "kernel",
            "share",
            "instances",
            "captured call / in the app",
            "replay (confirmed)",
            "best serial / threaded",
            "in the application (first check)",
        ],
        rows,
    )


TABLES = {
    "apps": apps,
    "apps-kernels": apps_kernels,
    "evalcost": evalcost,
    "evalcost-polly": evalcost_polly,
    "scale": scale,
    "replay-demos": replay_demos,
    "replay-shapes": replay_shapes,
    "search": lambda: search("search.json"),
    "search-seed8": lambda: search("search-seed8.json"),
    "apply": apply_,
    "recipes": recipes,
    "faults": faults,
    "shapes46-default": shapes46_default,
    "shapes46-without": shapes46_without,
}


def render(text):
    def block(m):
        name = m.group(2)
        if name not in TABLES:
            raise SystemExit("bench/README.md: no table named %r (known: %s)" % (name, ", ".join(TABLES)))
        return m.group(1) + TABLES[name]() + m.group(4)

    return BLOCK.sub(block, text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether bench/README.md is up to date")
    parser.add_argument("--readme", default=os.path.join(BENCH, "README.md"))
    args = parser.parse_args()
    with open(args.readme) as f:
        text = f.read()
    new = render(text)
    if args.check:
        if new != text:
            print(
                "%s: tables are not those of bench/*.json; run scripts/bench_readme.py" % args.readme, file=sys.stderr
            )
            return 1
        return 0
    if new != text:
        with open(args.readme, "w") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())

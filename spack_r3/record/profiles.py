"""What a record run's profiler wrote (``profile.<pid>.json``, one per process): each
recorded kernel's times, and its share of the application's run."""

import glob
import json
import os


# A process whose profiler signalled fewer times than this keeps its timed shares. The
# signals are the samples (one may carry several ticks: runtime/profiler.c, g_prof_events), and a
# share from n of them is off by up to 0.5/sqrt(n): 2.5% at 400. Fewer overstated the
# dense demo's matrix product's share against its timed time (bench/README.md).
MIN_SAMPLE_EVENTS = 400


def load_profiles(record_dir, min_events=MIN_SAMPLE_EVENTS):
    """Hotness from every process of a run: {(tu_dir, kernel): stats}, app seconds (the
    time the run took less the time it spent taking snapshots, which the application
    without probes would not spend: shares of the run are shares of that).

    ``main_ns`` is the kernel's own time on the main thread: from the runtime's profiler
    ticks where the process had enough samples (timing a short call inflates it: runtime/profiler.c,
    prof_tick), else its timed self time there. ``main_outer_ns``: the main thread's time
    with this kernel the outermost recorded one on the stack (its inclusive time, less
    its calls from other kernels), from the ticks or else timed; ``top_ns``: the same
    timed, summed over threads. ``on_main``: called on the main thread. ``min_events``:
    the fewest profiler samples a process's ticks are used from."""
    stats, app_ns = {}, 0
    for prof in _profiles(record_dir):
        app_ns = max(app_ns, prof.get("app_ns", 0) - prof.get("paused_ns", 0))
        tick_ns = prof.get("sample_ns", 0)
        ticked = prof.get("main_sample_events", 0) >= min_events  # (none from older runtimes: timed)
        for k in prof.get("kernels", []):
            key = (k["tu_dir"], k["name"])
            s = stats.setdefault(
                key,
                {
                    "calls": 0,
                    "total_ns": 0,
                    "self_ns": 0,
                    "main_self_ns": 0,
                    "captured": 0,
                    "main_top_calls": 0,
                    "top_ns": 0,
                    "main_ns": 0,
                    "main_outer_ns": 0,
                    "on_main": False,
                },
            )
            for field in ("calls", "total_ns", "self_ns", "main_self_ns", "captured", "main_top_calls", "top_ns"):
                s[field] += k.get(field, 0)
            on_main = k.get("main_self_ns", 0) > 0 or k.get("main_samples", 0) > 0
            s["on_main"] = s["on_main"] or on_main
            sampled = ticked and on_main
            s["main_ns"] += k.get("main_samples", 0) * tick_ns if sampled else k.get("main_self_ns", 0)
            s["main_outer_ns"] += k.get("main_outer_samples", 0) * tick_ns if sampled else k.get("main_top_ns", 0)
    return stats, app_ns / 1e9


def tuned_shares(record_dir, kernels, min_events=MIN_SAMPLE_EVENTS):
    """{kernel: share of the run} for the set ``kernels`` (symbol names) as a build that
    tunes them runs them: each one's time on the main thread with none of the set below it
    on the stack, its callees included (they run as its own copies, and replay timed it
    with them), from the run's calling-context trees (runtime/probes.c, cct). These shares add up to
    at most the run. Kernels the trees do not hold (never called on the main thread) are
    left out; {} where a process's tree is missing or incomplete (the caller keeps the
    kernels' own shares)."""
    wanted, totals, app_ns = set(kernels), {}, 0
    for prof in _profiles(record_dir):
        if not prof.get("cct_complete") or not prof.get("cct"):
            return {}
        app_ns = max(app_ns, prof.get("app_ns", 0) - prof.get("paused_ns", 0))
        names = {k["id"]: k["name"] for k in prof.get("kernels", []) if k.get("id", -1) >= 0}
        tick_ns = prof.get("sample_ns", 0) if prof.get("main_sample_events", 0) >= min_events else 0
        nodes = prof["cct"]  # [parent, kernel id, ns, samples]; a node comes after its parent
        samples = [n[3] for n in nodes]
        for i in range(len(nodes) - 1, 0, -1):
            samples[nodes[i][0]] += samples[i]
        below = [False] * len(nodes)  # a kernel of the set is at or below this node on the stack
        for i in range(1, len(nodes)):
            parent, name = nodes[i][0], names.get(nodes[i][1])
            if name in wanted:  # (0 where always called by another of the set)
                totals[name] = totals.get(name, 0) + (
                    0 if below[parent] else samples[i] * tick_ns if tick_ns else nodes[i][2]
                )
            below[i] = below[parent] or name in wanted
    if not app_ns:
        return {}
    return {name: min(1.0, ns / app_ns) for name, ns in totals.items()}


# A kernel whose calls spend more than this share of their time in other kernels is a
# driver of them (HPCCG's HPCCG(): 99% in HPC_sparsemv, ddot and waxpby).
DRIVER_SHARE = 0.5


def drivers(record_dir, kernels):
    """The symbols of ``kernels`` whose main-thread time is mostly (DRIVER_SHARE) inside
    calls of others of the set, from the run's calling-context trees: capturing one of
    their calls would hold every call of those it drives, which a capture taken meanwhile
    cannot be (HPCCG's one HPCCG() call holds every HPC_sparsemv). Empty where a tree is
    missing or incomplete."""
    wanted, inclusive, inside = set(kernels), {}, {}
    for prof in _profiles(record_dir):
        if not prof.get("cct_complete") or not prof.get("cct"):
            return set()
        names = {k["id"]: k["name"] for k in prof.get("kernels", []) if k.get("id", -1) >= 0}
        nodes = prof["cct"]  # [parent, kernel id, ns (with its callees), samples]; parents first
        nearest = [None] * len(nodes)  # the nearest node of the set at or above each node
        for i in range(1, len(nodes)):
            parent, name = nodes[i][0], names.get(nodes[i][1])
            above = nearest[parent]
            if name in wanted:
                outer = names.get(nodes[above][1]) if above is not None else None
                if outer is not None and outer != name:  # (a recursive call is its own time)
                    inside[outer] = inside.get(outer, 0) + nodes[i][2]
                if outer != name:
                    inclusive[name] = inclusive.get(name, 0) + nodes[i][2]
                nearest[i] = i
            else:
                nearest[i] = above
    return {k for k, ns in inclusive.items() if ns and inside.get(k, 0) > DRIVER_SHARE * ns}


def _profiles(record_dir):
    """The readable profile.<pid>.json of a record run, one per process."""
    out = []
    for path in sorted(glob.glob(os.path.join(record_dir, "profile.*.json"))):
        try:
            with open(path) as f:
                out.append(json.load(f))
        except (OSError, ValueError):
            continue
    return out


def share_of(stats, app_s):
    """A kernel's share of the application's run time. Self time summed over threads would
    count a function called from every thread of a parallel loop once per thread (shares
    over 100%); the main thread's own time in it is what the run waits for, as the main
    thread works in every parallel region too. Kernels never called there: their self time
    summed over threads."""
    if not app_s:
        return None
    ns = stats["main_ns"] if stats["on_main"] else stats["self_ns"]
    return min(1.0, ns / 1e9 / app_s)


def outer_share_of(stats, app_s):
    """A kernel's share of the run as the outermost recorded kernel: its calls' inclusive
    time, less the calls other recorded kernels make. In a run where only the tuned kernels
    are recorded, these shares add up without counting a nested one twice, and each is the
    time its kernel's own tuned build (its callees as its copies) changes. Kernels never
    called on the main thread: their top calls' time summed over threads."""
    if not app_s:
        return None
    ns = stats["main_outer_ns"] if stats["on_main"] else stats["top_ns"]
    return min(1.0, ns / 1e9 / app_s)

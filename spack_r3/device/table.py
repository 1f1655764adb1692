"""The per-target resource table of device kernels, as r3 retarget and r3 tune print it."""

from ..report import table

HEADERS = ["kernel", "gpu", "regs", "spill st/ld", "stack", "shared", "occupancy", "limit", "verdict"]


def short(name):
    from .. import cxxnames

    try:
        return cxxnames.display(name, 48)
    except Exception:  # a device symbol no demangler reads is shown as it is
        return name[:48]


def rows(verdicts, label=None, baseline=None):
    """Table rows of Verdicts; ``baseline``: {kernel: occupancy fraction} on the GPU tuned
    for, where a drop says the kernel needs tuning again."""
    out = []
    for v in verdicts:
        r, o = v.resources, v.occupancy
        before = baseline.get(v.kernel) if baseline else None
        verdict = "ok"
        if v.unresolved:  # its figures are not the real code's (no device library defines these)
            shown = ", ".join(v.unresolved[:3]) + (
                " and %d more" % (len(v.unresolved) - 3) if len(v.unresolved) > 3 else ""
            )
            verdict = "not judged: %s unresolved (no device library for them here)" % shown
        elif not v.ok:
            verdict = "tune again: " + v.reason
        elif before is not None and o is not None and o.fraction + 1e-9 < before:
            verdict = "tune again: occupancy %.0f%% -> %.0f%%" % (100 * before, 100 * o.fraction)
        out.append(
            [
                label or short(v.kernel),
                v.target,
                r.registers if r else "-",
                ("%d/%d" % (r.spill_stores, r.spill_loads)) if r else "-",
                r.stack if r else "-",
                r.shared if r else "-",
                ("%.0f%%" % (100 * o.fraction)) if o and o.launchable else "-",
                (o.limiter if o and o.launchable else "-"),
                verdict,
            ]
        )
    return out


def render(rows_):
    return table(HEADERS, rows_)

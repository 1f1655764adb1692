"""Where a kernel's evaluations went: its pipeline search, each family of rewrites, confirmation.

    spent = search_spending(study, remix)             # after the search: {"pipelines": 18, ...}
    spent = confirmation_spent(spent, candidates, confirmed, again, captures, simplified)
    spending_table(results)                           # the report's table, one row per kernel

One evaluation is one replay of a candidate (its pairs, its verification runs): a trial of a
study, a rewrite's check, a confirmation round of one candidate, one setting put back by
``simplify``. The search's part is read back from what is kept (the study's split, the
remix file), so a resumed run counts what the killed one spent too.
"""

from .. import cxxnames
from ..report import table
from .mutators.ruleset import rewrite_class

PIPELINES = "pipelines"  # the original's own search, up to the rewrites' turn
GIVEN_BACK = "given back"  # the rewrites' share that went back to the pipeline search
CONFIRMATION = "confirmation"  # lean form of the best, re-verification, rounds, measured again
REWRITES = "rewrites: "  # followed by the rewrite class of the rule that made each child


def search_spending(study, remix=None):
    """The search's part: ``study`` the original's (its split kept by
    ``tune.pipeline_search``), ``remix`` its outer loop, if it had one. Also says at which
    evaluation the pipeline search handed over, and whether on a plateau."""
    split = study.study.user_attrs.get("split") or {}
    extended = remix.extended if remix else 0
    handover = split.get("handover", len(study.trials()) - extended)
    spent = {PIPELINES: handover, GIVEN_BACK: extended}
    for child in remix.children if remix else ():
        family = REWRITES + rewrite_class(child.rule)
        spent[family] = spent.get(family, 0) + child.evaluations
    return {"split": spent, "handover": handover, "plateau": bool(split.get("plateau"))}


def confirmation_spent(spending, candidates, confirmed, again=None, captures=1, simplified=0):
    """``spending`` with its confirmation's evaluations: ``simplified`` settings tried
    without, each candidate re-verified on the ``captures`` recorded calls, then one per
    round it was measured in (and the picked one's rounds measured again)."""
    rounds = sum(len(c.round_ratios) for c in confirmed) + (len(again.round_ratios) if again else 0)
    out = dict(spending or {"split": {}})
    spent = out["split"].get(CONFIRMATION, 0) + simplified + len(candidates) * captures + rounds
    out["split"] = dict(out["split"], **{CONFIRMATION: spent})
    return out


def spending_table(results):
    """One row per kernel: its evaluations by where they went, and when its pipeline
    search handed over to the rewrites ("plateau at 18": early, its best had stopped
    rising; "at 30": at its share of the budget, or where it stopped climbing past it). ""
    when no result says."""
    rows = [r for r in results if getattr(r, "spending", None)]
    if not rows:
        return ""
    families = sorted({k for r in rows for k in r.spending["split"] if k.startswith(REWRITES)})
    columns = [PIPELINES, GIVEN_BACK] + families + [CONFIRMATION]
    lines = []
    for r in rows:
        split, s = r.spending["split"], r.spending
        handover = ("plateau at %d" if s.get("plateau") else "at %d") % s.get("handover", 0)
        lines.append(
            [cxxnames.display(r.kernel)]
            + [split.get(c, 0) for c in columns]
            + [sum(split.values()), handover if any(k.startswith(REWRITES) for k in split) or s.get("plateau") else "-"]
        )
    headers = ["kernel"] + [c[len(REWRITES) :] if c.startswith(REWRITES) else c for c in columns]
    return "where the evaluations went\n" + table(headers + ["total", "rewrites from"], lines)

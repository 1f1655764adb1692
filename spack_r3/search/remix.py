"""The outer loop: MAP-Elites over source variants of one kernel's unit.

    remix = Remix(workspace, store, target, facts, mutator, options)
    remix.run(servers, base_study, progress)
    remix.studies()   # the inner studies of the children that compiled and verified

A child is a rewrite of a parent's unit (the original, or an earlier child) proposed
by a mutator (``mutators``). It is compiled and verified in a replay worker (several
verification runs if it may be parallel: a data race can verify once by luck); one
that fails goes back to its mutator with the diagnostic, up to ``repairs`` times. A
child that verifies gets a short inner Bayesian study of its own (``bayes.Study``, one
per source variant) over pipelines, launch settings and the rewrite's macro knobs; its
fitness is that study's best verified paired speedup. The study tries the original's
best settings first (``inherit``; then the best with reassociation, where the tolerance
allows it and the best did not use it, and that without Polly: see
``inherited_settings``); a child that is clearly slower with them than the original's
best (its best pair under the original's best median, or its median under it by more
than noise) is cut there, and the rest of its study's budget goes back to the
original's search at once: most rewrites of a kernel where none helps cost three or
four evaluations, not a whole study, and the pipeline search keeps most of the budget
they were held.

The archive keeps the best child of each cell of two behaviour descriptors:

- rewrite class: which kinds of change the variant carries since the original, the
  classes (``Rule.kind``, ``mutators/ruleset.py``) joined with "+" (``loop-order+aliasing``);
- size: how many lines of the unit it changes, bucketed by ``SIZE_BUCKETS``.

Parents are drawn uniformly from the occupied cells (the original is one), so a
variant that is not the best overall but is the best of its kind still gets children.
A rewrite that needs another one first is found sooner: the rewrites a child makes
possible, that its parent did not offer, are tried right after it (``_follow_ups``:
matmul's unroll-and-jam after the interchange to i,k,j).

State: every child is written to ``<workspace>/remix/<study>.json`` as soon as it is
proposed (a model's answer is never asked for twice) and again when it is measured;
inner studies live in Optuna storage. A killed run resumes both. A state file that does
not read is moved aside (``.corrupt``) with a warning, and the loop starts afresh.

A model's part is counted (``ModelUse``: requests, answers, usable rewrites, the last
error), kept in the state file and handed to the kernel's result on its target
(``target.outcome.model``): a run in which the model gave nothing says so in the table and in
--json, and with a warning on stderr as it happens. A model that never answered at all
(nothing listens, every request timed out) is a ModelError, after the request in flight
when the budget ran out has had its timeout.
"""

import difflib
import hashlib
import json
import os
import queue
import random
import re
import threading
from dataclasses import asdict, dataclass, field, replace
from typing import Dict, List, Optional, Tuple

from .. import backends, cxxnames
from ..capture import load_capture_dir
from ..data import OK, WRONG_OUTPUT, Variant
from ..errors import R3Error
from ..fileutil import write_atomic
from ..replay.source import unit_text
from ..report import warn
from ..sourcepatch import PatchError, apply_patch, make_patch
from .bayes import Study, others
from . import openmp
from .noise import PairBudget, clearly_above
from .mutators import Feedback, KernelSource, Proposal
from .mutators.cast import ASTError
from .mutators.ruleset import rewrite_class, rule, threaded
from .space import LOOP_SWITCHES, POLLY_BLOCK, Space

SIZE_BUCKETS = ((2, "small"), (10, "medium"))  # changed lines up to N; more: "large"
MAX_REPEATS = 50
MAX_EMPTY_ANSWERS = 3  # answers in a row with no usable rewrite: the model is asked no more
ORIGINAL = "original"


@dataclass
class ModelUse:
    """What the model gave one kernel's loop (over every run that resumed it)."""

    asked: int = 0  # requests (proposals and repairs)
    answered: int = 0  # requests that got an answer
    rewrites: int = 0  # usable rewrites in those answers
    error: str = ""  # the last request's failure, if the last one failed

    def to_json(self):
        return asdict(self)

    @classmethod
    def from_json(cls, d):
        return cls(**{k: d[k] for k in ("asked", "answered", "rewrites", "error") if k in d})

    def summary(self):
        """One line, or "" when the model gave usable rewrites and did not fail."""
        if self.rewrites and not self.error:
            return ""
        said = "%d request(s), %d answered, %d usable rewrite(s)" % (self.asked, self.answered, self.rewrites)
        return "%s%s" % (said, ": " + self.error if self.error else "")


@dataclass
class Child:
    """One source variant: what made it, its patch against the original unit, and its fate."""

    id: str
    parent: str
    rules: Tuple[str, ...]  # every rewrite since the original, in order
    description: str
    patch: str
    knobs: Dict[str, Tuple[int, ...]] = field(default_factory=dict)
    status: str = "pending"  # pending, then OK or the failed check's status
    diagnostic: str = ""
    speedup: float = 0.0  # best verified paired speedup of its inner study (0: none)
    check_speedup: float = 0.0  # the rewrite alone, at the baseline pipeline
    evaluations: int = 0  # replay evaluations spent on it (check, repairs, inner study)
    repairs: int = 0
    cut: str = ""  # why its inner study stopped after the inherited settings ("": it did not)
    promise: int = 0  # its proposal's (``Proposal.promise``)

    @property
    def rule(self):
        return self.rules[-1] if self.rules else ORIGINAL

    def cell(self):
        classes = sorted({rewrite_class(r) for r in self.rules})
        changed = sum(1 for line in self.patch.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---")))
        size = next((name for limit, name in SIZE_BUCKETS if changed <= limit), "large")
        return ("+".join(classes) or ORIGINAL, size if self.rules else "-")

    def to_json(self):
        d = asdict(self)
        d["rules"], d["knobs"] = list(self.rules), {k: list(v) for k, v in self.knobs.items()}
        return d

    @classmethod
    def from_json(cls, d):
        return cls(**dict(d, rules=tuple(d["rules"]), knobs={k: tuple(v) for k, v in d.get("knobs", {}).items()}))


def kernel_source(capture, directory, text=None, rules=()):
    """The kernel's unit as a mutator sees it (``text``: a variant's carrying ``rules``, else
    the recorded one). A unit built without -fopenmp may get it (``search.openmp``); a
    variant that added threads is parsed as it compiles, with -fopenmp."""
    flags = openmp.unit_flags(capture)
    parse = [a for a in flags if not a.startswith("-O")]
    built = openmp.built_with_openmp(flags)
    refused = openmp.refusal(capture, directory)
    added = openmp.adds_openmp(capture, rules)
    if added:
        parse.append("-fopenmp")
    function = capture.kernel
    if backends.of_capture(capture) is not backends.HOST:
        function = region_function(capture.kernel)  # the rules rewrite the function the region is in
    if function.startswith(("_Z", "_Q")):  # C++'s and flang's names: the name in the source
        function = cxxnames.qualified(function).split("(")[0].split("::")[-1]
    return KernelSource(
        kernel=capture.kernel,
        function=function,
        filename=os.path.basename(capture.source_file),
        text=unit_text(capture, directory) if text is None else text,
        parse_args=parse,
        compile_dir=capture.compile_dir,
        clang=capture.compile_command[0],
        include_dir=os.path.dirname(capture.source_file),
        openmp=built or added,
        add_openmp=not built and not refused,
        openmp_refusal=refused,
        tolerance=capture.tolerance,
        rules=tuple(rules),
    )


def region_function(kernel):
    """The function an OpenMP target region's device function comes from
    (``__omp_offloading_fe00_1234ab_jacobi_step_l8`` -> ``jacobi_step``)."""
    from ..record.offload import region_key

    return re.sub(r"_l\d+$", "", region_key(kernel))


# A target directive: its line is part of its region's name (function and line, ``_l8``).
_TARGET = re.compile(r"^\s*#\s*pragma\s+omp\s+target\b")


def keep_region_lines(original, text):
    """``text`` (a rewrite of ``original``) with each OpenMP target directive at its original
    line, as the compiler counts lines: a ``#line`` directive before each one that a
    rewrite moved (a knob's ``#define`` at the top, a pragma above it). A region's name
    holds its line, and the capture, the plan, ``r3-apply`` and the check's profile all
    name it so: a rewrite inside a region must leave it where the recording saw it."""
    if not re.search(r"^\s*#\s*line\b", original, re.M):  # a parent's own are placed again
        text = re.sub(r"(?m)^#line \d+\n", "", text)
    old, new = original.splitlines(keepends=True), text.splitlines(keepends=True)
    at = {}  # new line index -> original line number, for the directives that survive
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):  # a line edited in place keeps its place
            for k in range(i2 - i1):
                if _TARGET.match(old[i1 + k]):
                    at[j1 + k] = i1 + k + 1
    out, shift = [], 0  # shift: the compiler's line number of new line j is j + 1 + shift
    for j, line in enumerate(new):
        if j in at and j + 1 + shift != at[j]:
            out.append("#line %d\n" % at[j])
            shift = at[j] - (j + 1)
        out.append(line)
    return "".join(out)


def child_id(patch, knobs):
    return hashlib.sha256(json.dumps([patch, sorted(knobs)]).encode()).hexdigest()[:10]


@dataclass
class RemixOptions:
    budget: int = 60  # replay evaluations for the whole outer loop of one kernel
    child_budget: int = 10  # inner Bayesian evaluations per child that verifies
    repairs: int = 2  # times a failed child goes back to its mutator
    sampler: str = "tpe"
    seed: Optional[int] = None
    pairs: int = 5
    timeout: float = 60.0
    pending_proposals: int = 4  # model proposals asked for ahead of the evaluations
    # What a cut child leaves stays with the rewrites (the pipeline search had plateaued:
    # ``tune.plateaued``) instead of going back to the pipeline search.
    keep_cut: bool = False


class Remix:
    def __init__(self, workspace, store, target, facts, mutator, options, patterns=None, inherit=(), noise=()):
        self.workspace, self.store, self.target, self.facts = workspace, store, target, facts
        # How noisy the kernel's pairs proved in the original's search: children measure with
        # as many pairs from their first evaluation on (see ``noise``).
        self.pair_budget = PairBudget(options.pairs, prior=noise)
        # The original's best settings (Optuna params): each child's search tries them first,
        # so a rewrite is measured with the pipeline that already won, not only from scratch.
        self.inherit = inherited_settings(inherit)
        self.mutator, self.options, self.patterns = mutator, options, patterns
        self.capture_dir = target.captures[0]
        self.capture = load_capture_dir(self.capture_dir, verify_digests=False)
        self.original = unit_text(self.capture, self.capture_dir)
        self.name = "%s@%s/%s" % (target.kernel, target.capture_id, mutator.name)
        if target.source_variant != ORIGINAL:  # a search of its own (a benchmark's, a test's)
            self.name += "/" + target.source_variant
        self.path = os.path.join(workspace.remix_dir, hashlib.sha256(self.name.encode()).hexdigest()[:16] + ".json")
        # Evaluations of the original's own search that this loop's budget paid for: run
        # while a model answered, and what the mutator left when it had nothing more to try.
        self.extended = 0
        self.model = ModelUse()
        self.children: List[Child] = self._load()
        self.rng = random.Random(options.seed if options.seed is not None else 0)
        self._lock = threading.Lock()
        self._offered = {}  # parent id -> the rules that proposed rewrites of it

    # -- state -------------------------------------------------------------------------

    def _load(self):
        if not os.path.isfile(self.path):
            return []
        try:
            with open(self.path) as f:
                data = json.load(f)
            children = [Child.from_json(c) for c in data["children"]]
            extended, model = int(data.get("extended", 0)), ModelUse.from_json(data.get("model") or {})
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as err:
            # Written atomically, so only other hands break it; kept aside, not read again.
            aside = self.path + ".corrupt"
            os.replace(self.path, aside)
            warn(
                "warning: %s does not read (%s: %s); moved to %s, the source variants of %s start afresh"
                % (self.path, type(err).__name__, (str(err).splitlines() or [""])[0][:120], aside, self.name)
            )
            return []
        self.extended, self.model = extended, model
        return children

    def _save(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with self._lock:
            data = {"name": self.name, "extended": self.extended, "children": [c.to_json() for c in self.children]}
            if self.mutator.uses_model:
                data["model"] = self.model.to_json()
        write_atomic(self.path, json.dumps(data, indent=1))

    def _asked(self, answered, rewrites=0, error=""):
        """Count one model request (``answered``: it got an answer)."""
        with self._lock:
            self.model.asked += 1
            self.model.answered += int(answered)
            self.model.rewrites += rewrites
            self.model.error = error
        self.target.outcome.model = self.model.to_json()  # the kernel's result reports it

    def spent(self):
        return self.extended + sum(c.evaluations for c in self.children)

    def text_of(self, child):
        return self.original if child is None else apply_patch(self.original, child.patch)

    # -- the archive -------------------------------------------------------------------

    def archive(self, base_speedup):
        """cell -> elite (None stands for the original, whose fitness is the base study's)."""
        cells = {(ORIGINAL, "-"): (base_speedup, None)}
        for c in self.children:
            if c.status == OK and c.speedup > cells.get(c.cell(), (0.0, None))[0]:
                cells[c.cell()] = (c.speedup, c)
        return cells

    def _parents(self, base_speedup):
        elites = [child for _, child in self.archive(base_speedup).values()]
        self.rng.shuffle(elites)
        return elites

    # -- proposals ---------------------------------------------------------------------

    def _source(self, parent):
        return kernel_source(self.capture, self.capture_dir, self.text_of(parent), parent.rules if parent else ())

    def _feedback(self, parent, base_speedup):
        ok = sorted((c for c in self.children if c.status == OK), key=lambda c: -c.speedup)
        failed = [c for c in self.children if c.status not in (OK, "pending")][-3:]
        examples = self.patterns.examples(self.target.kernel) if self.patterns else []
        return Feedback(
            parent_speedup=parent.speedup if parent else base_speedup,
            best=[(c.description, c.speedup) for c in ok[:3]],
            failures=[(c.description, c.diagnostic) for c in failed],
            examples=examples,
        )

    def _child(self, parent, proposal, repairs=0):
        """A Child for ``proposal`` (a rewrite of ``parent``'s text), or None if it is a
        rewrite already tried or no change."""
        text = proposal.text
        if backends.of_capture(self.capture) is not backends.HOST:
            text = keep_region_lines(self.original, text)
        patch = make_patch(self.original, text, os.path.basename(self.capture.source_file))
        if not patch:
            return None
        knobs = dict(parent.knobs if parent else {}, **proposal.knobs)
        ident = child_id(patch, knobs)
        if any(c.id == ident for c in self.children):
            return None
        return Child(
            ident,
            parent.id if parent else ORIGINAL,
            (parent.rules if parent else ()) + (proposal.rule,),
            proposal.description,
            patch,
            knobs,
            repairs=repairs,
            promise=proposal.promise,
        )

    def _rewrites(self, parent, base_speedup):
        """The mutator's rewrites of ``parent`` in its order."""
        try:
            props = self.mutator.propose(self._source(parent), self._feedback(parent, base_speedup))
        except (ASTError, PatchError):  # this parent does not parse: no children of it (nothing asked)
            props = []
        except R3Error as err:
            if self.mutator.uses_model:
                self._asked(False, error=str(err))
            raise
        else:
            if self.mutator.uses_model:
                self._asked(True, len(props))
        if self.facts.serial:  # --serial: no rewrite that adds threads
            props = [p for p in props if not rule(p.rule).threads]
        self._offered[parent.id if parent else ORIGINAL] = {p.rule for p in props}
        return props

    def _proposals(self, parent, base_speedup):
        """(parent, proposal) for each rewrite of ``parent``, in the order ``first_to_try``
        gives them."""
        ranking = self.patterns.rule_ranking() if self.patterns else {}
        return [(parent, p) for p in first_to_try(self._rewrites(parent, base_speedup), ranking)]

    def _follow_ups(self, parent, child, base_speedup):
        """The rewrites of a kind that ``child`` makes possible and its parent did not (a rule
        the parent was not offered at all), the first of each: they are tried next, before
        the parent's other rewrites. A rewrite that only enables another is rarely fast
        itself (matmul's interchange to i,k,j: slower than Polly's code, and cut), and
        drawn with the rest, what it enables came after the budget was spent. The same rule
        at another loop (``unroll the j loop`` after ``unroll the k loop``) waits its turn,
        unless it is a known win (``known_win``): the two-product chain's second nest is
        interchanged right after its first, and only both together make it fast."""
        key = parent.id if parent else ORIGINAL
        if key not in self._offered:
            self._rewrites(parent, base_speedup)
        known = self._offered[key] | {child.rule}
        rewrites = self._rewrites(child, base_speedup)
        out = [(child, p) for p in sorted((p for p in rewrites if known_win(p)), key=lambda p: -p.promise)]
        for p in rewrites:  # the mutator's order: its best bets first
            if p.rule not in known and not known_win(p):
                known.add(p.rule)
                out.append((child, p))
        return out

    # -- evaluation --------------------------------------------------------------------

    def _variant(self, child):
        return Variant(
            source_patch=child.patch,
            source_rule="+".join(child.rules),
            source_defines={k: v[0] for k, v in child.knobs.items()},
            source_openmp=openmp.adds_openmp(self.capture, child.rules),
        )

    def _check(self, server, child):
        """Compile and verify the child at the baseline pipeline (one evaluation)."""
        variant = self._variant(child)
        runs = 1
        if self.target.parallel or any(rule(r).verify_again for r in child.rules):
            # A data race can verify once by luck: several runs, with every core the worker has.
            runs, variant.launch.threads = 5, max(self.facts.cores, self.capture.launch.get("threads") or 1)
        ev = self.target.submit(
            server, variant, pairs=self.pair_budget.pairs(), timeout=self.options.timeout, verify_runs=runs
        )
        child.evaluations += 1
        child.status, child.diagnostic = ev.status, (ev.diagnostics or "")
        child.check_speedup = ev.speedup if ev.status == OK else 0.0
        return ev

    def child_study(self, child):
        facts = replace(self.facts, knobs=dict(child.knobs))
        # A rewrite that adds OpenMP threads makes the kernel parallel: threads become a setting.
        if threaded(child.rules):
            facts = replace(facts, parallel=True)
        variant_name = (
            child.id if self.target.source_variant == ORIGINAL else "%s/%s" % (self.target.source_variant, child.id)
        )  # the studies of a search of its own
        target = replace(
            self.target,
            base=self._variant(child),
            source_variant=variant_name,
            parallel=self.target.parallel or threaded(child.rules),
        )
        space = Space(facts)
        return Study(
            self.store,
            target,
            space,
            sampler=self.options.sampler,
            seed=self.options.seed,
            pairs=self.options.pairs,
            timeout=self.options.timeout,
            seeds=[space.adopt(values) for values in self.inherit],
            noise=self.pair_budget.noises,
            sweeps=False,
        )  # a short study: its inherited settings come out of the original's sweeps

    def _measure(self, servers, child, progress, base_speedup, check=None):
        """The child's inner study (resumed if a killed run started it): the inherited
        settings first, the rest of its budget only if they leave it in the running. The
        ``check`` evaluation counts as the study's trial at the baseline settings, where
        those are what it measured (not for a check run with more threads)."""
        study = self.child_study(child)
        baseline = study.space.defaults()
        if (
            check is not None
            and check.status == OK
            and study.space.variant(baseline, study.target.base).to_json() == check.variant
        ):
            study.add_evaluated(baseline, Variant.from_json(check.variant), check)
        checks = sum(1 for t in study.trials() if t.user_attrs.get("check"))  # (paid for as the check)
        before = len(study.trials())
        # The last child gets what is left of the loop's budget, so that r3 is compared with
        # a search alone at the same budget (it ran 2 past 150 on the dense demo).
        most = checks + min(self.options.child_budget, before - checks + max(0, self.options.budget - self.spent()))
        # (Only the Bayesian study asks the inherited settings first.)
        inherited = checks + min(len(self.inherit), most - checks) if self.options.sampler == "tpe" else 0
        if inherited > checks and before < inherited:
            study.run(servers, inherited, progress)
            child.cut = clearly_below(study.best(1), child.check_speedup, base_speedup)
        if not child.cut:
            study.run(servers, most, progress)
        best = study.best(1)
        child.evaluations += len(study.trials()) - before
        child.speedup = max([t.value for t in best] + [child.check_speedup])

    def studies(self):
        """(child, inner Study) of every child that verified."""
        return [(c, self.child_study(c)) for c in self.children if c.status == OK]

    # -- the loop ----------------------------------------------------------------------

    def run(self, servers, base_speedup, progress=None, say=None, extend=None):
        """Spend the budget on children. ``extend(n)`` runs n more evaluations of the
        original's own search: what workers do while a model is still answering, and
        where the budget goes that the mutator leaves (no more rewrites to try)."""
        say = say or (lambda line: None)
        refused = openmp.refusal(self.capture, self.capture_dir)
        if refused:
            say("  %s: no rewrite that adds OpenMP threads: %s" % (cxxnames.display(self.target.kernel), refused))
        if self.mutator.uses_model:
            self.target.outcome.model = self.model.to_json()
        for child in self.children:  # a killed run's unfinished children first
            if child.status == "pending":
                self._evaluate(servers, child, progress, say, base_speedup)
        extended_before = self.extended
        feed = ProposalFeed(self, base_speedup) if self.mutator.concurrent else None
        tried_parents = set()
        todo: List[Tuple[Optional[Child], Proposal]] = []
        repeats = 0  # proposals in a row that were tried before: a mutator with nothing new
        try:
            while self.spent() < self.options.budget and repeats < MAX_REPEATS:
                item = None
                if feed:
                    item = feed.next(block=False)
                    if item is None and feed.busy():
                        if extend:
                            self._extend(extend, min(len(servers), self.options.budget - self.spent()))
                            continue
                        item = feed.next(block=True)
                    if item is None and not feed.busy():
                        if feed.errors:
                            warn(
                                "warning: the model stopped answering (%s): no more source variants of %s"
                                % (feed.errors[0], cxxnames.display(self.target.kernel))
                            )
                        break
                else:
                    while not todo:
                        parents = [
                            p for p in self._parents(base_speedup) if (p.id if p else ORIGINAL) not in tried_parents
                        ]
                        if not parents:
                            break
                        tried_parents.add(parents[0].id if parents[0] else ORIGINAL)
                        todo = self._proposals(parents[0], base_speedup)
                    if not todo:
                        break
                    item = todo.pop(0)
                parent, proposal = item
                child = self._child(parent, proposal)
                if child is None:
                    repeats += 1
                    continue
                repeats = 0
                with self._lock:
                    self.children.append(child)
                self._save()
                say("  %s: %s" % (cxxnames.display(self.target.kernel), child.description))
                self._evaluate(servers, child, progress, say, base_speedup, parent, proposal)
                if child.cut and extend and not self.options.keep_cut:
                    # What a cut child did not use goes to the original's search at once, not to
                    # more children: a kernel with many rewrites, none of them in the running
                    # (matmul), would otherwise spend every held evaluation on rewrites.
                    # Unless that search had plateaued: then it stays with the rewrites.
                    unused = 1 + self.options.child_budget - child.evaluations
                    self._extend(extend, max(0, min(unused, self.options.budget - self.spent())))
                if feed and child.status == OK:
                    tried_parents.discard(child.id)
                elif child.status == OK:
                    todo[:0] = self._follow_ups(parent, child, base_speedup)
            if feed and self.mutator.uses_model and not feed.answered:
                # The budget went to the original's search while the first request was out:
                # it gets its timeout, and a model that never answered is still an error.
                # Its request is bounded by the client (one timeout); the join waits for that
                # request's end, with room for a loaded machine: joined for exactly one timeout,
                # it raced the request's own and a silent endpoint passed as a model with
                # nothing to say.
                feed.stop()
                feed.thread.join(2 * (self.mutator.timeout or 60) + 30)
                if feed.errors:
                    raise feed.errors[0]
        except R3Error:
            if feed and not feed.answered:
                # A model that never answered spent nothing of the outer loop's budget: what
                # the workers searched meanwhile stays in the original's study.
                self.extended = extended_before
                self._save()
            raise
        finally:
            if feed:
                feed.stop()
            if self.mutator.uses_model:
                self._save()
        if self.mutator.uses_model and self.model.asked and not self.model.rewrites:
            warn(
                "warning: the model gave %s no usable rewrite: %s"
                % (cxxnames.display(self.target.kernel), self.model.summary())
            )
        left = self.options.budget - self.spent()
        if extend and left > 0:
            say(
                "  %s: no more source variants to try; %d evaluations back to the pipeline search"
                % (cxxnames.display(self.target.kernel), left)
            )
            self._extend(extend, left)

    def _extend(self, extend, n):
        """n more evaluations of the original's own search, paid from this loop's budget."""
        extend(n)
        self.extended += n
        self._save()

    def _evaluate(self, servers, child, progress, say, base_speedup, parent=None, proposal=None):
        while True:
            ev = self._check(servers[0], child)
            self._save()
            if ev.status == OK or child.repairs >= self.options.repairs or proposal is None:
                break
            try:
                fixed = self.mutator.repair(self._source(parent), proposal, _diagnostic(ev))
            except (ASTError, PatchError):
                break
            except R3Error as err:  # the child stays as it failed; the feed finds out on its own
                if not self.mutator.uses_model:
                    raise
                self._asked(False, error=str(err))
                warn("warning: no repair of %s: %s" % (child.description, err))
                break
            if self.mutator.uses_model:
                self._asked(True, int(fixed is not None))
            if fixed is None:
                break
            say("  repairing %s (%s)" % (child.description, ev.status))
            fixed_child = self._child(parent, fixed, repairs=child.repairs + 1)
            if fixed_child is None:
                break
            # The repaired rewrite takes the failed one's place; its failure stays on record.
            fixed_child.evaluations = 0
            with self._lock:
                self.children.append(fixed_child)
            self._save()
            child, proposal = fixed_child, fixed
        if child.status == OK:
            self._measure(servers, child, progress, base_speedup, ev)
            self._save()
            if child.cut:
                say("  %s: %s" % (child.description, child.cut))
            if self.patterns:
                self.patterns.add(self.target.kernel, child, self.facts, child.speedup / base_speedup)


def known_win(proposal):
    """Whether a rewrite is known to keep the results exact and to pay on its shape: an
    exact rule's proposal that carries a promise (``Proposal.promise``: the interchange
    that puts a unit stride innermost, which sped matmul up and verifies bit for bit)."""
    return rule(proposal.rule).exact and proposal.promise > 0


def first_to_try(proposals, ranking=None):
    """A parent's rewrites in the order they are tried: first, for each rule that made an
    earlier kernel faster (``ranking``: rule -> its best gain, ``Patterns.rule_ranking``),
    its first proposal, the largest gain first; then the known wins (``known_win``), the
    largest promise first; then the rest, one rewrite class at a time
    (``by_class_in_turn``), inherited rules' first; last, those whose rule expects them to
    cost (a negative promise: an interchange that makes the innermost loop's accesses
    strided, tried twice on Jacobi and cut both times). A rule that says when it should pay
    (``Rule.promising``) is inherited only by a proposal that says so: the interchange
    that won on a product chain is no reason to swap a stencil's rows and columns."""
    ranking = ranking or {}

    def gain(p):  # what the rule made an earlier kernel gain, where it applies to ``p`` (1.0: nothing)
        return ranking.get(p.rule, 1.0) if not rule(p.rule).promising or p.promise > 0 else 1.0

    inherited, rules = [], set()
    for p in sorted(proposals, key=lambda p: -gain(p)):
        if gain(p) > 1.0 and p.rule not in rules:
            rules.add(p.rule)
            inherited.append(p)
    taken = {id(p) for p in inherited}
    known = sorted((p for p in proposals if known_win(p) and id(p) not in taken), key=lambda p: -p.promise)
    taken |= {id(p) for p in known}
    rest = sorted((p for p in proposals if id(p) not in taken and p.promise >= 0), key=lambda p: -gain(p))
    costly = [p for p in proposals if id(p) not in taken and p.promise < 0]
    return inherited + known + by_class_in_turn(rest) + costly


def by_class_in_turn(proposals):
    """The proposals reordered so that each rewrite class gives one before any gives a
    second, classes in the order they first appear: a budget that pays for few children
    fills several cells of the archive, not one (LULESH, on a small budget: one child per
    kernel, always the first rule's, ``restrict``, and never the ``omp ... simd`` behind it)."""
    queues: Dict[str, List[Proposal]] = {}
    for p in proposals:
        queues.setdefault(rewrite_class(p.rule), []).append(p)
    out = []
    while any(queues.values()):
        for q in queues.values():
            if q:
                out.append(q.pop(0))
    return out


def inherited_settings(settings):
    """What each child's study tries first: the original's best settings, then the best of
    them with every fast-math flag but the non-finite ones, where the kernel's tolerance
    lets the search relax FP at all (a rewrite can make a sum vectorizable only under
    reassociation, a staged copy's unit-stride reduction, which the original's winner had
    no reason to allow); then, where that runs Polly, the same without Polly and with the
    loop optimizations it turned off (``LOOP_SWITCHES``) as its -O level does them: a
    rewrite reshapes the loop nest that Polly's settings were chosen for, and Polly's code
    often wins with the vectorizers off (bench/README.md, "Measurements behind design
    choices")."""
    out = [dict(s) for s in settings]
    last = out[0] if out else {}
    if last.get("fast_math") in ("none", "contract"):
        last = dict(last, fast_math="reassoc+contract+nsz+arcp")
        out.append(last)
    if last.get("polly"):
        back_on = {k: "default" for k in LOOP_SWITCHES if last.get(k) == "off"}
        out.append(dict(others(last, POLLY_BLOCK), polly=False, **back_on))
    return out


def clearly_below(best, check_speedup, base_speedup):
    """Why a child is out of the running against the original's best median speedup
    ``base_speedup`` ("" if it is not), from its best trial so far (``best``) and its
    check at the baseline pipeline: even the best pair of that trial is slower, or its
    median is slower by more than two evaluations tell apart (``noise.INDISTINCT``). The
    second is for kernels whose pairs read bimodally (one pair of matmul's Polly code can
    read well above its median): judged by its best pair alone, such a child was not cut
    and kept evaluations from the original's search. A child whose inherited settings all
    failed is not judged by them."""
    if not best:
        return ""
    top = best[0].user_attrs["evaluation"].get("speedup_max") or best[0].value
    if max(top, check_speedup) < base_speedup:
        return "cut after the original's best settings: at most %.2fx against %.2fx" % (top, base_speedup)
    reached = max(best[0].value, check_speedup)
    if clearly_above(base_speedup, reached):
        return "cut after the original's best settings: %.2fx at best (median) against %.2fx" % (reached, base_speedup)
    return ""


def _diagnostic(ev):
    if ev.status == WRONG_OUTPUT:
        return "wrong output: %s" % ev.diagnostics
    return "%s: %s" % (ev.status, ev.diagnostics)


class ProposalFeed:
    """Asks a slow mutator (a model) for proposals on a thread, ahead of the evaluations,
    so the replay workers have work while it answers."""

    def __init__(self, remix, base_speedup):
        self.remix, self.base_speedup = remix, base_speedup
        self.items = queue.Queue()
        self.errors = []
        self.answered, self.empty = 0, 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self._stop.is_set():
            if self.items.qsize() >= self.remix.options.pending_proposals:
                self._stop.wait(0.05)
                continue
            try:
                parent = self.remix._parents(self.base_speedup)[0]
                items = self.remix._proposals(parent, self.base_speedup)
                for item in items:
                    self.items.put(item)
                self.answered += 1
                self.empty = 0 if items else self.empty + 1
                if self.empty >= MAX_EMPTY_ANSWERS:  # the model has nothing more to say
                    return
            except R3Error as err:  # the endpoint is gone: the loop stops asking
                self.errors.append(err)
                return

    def busy(self):
        return self.thread.is_alive() and not self.errors

    def next(self, block):
        try:
            return self.items.get(block=block, timeout=1.0 if block else None)
        except queue.Empty:
            # A model that never answered is an error; one that stops answering ends the loop.
            if self.errors and self.items.empty() and not self.answered:
                raise self.errors[0]
            return None

    def stop(self):
        self._stop.set()

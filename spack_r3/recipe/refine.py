"""The refine loop: validate, ``spack spec``, ``spack install``, read the diagnostics, fix, retry.

Every attempt is kept under ``<workspace>/recipes/<name>/attempt-N/``: the recipe text, the
validation verdict, what ``spack spec`` and ``spack install`` printed, the build log, the
diagnostics and findings, the fixes made for the next attempt, and ``outcome.json``.
A recipe is only ever written where Spack can load it after it passed validation, and only
Spack subprocesses load it.
"""

import json
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from typing import List, Optional

from ..childoutput import read_excerpt
from ..fileutil import write_atomic
from . import fixes, templates, testfixes
from .validate import validate

MAX_DIAGNOSTICS = 6000
LOG_EXCERPT_BYTES = 8 << 20  # of a build log's start and of its end, read for the diagnosis
DIAGNOSTICS = "prompts/diagnostics.tmpl"  # the text of the diagnostics, under recipes/


@dataclass
class Attempt:
    number: int
    directory: str
    generator: str
    outcome: str = "pending"  # rejected | concretize-failed | install-failed | install-empty | installed | concretized
    # (an installed attempt whose check_passed is False is refined from the test's diagnostics)
    valid: bool = False
    concretized: bool = False
    installed: bool = False
    check_passed: Optional[bool] = None
    reasons: List[str] = field(default_factory=list)  # validation
    findings: List[dict] = field(default_factory=list)
    fixes: List[str] = field(default_factory=list)  # applied to make the next attempt
    diagnostics: str = ""
    spec_hash: Optional[str] = None
    prefix: Optional[str] = None
    seconds: float = 0.0

    def to_dict(self):
        return asdict(self)


def next_attempt_number(recipe_dir):
    n = 0
    if os.path.isdir(recipe_dir):
        for d in os.listdir(recipe_dir):
            m = re.match(r"attempt-(\d+)$", d)
            if m:
                n = max(n, int(m.group(1)))
    return n + 1


def _tail(text, n=MAX_DIAGNOSTICS):
    return text if len(text) <= n else "...\n" + text[-n:]


def check_verdict(ok, output):
    """True/False from the summary line of ``spack test run``; None when there were no tests."""
    counts = {}
    for n, status in re.findall(r"(\d+) (passed|failed|errored|no_tests|skipped|untested)\b", output):
        counts[status] = counts.get(status, 0) + int(n)
    if counts.get("failed") or counts.get("errored") or (not ok and counts):
        return False
    if counts.get("passed"):
        return True
    return None


def installed_nothing(prefix):
    """None if ``prefix`` holds something where a user looks for it (a file under bin/, lib/,
    lib64/ or include/, or share/ for a data package), else what is there instead."""
    if not prefix or not os.path.isdir(prefix):
        return None  # nothing to judge by (no location): Spack's word stands
    for d in ("bin", "lib", "lib64", "include"):
        for _root, _dirs, files in os.walk(os.path.join(prefix, d)):
            if files:
                return None
    there = sorted(x for x in os.listdir(prefix) if x != ".spack")
    return "only %s" % (", ".join(there) if there else "Spack's own metadata")


class Refiner:
    """Runs attempts for one package until it installs or ``max_attempts`` are spent."""

    def __init__(self, spack, repo, index, recipe_dir, max_attempts=3, run_check=True, progress=None, install=True):
        self.install = install
        self.spack = spack
        self.repo = repo
        self.index = index
        self.recipe_dir = recipe_dir
        self.max_attempts = max_attempts
        self.run_check = run_check
        self.progress = progress or (lambda msg: None)

    def run(self, name, generator, analysis, source, layout, examples=(), initial_text=None) -> List[Attempt]:
        attempts: List[Attempt] = []
        text = initial_text
        feedback = previous = None
        for i in range(self.max_attempts):
            number = next_attempt_number(self.recipe_dir)
            adir = os.path.join(self.recipe_dir, "attempt-%d" % number)
            os.makedirs(adir, exist_ok=True)
            how = "given recipe" if (text is not None and i == 0) else generator.how
            if text is None:
                text = generator.generate(analysis, source, layout, examples, feedback, previous)
            elif i > 0 and attempts[-1].fixes:
                how = "rule-based fixes"
            att = Attempt(number, adir, how)
            start = time.monotonic()
            self._attempt(att, name, text, analysis)
            att.seconds = round(time.monotonic() - start, 2)
            attempts.append(att)
            # an install whose stand-alone test failed is refined like a failed build: the
            # test's diagnostics make the next attempt
            test_failed = att.outcome == "installed" and att.check_passed is False
            if att.outcome in ("installed", "concretized") and not test_failed:
                self._save(att)
                self.progress("attempt %d: %s" % (number, att.outcome))
                break
            # what to try next: rule-based fixes on this text, or the model with the diagnostics
            findings = testfixes.diagnose_test(att.diagnostics) if test_failed else fixes.diagnose(att.diagnostics)
            att.findings = [asdict(f) for f in findings]
            new_text = None
            if generator.how.startswith("rule") and test_failed:
                new_text, att.fixes = testfixes.apply(text, findings, att.prefix)
            elif generator.how.startswith("rule"):
                new_text, att.fixes = fixes.apply(
                    text, findings, self.index, analysis, source, os.path.join(att.directory, "spec.json")
                )
            self._save(att)
            self.progress(
                "attempt %d: %s%s%s"
                % (
                    number,
                    att.outcome,
                    ", test failed" if test_failed else "",
                    (" -> " + "; ".join(att.fixes)) if att.fixes else "",
                )
            )
            if generator.how.startswith("rule"):
                if not new_text:
                    break  # no rule applies: further attempts would repeat this one
                text = new_text
            else:
                previous, feedback, text = text, att.diagnostics or att.outcome, None
        if attempts and not attempts[-1].installed:
            # a change after an install whose test failed made things worse: the installed
            # recipe stays where Spack finds it, and its attempt is the result
            best = next((x for x in reversed(attempts) if x.installed), None)
            if best is not None:
                with open(os.path.join(best.directory, "package.py")) as f:
                    self.repo.write_recipe(name, f.read())
                attempts.remove(best)
                attempts.append(best)
        return attempts

    def _save(self, att):
        write_atomic(
            os.path.join(att.directory, "outcome.json"), json.dumps(att.to_dict(), indent=1, sort_keys=True) + "\n"
        )

    def _attempt(self, att, name, text, analysis):
        write_atomic(os.path.join(att.directory, "package.py"), text)
        v = validate(text)
        att.valid = v.ok
        att.reasons = v.reasons
        write_atomic(
            os.path.join(att.directory, "validation.json"),
            json.dumps({"ok": v.ok, "reasons": v.reasons, "class": v.package_class, "bases": v.base_classes}, indent=1)
            + "\n",
        )
        if not v.ok:
            att.outcome = "rejected"
            att.diagnostics = (
                templates.render(DIAGNOSTICS, "rejected")
                + "\n"
                + "\n".join(templates.render(DIAGNOSTICS, "rejected_reason", reason=r) for r in v.reasons)
            )
            return
        self.repo.write_recipe(name, text)
        specfile = os.path.join(att.directory, "spec.json")
        conc = self.spack.concretize(name, specfile)
        write_atomic(os.path.join(att.directory, "spec.log"), conc.result.output)
        if not conc.ok:
            att.outcome = "concretize-failed"
            errs = conc.result.error_lines() or [conc.result.output.strip()[-2000:]]
            att.diagnostics = templates.render(
                DIAGNOSTICS, "spec_failed", name=name, errors=_tail("\n".join(errs) + "\n" + conc.result.stderr)
            )
            return
        att.concretized = True
        att.spec_hash = conc.hash
        if not self.install:
            att.outcome = "concretized"
            return
        inst = self.spack.install_specfile(specfile)
        write_atomic(os.path.join(att.directory, "install.log"), inst.result.output)
        if not inst.ok:
            att.outcome = "install-failed"
            att.diagnostics = self._install_diagnostics(att, inst)
            return
        att.prefix = self.spack.location("/" + conc.hash) if conc.hash else None
        missing = installed_nothing(att.prefix)
        if missing:
            # Spack said yes, but a user would find nothing: not an install
            att.outcome = "install-empty"
            att.diagnostics = templates.render(DIAGNOSTICS, "install_empty", prefix=att.prefix, what=missing)
            return
        att.installed = True
        att.outcome = "installed"
        if self.run_check:
            res = self.spack.test_run("/" + conc.hash)
            write_atomic(os.path.join(att.directory, "test.log"), res.output)
            att.check_passed = check_verdict(res.ok, res.output)
            if att.check_passed is False:
                att.diagnostics = self._test_diagnostics(att, res.output)

    def _test_diagnostics(self, att, output):
        """What a failed ``spack test run`` said: its output and the results file it names
        (where Spack writes each test's failure), kept as test-results.txt."""
        parts = [templates.render(DIAGNOSTICS, "test_failed")]
        results = ""
        for path in re.findall(r"See \S+ test results at:\s*\n\s*(\S+)", output):
            try:
                results += read_excerpt(path)
            except OSError:
                continue
        if results:
            write_atomic(os.path.join(att.directory, "test-results.txt"), results)
        text = results + "\n" + output
        parts += [
            line.strip()
            for line in text.splitlines()
            if re.search(r"(Error|error:|FAILED|failure|AssertionError|No such file|not found)", line)
        ][:40]
        for f_ in testfixes.diagnose_test(text):
            parts.append(templates.render(DIAGNOSTICS, "finding", evidence=f_.evidence))
        if len(parts) == 1:
            parts.append(_tail(output, 3000))
        return _tail("\n".join(dict.fromkeys(parts)))

    def _install_diagnostics(self, att, inst):
        parts = [templates.render(DIAGNOSTICS, "install_failed")]
        parts += inst.result.error_lines()
        for i, log in enumerate(inst.build_logs):
            if not os.path.isfile(log):
                continue
            dest = os.path.join(att.directory, "build-log-%d.txt" % i if i else "build-log.txt")
            try:
                shutil.copyfile(log, dest)
            except OSError:
                continue
            events = self.spack.parse_log(log)
            if events:
                parts.append(templates.render(DIAGNOSTICS, "build_log", log=os.path.basename(log)))
                for e in events[:10]:
                    parts.append(
                        templates.render(
                            DIAGNOSTICS, "build_log_error", line=e.get("line"), text=e.get("text", "").rstrip()
                        )
                    )
                    for c in e.get("after", [])[:3]:
                        parts.append(templates.render(DIAGNOSTICS, "build_log_context", text=c.rstrip()))
            # the lines our rules look at, from anywhere in the log's two ends (a build that
            # printed gigabytes is not read whole)
            content = read_excerpt(log, head=LOG_EXCERPT_BYTES, tail=LOG_EXCERPT_BYTES)
            for f_ in fixes.diagnose(content):
                parts.append(templates.render(DIAGNOSTICS, "finding", evidence=f_.evidence))
        if len(parts) == 1:
            parts.append(_tail(inst.result.output, 3000))
        text = "\n".join(dict.fromkeys(parts))  # keep order, drop repeated lines
        return _tail(text)

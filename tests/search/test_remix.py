"""The outer loop: source variants proposed by a mutator, checked by replay, tuned, kept.

The `llm` mutator talks to a real OpenAI-compatible HTTP server on loopback that
answers from a script (tests/modelserver.py), through the real `openai` SDK; every
rewrite it proposes is compiled and verified in a replay worker, never run here.
"""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest

from spack_r3.capture import list_captures
from spack_r3.data import Variant
from spack_r3.search.mutators.llm import REPAIR_HEADING
from spack_r3.search.mutators import Proposal
from spack_r3.search.remix import Child, by_class_in_turn, clearly_below
from spack_r3.search.simplify import settings
from spack_r3.sourcepatch import apply_patch, make_patch
from spack_r3.workspace import Workspace

from modelserver import ScriptedModel, closed_port_url
from test_record_replay import r3_subprocess, source_tree

KERNELS_C = r"""
void blend(int n, double *x, const double *y)
{
    for (int i = 0; i < n; i++)
        x[i] = 0.5 * x[i] + 2.0 * y[i];
}
"""

MAIN_C = r"""
#include <stdio.h>
#include <stdlib.h>
void blend(int n, double *x, const double *y);

int main(void) {
  int n = 200000;
  double *x = malloc(n * sizeof(double)), *y = malloc(n * sizeof(double));
  for (int i = 0; i < n; i++) { x[i] = (i % 13) * 0.25; y[i] = (i % 7) * 0.5 - 1.0; }
  for (int r = 0; r < 3; r++) blend(n, x, y);
  double s = 0; for (int i = 0; i < n; i++) s += x[i];
  printf("sum=%.6f\n", s);
  return 0;
}
"""

MAKEFILE = (
    "prog: main.o kernels.o\n\t$(CC) -O2 -fopenmp -o $@ main.o kernels.o\n%.o: %.c\n\t$(CC) -O2 -fopenmp -c -o $@ $<\n"
)

GOOD = """```c
// r3: restrict-qualified pointers
void blend(int n, double *restrict x, const double *restrict y)
{
    for (int i = 0; i < n; i++)
        x[i] = 0.5 * x[i] + 2.0 * y[i];
}
```"""
BROKEN = """```c
// r3: unrolled by four
void blend(int n, double *x, const double *y)
{
#pragma clang loop unroll_count(4)
    for (int i = 0; i < n; i++)
        x[i] = 0.5 * x[i] + 2.0 * y[i]
}
```"""
FIXED = BROKEN.replace("y[i]\n}", "y[i];\n}")
WRONG = """```c
// r3: folded constants
void blend(int n, double *x, const double *y)
{
    for (int i = 0; i < n; i++)
        x[i] = 0.5 * x[i] + 2.0 * y[i] + 1e-3;
}
```"""
# Software-pipelined loads through a shared scalar: right on one thread, a data race on
# ``prev`` on two (with iterations dealt out one by one, each thread reads what the other
# wrote, whatever the timing).
RACY = """```c
// r3: parallel loop
void blend(int n, double *x, const double *y)
{
    double prev = 2.0 * y[0];
#pragma omp parallel for schedule(static, 1)
    for (int i = 0; i < n; i++) {
        double t = prev;
        prev = i + 1 < n ? 2.0 * y[i + 1] : 0.0;
        x[i] = 0.5 * x[i] + t;
    }
}
```"""


def scripted(answers, repairs):
    """A model that answers proposal requests from ``answers`` in order, then with no
    code, and repair requests from ``repairs``."""

    def answer(messages):
        if REPAIR_HEADING in messages[-1]["content"]:
            return repairs.pop(0) if repairs else "I cannot fix it."
        return answers.pop(0) if answers else "Nothing more to suggest."

    return answer


@pytest.fixture(scope="module")
def program(tmp_path_factory, clang):
    return source_tree(tmp_path_factory, "remix", {"kernels.c": KERNELS_C, "main.c": MAIN_C, "Makefile": MAKEFILE})


def tune_argv(ws, program, *extra, budget=24):
    return [
        "--workspace",
        ws,
        "tune",
        "--source",
        program,
        "--run",
        "./prog",
        "--kernel",
        "blend",
        "--budget",
        budget,
        "--remix-share",
        0.75,
        "--stall-patience",
        0,
        "--child-budget",
        3,
        "--pairs",
        3,
        "--confirm-pairs",
        3,
        "--confirm-rounds",
        2,
        "--seed",
        1,
        "--json",
    ] + list(extra)


def children(ws):
    out = []
    for path in glob.glob(os.path.join(ws, "remix", "*.json")):
        with open(path) as f:
            out += [Child.from_json(c) for c in json.load(f)["children"]]
    return out


def test_llm_rewrites_are_kept_repaired_or_caught(program, tmp_path):
    ws = str(tmp_path / "ws")
    answers, repairs = [GOOD, BROKEN, WRONG, RACY], [FIXED]
    with ScriptedModel([scripted(answers, repairs)] * 40) as model:
        # Workers search the original's pipelines while the model answers, paid from the outer
        # loop's budget: 0.75 of 40 leaves the four answers room on a loaded machine too.
        proc = r3_subprocess(
            *tune_argv(ws, program, "--mutator", "llm", "--llm-url", model.url, "--llm-model", "scripted", budget=40),
            timeout=600,
        )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)["kernels"][0]
    assert result["kernel"] == "blend" and result["evaluations"] >= 10
    assert not answers, "the budget ran out before every scripted rewrite was tried"
    # The model ran out of rewrites before the outer loop's budget (0.75 of 40): the rest went
    # to the pipeline search of the original, so the whole budget was spent.
    [state] = [json.load(open(p)) for p in glob.glob(os.path.join(ws, "remix", "*.json"))]
    assert state["extended"] > 0
    assert state["extended"] + sum(c["evaluations"] for c in state["children"]) == 30
    by_text = {c.description: c for c in children(ws)}
    assert by_text["restrict-qualified pointers"].status == "ok"  # a good rewrite is measured and kept
    assert by_text["restrict-qualified pointers"].speedup > 0
    assert by_text["unrolled by four"].status == "compile-error"  # broken: its diagnostic went back
    repair = next(r for r in model.requests if REPAIR_HEADING in r["body"]["messages"][-1]["content"])
    assert "expected ';'" in repair["body"]["messages"][-1]["content"]
    assert by_text["repair of: unrolled by four"].status == "ok"  # ... and the repair verified
    assert by_text["folded constants"].status == "wrong-output"  # a wrong result never ranks
    racy = by_text["parallel loop"]
    if (os.cpu_count() or 1) >= 2:  # a race needs two threads to show
        assert racy.status == "wrong-output", racy
    # Every rewrite is a patch against the recorded unit: emit applies exactly that.
    restrict = by_text["restrict-qualified pointers"]
    assert "double *restrict x" in apply_patch(_recorded_unit(ws), restrict.patch)


def _recorded_unit(ws):
    caps = list_captures(Workspace(ws))
    with open(glob.glob(os.path.join(ws, "captures", caps[0].id, "source.*"))[0]) as f:
        return f.read()


def test_unreachable_endpoint_is_one_clear_error_or_falls_back_to_rules(program, tmp_path):
    ws = str(tmp_path / "ws")
    url = closed_port_url()
    proc = r3_subprocess(*tune_argv(ws, program, "--mutator", "llm", "--llm-url", url, "--llm-model", "m"), timeout=600)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert url in proc.stderr.strip().splitlines()[-1]
    proc = r3_subprocess(
        *tune_argv(ws, program, "--mutator", "llm", "--llm-url", url, "--llm-model", "m", "--fallback-rules"),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "going on with the rules mutator" in proc.stderr


def test_a_kill_mid_remix_loses_no_finished_child(program, tmp_path):
    ws = str(tmp_path / "ws")
    answers, repairs = [GOOD, WRONG, BROKEN], [FIXED]
    with ScriptedModel([scripted(answers, repairs)] * 40) as model:
        argv = [sys.executable, "-m", "spack_r3.cli"] + [
            str(a)
            for a in tune_argv(ws, program, "--mutator", "llm", "--llm-url", model.url, "--llm-model", "scripted")
        ]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if sum(c.status != "pending" for c in children(ws)) >= 2:
                break
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        before = {c.id: c for c in children(ws) if c.status != "pending"}
        assert len(before) >= 2, "the run finished or stalled before two children were measured"
        again = r3_subprocess(
            *tune_argv(ws, program, "--mutator", "llm", "--llm-url", model.url, "--llm-model", "scripted"), timeout=600
        )
    assert again.returncode == 0, again.stderr
    after = {c.id: c for c in children(ws)}
    for ident, child in before.items():  # nothing finished is lost or measured again from scratch
        assert ident in after and after[ident].status == child.status
        assert after[ident].evaluations >= child.evaluations
    descriptions = [c.description for c in after.values()]
    assert len(descriptions) == len(set(descriptions))  # no rewrite measured twice


def test_a_rewrite_is_a_setting_that_simplification_can_drop():
    patch = make_patch("a\n", "b\n", "k.c")
    variant = Variant(source_patch=patch, source_rule="restrict")
    names = [name for name, _ in settings(variant)]
    assert names == ["source"]
    lean = dict(settings(variant))["source"]
    assert lean.source_patch is None and lean.source_rule is None


def test_each_rewrite_class_proposes_once_before_any_proposes_twice():
    """A parent's rewrites are tried one class at a time, so few children fill several
    cells of the archive; within a class, the mutator's (or the learned ranking's) order."""
    rules = [
        "stage",
        "restrict",
        "omp-parallel",
        "omp-parallel",
        "omp-simd",
        "vectorize-pragma",
        "unroll-pragma",
        "interchange",
        "tile",
        "scalar-replace",
    ]
    props = [Proposal("text %d" % i, rule, "%s %d" % (rule, i)) for i, rule in enumerate(rules)]
    order = [p.description for p in by_class_in_turn(props)]
    assert order == [
        "stage 0",
        "restrict 1",
        "omp-parallel 2",
        "omp-simd 4",
        "interchange 7",
        "scalar-replace 9",
        "omp-parallel 3",
        "vectorize-pragma 5",
        "tile 8",
        "unroll-pragma 6",
    ]


def test_a_child_is_cut_by_its_best_pair_or_by_its_median():
    """Against the original's best median of 8.66x: a child whose every pair is slower is
    out; so is one whose median is slower by more than noise even where one pair of its
    bimodal code read as fast (matmul's Polly code: 8.8x one pair, 6.8x the median); one
    within noise of it, or whose check at the baseline pipeline was as fast, stays."""

    def trial(median, best_pair):
        return optuna.trial.create_trial(
            value=median, params={}, distributions={}, user_attrs={"evaluation": {"speedup_max": best_pair}}
        )

    assert clearly_below([trial(1.81, 1.92)], 0.99, 8.66).startswith("cut after the original's best settings: at most")
    assert "6.84x at best (median)" in clearly_below([trial(6.84, 8.80)], 1.16, 8.66)
    assert clearly_below([trial(8.40, 8.80)], 1.03, 8.66) == ""  # 3% under: within noise
    assert clearly_below([trial(6.84, 8.80)], 8.70, 8.66) == ""
    assert clearly_below([], 0.5, 8.66) == ""  # every inherited setting failed: not judged

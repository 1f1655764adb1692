"""A model that gives nothing is never silent: ``r3 tune --mutator llm`` against a real
loopback endpoint that answers no code, accepts and never answers, or is not there,
at a small budget (where the pipeline search used to spend the held budget while the
request was out, and the run ended as if no model had been asked); and a remix state
file that does not read."""

import glob
import json
import os

from modelserver import HANG, ScriptedModel, closed_port_url
from test_remix import program, tune_argv  # noqa: F401 (the module's recorded program)
from r3cli import flags, r3_subprocess

SMALL = 8  # the budget: 4 evaluations held for source variants, 2 left after the pipelines climb


def test_a_model_that_answers_no_code_is_stated_in_the_table_json_and_stderr(program, tmp_path):  # noqa: F811
    ws = str(tmp_path / "ws")
    with ScriptedModel(["I would not change anything."] * 40) as model:
        proc = r3_subprocess(
            *tune_argv(
                ws, program, "--mutator", "llm", "--llm-url", model.url, "--llm-model", "scripted", budget=SMALL
            ),
            timeout=600,
        )
    assert proc.returncode == 0, proc.stderr
    (kernel,) = json.loads(proc.stdout)["kernels"]
    used = kernel["model"]
    assert used["asked"] >= 1 and used["answered"] == used["asked"] and used["rewrites"] == 0
    assert "the model gave blend no usable rewrite" in proc.stderr
    with open(os.path.join(ws, "reports", "tune.txt")) as f:
        assert (
            "model, blend: %d request(s), %d answered, 0 usable rewrite(s): the model gave nothing"
            % (used["asked"], used["answered"])
            in f.read()
        )

    # A remix state file that does not read: moved aside with one warning, the run goes on.
    (state,) = glob.glob(os.path.join(ws, "remix", "*.json"))
    with open(state, "w") as f:
        f.write('{"name": "blend", "children": [{"id": ')
    with ScriptedModel(["Still nothing."] * 40) as model:
        again = r3_subprocess(
            *tune_argv(
                ws, program, "--mutator", "llm", "--llm-url", model.url, "--llm-model", "scripted", budget=SMALL
            ),
            timeout=600,
        )
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr
    assert "%s does not read (JSONDecodeError" % state in again.stderr
    assert os.path.isfile(state + ".corrupt")


def test_an_endpoint_that_never_answers_costs_its_timeout_and_says_so(program, tmp_path):  # noqa: F811
    ws = str(tmp_path / "ws")
    with ScriptedModel([HANG] * 40) as model:
        proc = r3_subprocess(
            *tune_argv(
                ws,
                program,
                *flags(mutator="llm", llm_url=model.url, llm_model="m", llm_timeout=2),
                budget=SMALL,
            ),
            timeout=600,
        )
        assert proc.returncode != 0 and "Traceback" not in proc.stderr
        assert proc.stderr.strip().splitlines()[-1].endswith("model endpoint %s timed out after 2s" % model.url)
        fallback = r3_subprocess(
            *tune_argv(
                ws,
                program,
                *flags(mutator="llm", llm_url=model.url, llm_model="m", llm_timeout=2, fallback_rules=True),
                budget=SMALL,
            ),
            timeout=600,
        )
    assert fallback.returncode == 0, fallback.stderr
    assert "timed out after 2s; going on with the rules mutator" in fallback.stderr
    (kernel,) = json.loads(fallback.stdout)["kernels"]
    assert kernel["model"]["answered"] == 0 and "timed out after 2s" in kernel["model"]["error"]


def test_a_dead_endpoint_at_a_small_budget_is_one_line(program, tmp_path):  # noqa: F811
    ws = str(tmp_path / "ws")
    url = closed_port_url()
    proc = r3_subprocess(
        *tune_argv(ws, program, "--mutator", "llm", "--llm-url", url, "--llm-model", "m", budget=SMALL), timeout=600
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert url in last and "unreachable" in last

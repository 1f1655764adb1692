"""The ``llm`` mutator against a scripted OpenAI-compatible server on loopback (real HTTP,
the real ``openai`` SDK through model.client.ChatModel, the real clang parser)."""

import threading
import time

import pytest

from spack_r3.errors import R3Error
from spack_r3.model.client import ModelConfig, ModelError
from spack_r3.search.mutators import Feedback, KernelSource, Proposal, make_mutator
from spack_r3.search.mutators import llm
from spack_r3.search.mutators.llm import LLMMutator, build_messages, build_repair_messages

from modelserver import HANG, Raw, ScriptedModel, closed_port_url

UNIT = """\
#include <stddef.h>

/* a helper the rewrite must leave alone */
static double scale(double x) { return 2.0 * x; }

void saxpy(int n, double a, const double *x, double *y)
{
    for (int i = 0; i < n; i++)
        y[i] = a * x[i] + y[i];
}

double checksum(const double *y, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += scale(y[i]);
    return s;
}
"""

HEAD = UNIT[: UNIT.index("void saxpy")]
TAIL = UNIT[UNIT.index("\n\ndouble checksum") :]

REWRITE_A = """\
// r3: unroll by 4 with a scalar tail
void saxpy(int n, double a, const double *restrict x, double *restrict y)
{
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        y[i] = a * x[i] + y[i];
        y[i + 1] = a * x[i + 1] + y[i + 1];
        y[i + 2] = a * x[i + 2] + y[i + 2];
        y[i + 3] = a * x[i + 3] + y[i + 3];
    }
    for (; i < n; i++)
        y[i] = a * x[i] + y[i];
}"""

REWRITE_B = """\
// r3: ask clang to vectorize the loop
void saxpy(int n, double a, const double *x, double *y)
{
#pragma clang loop vectorize(enable) interleave(enable)
    for (int i = 0; i < n; i++)
        y[i] = a * x[i] + y[i];
}"""

BROKEN = """\
// r3: restrict-qualified local alias of y (broken)
void saxpy(int n, double a, const double *x, double *y)
{
    double *restrict out = y
    for (int i = 0; i < n; i++)
        out[i] = a * x[i] + out[i];
}"""

FIXED = BROKEN.replace("= y\n", "= y;\n").replace("(broken)", "(fixed)")


def fenced(*blocks, lang="c"):
    return "Here you go.\n\n" + "\n\n".join("```%s\n%s\n```" % (lang, b) for b in blocks) + "\n"


@pytest.fixture
def source(clang, tmp_path):
    return KernelSource(
        kernel="saxpy",
        function="saxpy",
        filename="k.c",
        text=UNIT,
        parse_args=["-std=c11"],
        compile_dir=str(tmp_path),
        clang=clang,
    )


def mutator(server):
    return LLMMutator(ModelConfig(server.url, "scripted-coder", "sk-test", timeout=10))


def definition(block):
    return block.split("\n", 1)[1]  # without the "// r3:" line


def test_good_rewrite_is_spliced_into_the_unit(source):
    with ScriptedModel([fenced(REWRITE_A)]) as server:
        m = make_mutator("llm", ModelConfig(server.url, "scripted-coder", "sk-test", timeout=10))
        assert m.name == "llm" and m.concurrent
        props = m.propose(source, Feedback())
    assert len(props) == 1
    p = props[0]
    assert p.rule == "llm" and p.description == "unroll by 4 with a scalar tail" and p.knobs == {}
    assert p.text == HEAD + definition(REWRITE_A) + TAIL  # the rest of the unit byte for byte
    assert "// r3:" not in p.text
    assert server.requests[0]["auth"] == "Bearer sk-test"
    body = server.requests[0]["body"]
    assert body["model"] == "scripted-coder"
    system, user = body["messages"]
    assert system["role"] == "system" and user["role"] == "user"
    # the kernel as its MEP source (r3 mep's slice): what it needs, not the rest of the unit
    assert (
        "## The kernel's program" in user["content"]
        and UNIT[UNIT.index("void saxpy") : UNIT.index("\n\ndouble checksum")] in user["content"]
        and "double checksum" not in user["content"]
    )
    assert "`void saxpy(int n, double a, const double *x, double *y)`" in user["content"]
    assert "Do not reorder floating-point operations" in user["content"]  # tolerance None
    assert "without OpenMP" in user["content"]


def test_two_alternatives_make_two_proposals(source):
    with ScriptedModel([fenced(REWRITE_A, REWRITE_B)]) as server:
        props = mutator(server).propose(source, Feedback())
    assert [p.description for p in props] == ["unroll by 4 with a scalar tail", "ask clang to vectorize the loop"]
    assert props[1].text == HEAD + definition(REWRITE_B) + TAIL


def test_broken_rewrite_is_returned_and_repair_sends_the_diagnostic(source):
    diagnostic = "k.c:8:29: error: expected ';' at end of declaration"
    with ScriptedModel([fenced(BROKEN), fenced(FIXED)]) as server:
        m = mutator(server)
        (broken,) = m.propose(source, Feedback())
        assert broken.text == HEAD + definition(BROKEN) + TAIL  # does not parse, still proposed
        fixed = m.repair(source, broken, diagnostic)
    assert fixed is not None and fixed.rule == "llm"
    assert fixed.description == "repair of: restrict-qualified local alias of y (broken)"
    assert fixed.text == HEAD + definition(FIXED) + TAIL
    last_user = server.requests[-1]["body"]["messages"][-1]
    assert last_user["role"] == "user"
    assert diagnostic in last_user["content"]
    assert definition(BROKEN).strip() in last_user["content"]  # the failed definition, not the unit twice
    assert len(server.requests) == 2 and m.requests == 2


def test_repair_of_a_verification_failure_and_no_fix(source):
    with ScriptedModel(["I cannot fix this one."]) as server:
        proposal = Proposal(text=HEAD + definition(REWRITE_B) + TAIL, rule="llm", description="vectorize")
        assert mutator(server).repair(source, proposal, "a data race: verified once, failed on run 3") is None
    assert "a data race: verified once, failed on run 3" in server.requests[0]["body"]["messages"][1]["content"]


def test_answer_without_code_is_no_proposal(source):
    with ScriptedModel(
        ["The function is already optimal; I would not change it.", fenced("print('not C')", lang="python")]
    ) as server:
        m = mutator(server)
        assert m.propose(source, Feedback()) == []
        assert m.propose(source, Feedback()) == []
    assert len(server.requests) == 2


def test_rewrites_that_rename_or_change_the_signature_are_dropped(source):
    renamed = REWRITE_B.replace("void saxpy(", "void saxpy_fast(")
    retyped = REWRITE_B.replace("const double *x", "const float *x")
    with ScriptedModel([fenced(renamed, retyped), fenced(REWRITE_B, REWRITE_B)]) as server:
        m = mutator(server)
        assert m.propose(source, Feedback()) == []
        assert [r for _, r in m.rejected] == [
            "the rewrite does not define saxpy",
            "the rewrite changes the signature of saxpy",
        ]
        assert len(m.propose(source, Feedback())) == 1  # the same rewrite twice: one proposal


def test_prompt_has_a_stable_prefix_and_feedback_last(source):
    plain = build_messages(source, Feedback())
    rich = build_messages(
        source,
        Feedback(
            parent_speedup=1.4,
            best=[("interchange i,j", 1.8), ("unroll by 4", 1.4)],
            failures=[("vectorize the reduction", "wrong output: y[3] = 1.0000001 (expected 1)")],
            examples=[
                {
                    "rule": "llm",
                    "description": "blocked transpose",
                    "speedup": 2.5,
                    "gain": 1.25,
                    "kernel": "tr",
                    "patch": "--- a/t.c\n+++ b/t.c\n@@ -1 +1 @@\n-old\n+new\n",
                }
            ],
        ),
    )
    assert plain[0] == rich[0] and plain[0]["role"] == "system"
    a, b = plain[1]["content"], rich[1]["content"]
    cut = a.index(llm.FEEDBACK_HEADING)
    assert cut == b.index(llm.FEEDBACK_HEADING) and a[:cut] == b[:cut]
    assert a[:cut] == llm.stable_prefix(source)
    assert "#include <stddef.h>" in a[:cut] and "void saxpy(int n" in a[:cut]  # the kernel is in the prefix
    tail = b[cut:]
    for needle in (
        "1.40x",
        "1.80x interchange i,j",
        "wrong output: y[3]",
        "blocked transpose (1.25x over that kernel's best without it)",
        "```diff\n--- a/t.c",
        "+new",
    ):
        assert needle in tail
    # a repair request shares the same prefix
    repair = build_repair_messages(source, Proposal(HEAD + definition(BROKEN) + TAIL, "llm", "x"), "boom")
    assert repair[0] == plain[0] and repair[1]["content"].startswith(a[:cut])
    # the rules that depend on the kernel
    relaxed = KernelSource(**{**source.__dict__, "tolerance": 1e-6, "openmp": True})
    text = build_messages(relaxed, None)[1]["content"]
    assert "reassociating floating-point operations" in text and "-fopenmp" in text
    assert "Do not reorder" not in text


def test_unreachable_endpoint_is_one_model_error_line(source):
    url = closed_port_url()
    m = LLMMutator(ModelConfig(url, "m", "k", timeout=5))
    with pytest.raises(ModelError) as err:
        m.propose(source, Feedback())
    msg = str(err.value)
    assert isinstance(err.value, R3Error) and "\n" not in msg
    assert url in msg and "unreachable" in msg


def test_http_500_once_is_retried_by_the_sdk(source):
    with ScriptedModel([500, fenced(REWRITE_B)]) as server:
        start = time.monotonic()
        props = mutator(server).propose(source, Feedback())
        assert time.monotonic() - start < 5
    assert len(props) == 1 and props[0].description == "ask clang to vectorize the loop"
    assert len(server.requests) == 2 and server.requests[0]["body"] == server.requests[1]["body"]


def test_http_errors_after_retries_are_a_model_error(source):
    with ScriptedModel([503, 503]) as server:
        with pytest.raises(ModelError, match="answered HTTP 503"):
            mutator(server).propose(source, Feedback())
    assert server.remaining == 0


def test_no_model_configured_is_a_model_error():
    with pytest.raises(ModelError, match="needs a model"):
        make_mutator("llm", None)


def _propose_on_a_thread(m, source, guard=60):
    """m.propose on a thread, so that a request the timeout failed to end fails the test
    after ``guard`` seconds instead of hanging it: (proposals or the exception, finished)."""
    box = {}

    def run():
        try:
            box["out"] = m.propose(source, Feedback())
        except Exception as err:
            box["out"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(guard)
    return box.get("out"), not thread.is_alive()


def test_an_endpoint_that_accepts_and_never_answers_costs_one_timeout(source):
    # A hung request is not retried: the SDK's retry after a timed-out attempt would double it.
    with ScriptedModel([HANG, HANG]) as server:
        m = LLMMutator(ModelConfig(server.url, "m", "k", timeout=2))
        out, finished = _propose_on_a_thread(m, source)
        assert finished, "a request to a hung endpoint outlived its 2 s timeout"
    assert isinstance(out, ModelError) and "\n" not in str(out)
    assert str(out) == "model endpoint %s timed out after 2s" % server.url


def test_an_answer_that_is_not_json_is_one_model_error_line(source):
    with ScriptedModel([Raw(b"<html>502 Bad Gateway</html>")] * 2) as server:
        with pytest.raises(ModelError) as err:
            mutator(server).propose(source, Feedback())
    assert "\n" not in str(err.value) and server.url in str(err.value)


def test_the_timeout_comes_from_the_option_or_the_environment(monkeypatch):
    import argparse
    from spack_r3.model import client

    monkeypatch.delenv("R3_LLM_TIMEOUT", raising=False)
    assert client.resolve("http://h/v1", "m").timeout == client.DEFAULT_TIMEOUT
    parser = argparse.ArgumentParser()
    client.add_arguments(parser)
    args = parser.parse_args(["--llm-timeout", "2.5"])
    assert args.llm_timeout == 2.5
    # the commands pass it along (and the option sets nothing in the environment)
    assert client.resolve("http://h/v1", "m", timeout=args.llm_timeout).timeout == 2.5
    assert client.resolve("http://h/v1", "m").timeout == client.DEFAULT_TIMEOUT
    monkeypatch.setenv("R3_LLM_TIMEOUT", "7")
    assert client.resolve("http://h/v1", "m").timeout == 7
    monkeypatch.setenv("R3_LLM_TIMEOUT", "soon")
    with pytest.raises(ModelError, match="R3_LLM_TIMEOUT"):
        client.resolve("http://h/v1", "m")
    with pytest.raises(SystemExit):
        parser.parse_args(["--llm-timeout", "0"])

"""Mutators: what proposes source variants of a kernel's unit for the outer loop.

One small interface (like Optuna's samplers): a mutator looks at the kernel's unit as
the parent variant has it and proposes rewrites of it; when a child fails to compile or
to verify, ``repair`` gets the diagnostic and may propose a fixed rewrite.

    mutator = make_mutator("rules")
    for proposal in mutator.propose(source, feedback):
        ...  # becomes a patch (sourcepatch.make_patch), compiled and verified in a worker

Implementations: ``rules`` (deterministic rewrites found on clang's AST, no model) and
``llm`` (a chat model through any OpenAI-compatible endpoint).
"""

from .base import Feedback, KernelSource, Mutator, Proposal, language

__all__ = ["Feedback", "KernelSource", "Mutator", "Proposal", "language", "make_mutator"]


def make_mutator(name, model=None):
    """``rules``, ``llm`` (``model``: a ``model.client.ModelConfig``) or ``none``."""
    if name == "rules":
        from .ruleset import RulesMutator

        return RulesMutator()
    if name == "llm":
        from .llm import LLMMutator

        return LLMMutator(model)
    if name == "none":
        return None
    raise ValueError("unknown mutator %r (choose rules, llm or none)" % name)

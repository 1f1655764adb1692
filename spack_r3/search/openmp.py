"""OpenMP threads added to a unit that its build compiles without ``-fopenmp``.

    why = refusal(capture, directory)        # "" where threads may be added (or it has OpenMP)
    adds_openmp(capture, child.rules)        # the variant compiles with -fopenmp added

The rewrites that add threads (``Rule.threads``: a wavefront of time tiles, ``omp
parallel for`` over an outer loop) need the unit compiled with ``-fopenmp``. Most builds
have none (PolyBench's own, a user's ``-O3 -march=native``): such a unit gets the flag for
itself alone wherever a variant that carries one of them is compiled (``Variant.source_openmp``):
in replay (``replay.source``), in ``r3 mep``, and in the ``+r3`` build (``PlannedUnit.openmp``:
``r3-apply`` compiles the unit with it and links LLVM's OpenMP runtime).

Not where the unit (or one of its own headers kept with the capture) has OpenMP pragmas:
its build leaves them inactive, and ``-fopenmp`` would turn them on, changing what the
user's own code does. ``refusal`` says so, and the rules offer no rewrite that adds threads.
"""

import os
import re

from ..record import headers
from .mutators.ruleset import threaded

# A directive line, or one that a macro writes (``_Pragma("omp ...")``).
_PRAGMA = re.compile(r'^[ \t]*#[ \t]*pragma[ \t]+omp\b|_Pragma[ \t]*\([ \t]*"[ \t]*omp\b', re.M)


def unit_flags(capture):
    """The flags the unit was compiled with (the bitcode's, else its compile command's)."""
    return list(capture.bitcode_args) or list(capture.compile_command[1:])


def built_with_openmp(flags):
    """Whether ``flags`` compile OpenMP directives (``-fopenmp-simd`` only: not threads)."""
    return any(a.startswith("-fopenmp") and "simd" not in a for a in flags)


def pragma_lines(text):
    """The line numbers of the OpenMP pragmas in ``text``."""
    return [text.count("\n", 0, m.start()) + 1 for m in _PRAGMA.finditer(text)]


def refusal(capture, directory):
    """Why OpenMP threads may not be added to the capture's unit, or "" where they may (or
    where its build compiles it with -fopenmp already)."""
    from ..replay.source import unit_text

    if built_with_openmp(unit_flags(capture)):
        return ""
    texts = [(os.path.basename(capture.source_file), unit_text(capture, directory))]
    for path, digest in sorted((capture.headers or {}).items()):
        copy = os.path.join(directory, headers.FOLDER, digest)
        if os.path.isfile(copy):
            with open(copy, errors="surrogateescape") as f:
                texts.append((os.path.basename(path), f.read()))
    found = ["%s:%d" % (name, line) for name, text in texts for line in pragma_lines(text)]
    if not found:
        return ""
    return "the unit has OpenMP pragmas its build leaves inactive (no -fopenmp: %s%s), which -fopenmp would turn on" % (
        ", ".join(found[:3]),
        ", ..." if len(found) > 3 else "",
    )


def adds_openmp(capture, rules):
    """Whether a variant of the capture's unit carrying ``rules`` compiles with -fopenmp
    added (a rewrite that adds threads, to a unit its build compiles without it)."""
    return threaded(rules) and not built_with_openmp(unit_flags(capture))


def adds_threads(variant):
    """Whether ``variant`` runs on threads its build's code does not start: a rewrite that
    adds them (``Rule.threads``) or Polly's parallel code generation."""
    rules = (variant.source_rule or "").split("+")
    return threaded(rules) or bool(variant.pipeline.polly_parallel)

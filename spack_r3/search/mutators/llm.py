"""The ``llm`` mutator: a chat model proposes rewrites of the kernel's function.

    mutator = LLMMutator(model_config)              # model.client.ModelConfig
    proposals = mutator.propose(source, feedback)   # 0..2 rewrites of the unit, one request
    fixed = mutator.repair(source, proposal, "k.c:3:5: error: ...")   # one request, or None

Prompts have a stable prefix so an inference server's prefix cache hits: the system
message depends on nothing, the start of the user message only on the kernel (its name
and signature, the FP and OpenMP rules, its source); the variable part (feedback, or the
failed rewrite and its diagnostic) comes last.

The model is shown the kernel as its Minimal Executable Program's source (``mep.slice``:
the kernel, its callees, the types and globals they use, and the unit's own headers; what
``r3 mep`` compiles and runs alone), not the whole unit; where no slice can be made, the
unit. It answers with fenced code blocks, each the complete new definition of the
kernel's function, possibly after rewritten callees or new helpers; each goes back into
the unit (``reintegrate``): the block replaces the kernel's definition, and a callee it
defines again replaces the unit's definition of that callee (found by clang's
"redefinition" diagnostic and the unit's AST, never by regexes). Answers
are untrusted text: nothing here runs them; the only tool applied is clang's parser
(``-fsyntax-only``), to drop rewrites that no longer define the kernel or change its
signature. A rewrite that does not parse is still returned: the worker's compile fails and
its diagnostic comes back through ``repair``, the one path for all failures.
"""

import difflib
import re
import threading
from typing import List, Optional

from ...model.client import ChatModel, ModelConfig, ModelError
from .base import Feedback, KernelSource, Mutator, Proposal, language
from . import cast, fortranrules

ALTERNATIVES = 2  # rewrites asked for per answer
DESCRIPTION_CHARS = 80
FEEDBACK_HEADING = "## What the search knows so far"
REPAIR_HEADING = "## A rewrite that failed"
MARKER = "// r3:"
FORTRAN_MARKER = "! r3:"  # (a Fortran comment)

# limits on the variable part, so a long history does not crowd out the kernel
MAX_BEST, MAX_FAILURES, MAX_EXAMPLES = 5, 5, 3
DIAGNOSTIC_LINES, DIAGNOSTIC_CHARS = 12, 1500
PATCH_CHARS = 2000

CODE_TAGS = {"", "c", "cpp", "c++", "cc", "cxx", "h", "hpp", "fortran", "f90", "f"}
_FENCE = re.compile(r"^```[ \t]*([A-Za-z+]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.S | re.M)

SYSTEM = """\
You are an expert in making compute kernels of C and C++ programs run faster on CPUs.
You rewrite one function, the kernel, so that it computes exactly what it computes now,
faster. Your rewrite is compiled, run on recorded inputs and its outputs are compared
with the original's; a rewrite that fails is reported back to you.

Rules:
- Keep the kernel's name, return type and parameters (types and order) exactly as they
  are. Adding `const` to a parameter is fine; add `restrict` to a pointer parameter only
  where no two pointers can overlap for any valid call.
- Keep the behaviour for every input: the same outputs, the same memory written, no new
  out-of-bounds accesses, no data races.
- Write portable code the compiler can optimize: loop order, blocking/tiling, unrolling,
  scalar replacement, hoisting invariants, vectorization-friendly loops, pragmas such as
  `#pragma clang loop vectorize(enable)`. No inline assembly, no new #include lines.
- Loops that carry a recurrence: let the outer loop carry it, so the inner loop runs
  across independent rows or columns (interchange; interleave several rows' chains); in
  a min-plus or max-min closure (`d[i][j] = min(d[i][j], d[i][k] + d[k][j])`) keep
  `d[i][k]` in a local, splitting the j loop at j == k, the one iteration that may change
  it; turn sums down a column (`s -= l[i][j] * x[j][r]` over j) into row updates of an
  array of sums (j outside r); fill dynamic-programming tables by anti-diagonals; tile a
  time loop around a 1-D stencil. Keep each sum's order where results must be exact.
- Do not write main() or test code. Do not repeat the rest of the file.

Answer format: up to {n} alternative rewrites, each in its own fenced code block
(```c for C, ```cpp for C++) that holds the complete new definition of the kernel's
function, nothing else (helper functions it calls, new ones or rewritten callees, may come
before it in the same block). The first line inside each block is a comment with a one-line description:
`{marker} <what this rewrite changes>`. Outside the blocks, at most a few words.
""".format(n=ALTERNATIVES, marker=MARKER)

SYSTEM_FORTRAN = """\
You are an expert in making compute kernels of Fortran programs run faster on CPUs.
You rewrite one procedure, the kernel, so that it computes exactly what it computes now,
faster. Your rewrite is compiled with flang, run on recorded inputs and its outputs are
compared with the original's; a rewrite that fails is reported back to you.

Rules:
- Keep the procedure's name, its dummy arguments (names, order, types, kinds, ranks and
  intents) and, for a function, its result exactly as they are. Adding `contiguous` to an
  assumed-shape dummy is fine (the caller copies a non-contiguous actual argument).
- Keep the behaviour for every input: the same outputs, the same memory written, no new
  out-of-bounds accesses, no data races. Fortran arrays are column-major: the first
  subscript is the unit-stride one.
- Write portable code the compiler can optimize: loop order, blocking/tiling, unrolling,
  hoisting invariants, explicit loops instead of array temporaries, `!$omp simd` where
  iterations are independent. No new `use` of modules the unit does not use, no I/O.
- Do not write a main program or test code. Do not repeat the rest of the file.

Answer format: up to {n} alternative rewrites, each in its own fenced code block
(```fortran) that holds the complete new procedure, from its `subroutine` or `function`
line to its `end` line, nothing else. The first line inside each block is a comment with
a one-line description: `{marker} <what this rewrite changes>`. Outside the blocks, at most a
few words.
""".format(n=ALTERNATIVES, marker=FORTRAN_MARKER)


# -- the kernel, as the prompt describes it ----------------------------------------------


class _Kernel:
    """What the prompt and the splice need from the parent unit (one clang parse)."""

    def __init__(self, source):
        fn = cast.function_definition(source)
        self.begin, self.end = cast.extent(fn)
        body_begin = cast.extent(cast.body(fn))[0]
        self.signature = " ".join(source.text[self.begin : body_begin].split())
        self.mangled = fn.get("mangledName")
        self.first_line = source.text.count("\n", 0, self.begin) + 1
        self.last_line = source.text.count("\n", 0, self.end) + 1


class _FortranKernel:
    """The same for a Fortran unit: the procedure's lines, found on the text
    (``fortranrules.procedure_span``); its header line is the signature."""

    mangled = None

    def __init__(self, source):
        lines = source.text.split("\n")
        span = fortranrules.procedure_span(source.text, fortranrules.procedure_names(source))
        if span is None:
            raise cast.ASTError("%s defines no procedure %s" % (source.filename, source.function))
        self.first_line, self.last_line = span[0] + 1, span[1] + 1
        self.begin = sum(len(l) + 1 for l in lines[: span[0]])
        self.end = self.begin + sum(len(l) + 1 for l in lines[span[0] : span[1] + 1]) - 1
        self.signature = " ".join(lines[span[0]].split())
        self.dummies = _dummies(lines[span[0]])


def _dummies(header):
    m = re.search(r"\(([^)]*)\)", header.split("!")[0])
    return [d.strip().lower() for d in m.group(1).split(",") if d.strip()] if m else []


_KERNELS = {}
_KERNELS_LOCK = threading.Lock()


def _key(source):
    return (
        source.clang,
        source.filename,
        source.text,
        tuple(source.parse_args),
        source.compile_dir,
        source.include_dir,
        source.function,
    )


def kernel_info(source) -> "_Kernel":
    """The parent unit's kernel (cached per unit text); ASTError when it does not parse."""
    key = _key(source)
    with _KERNELS_LOCK:
        hit = _KERNELS.get(key)
    if hit is None:
        hit = _FortranKernel(source) if language(source) == "Fortran" else _Kernel(source)
        with _KERNELS_LOCK:
            if len(_KERNELS) > 64:
                _KERNELS.clear()
            _KERNELS[key] = hit
    return hit


class _Definitions:
    """The extents of the unit's top-level function definitions, by name (one clang parse)."""

    def __init__(self, source):
        from ...mep.slice import FUNCTION_KINDS, _is_definition, _top_level

        self.by_name = {}
        for tu in cast.dump(source):
            for n in _top_level(tu) if tu.get("kind") == "TranslationUnitDecl" else []:
                if n.get("kind") in FUNCTION_KINDS and _is_definition(n):
                    self.by_name.setdefault(n.get("name"), []).append(cast.extent(n))


_MEP = {}  # _key(source) -> the MEP source shown (a mep.slice.Slice), or None: the unit is shown
_DEFS = {}


def _cached(cache, source, make):
    key = _key(source)
    with _KERNELS_LOCK:
        if key in cache:
            return cache[key]
    value = make()
    with _KERNELS_LOCK:
        if len(cache) > 64:
            cache.clear()
        cache[key] = value
    return value


def mep_source(source):
    """The kernel's MEP source (``mep.slice.Slice``), or None where no slice can be made
    (the prompt then shows the whole unit)."""
    from ...errors import R3Error
    from ...mep.slice import source_slice

    def make():
        if language(source) == "Fortran":
            return None
        try:
            return source_slice(source)
        except (R3Error, OSError, ValueError, KeyError, IndexError, TypeError):  # SliceError, ASTError, odd ASTs
            return None

    return _cached(_MEP, source, make)


def unit_definitions(source):
    return _cached(_DEFS, source, lambda: _Definitions(source)).by_name


_REDEFINED = re.compile(r"redefinition of '([^']+)'")
MOST_REINTEGRATED = 16  # callees one rewrite may define again


def reintegrate(source, kernel, definition):
    """The unit with ``definition`` (a model's block: the kernel's new definition, maybe
    after rewritten callees or new helpers) in place of the kernel's, and each callee the
    block defines again taken out of the rest of the unit, so the block's stands."""
    head, tail = source.text[: kernel.begin], source.text[kernel.end :]
    text = head + definition.strip("\n") + tail
    if language(source) == "Fortran":  # flang's compile in the worker reports what is wrong
        return text
    removed = []  # (begin, end) in the parent's text
    for _ in range(MOST_REINTEGRATED):
        try:
            cast.dump(source, text, function=source.function)  # its diagnostics; the dump filtered down
            return text
        except cast.ASTError as err:
            m = _REDEFINED.search(str(err))
            if not m:
                return text  # the worker's compile reports it, and repair gets the diagnostic
            try:
                spans = [
                    sp
                    for sp in unit_definitions(source).get(m.group(1), [])
                    if (sp[1] <= kernel.begin or sp[0] >= kernel.end) and sp[0] not in {b for b, _ in removed}
                ]
            except cast.ASTError:
                return text
            if not spans:
                return text
            begin, end = spans[0]
            if source.text[end : end + 1] == "\n":  # its line, and a blank line after it
                end += 1
                if source.text[end : end + 1] == "\n" and source.text[begin - 1 : begin] in ("\n", ""):
                    end += 1
            removed.append((begin, end))
        head = _without(source.text, 0, kernel.begin, removed)
        tail = _without(source.text, kernel.end, len(source.text), removed)
        text = head + definition.strip("\n") + tail
    return text


def _without(text, lo, hi, spans):
    """``text[lo:hi]`` less the ``spans`` inside it."""
    out, pos = [], lo
    for b, e in sorted(sp for sp in spans if lo <= sp[0] and sp[1] <= hi):
        out.append(text[pos:b])
        pos = e
    out.append(text[pos:hi])
    return "".join(out)


def _fence(source):
    return {"C": "c", "Fortran": "fortran"}.get(language(source), "cpp")


def stable_prefix(source: KernelSource) -> str:
    """The start of every user message for this kernel and unit (the cacheable part)."""
    lang = language(source)
    shown = mep_source(source)
    try:
        k = kernel_info(source)
        signature = "`%s`" % k.signature
        where = "in the program below" if shown else "lines %d-%d of the file below" % (k.first_line, k.last_line)
    except cast.ASTError:
        signature, where = "(as in the file below)", "in the file below"
    lines = [
        "## The kernel",
        "Function `%s` in %s file `%s` (%s)." % (source.function, lang, source.filename, where),
        "Signature, which must not change: %s" % signature,
    ]
    if source.tolerance:
        lines.append(
            "Floating point: results may differ from the original by a relative error of at "
            "most %g, so reassociating floating-point operations (split or vectorized "
            "reductions, reordered sums) is allowed; say so in the description when you do." % source.tolerance
        )
    else:
        lines.append(
            "Floating point: results must be bit-for-bit identical. Do not reorder "
            "floating-point operations: no reassociation, no change to the order of any "
            "sum or reduction, no fused multiply-add the original does not have. Reordering "
            "loops is fine when each value is still computed by the same operations in the "
            "same order."
        )
    if source.openmp:
        lines.append(
            "OpenMP: the file is compiled with -fopenmp; OpenMP %s are allowed where iterations "
            "are independent, with no data race."
            % ("directives (!$omp parallel do, !$omp simd)" if lang == "Fortran" else "pragmas (parallel for, simd)")
        )
    else:
        lines.append("OpenMP: the file is compiled without OpenMP; do not use OpenMP pragmas or calls.")
    if source.scalars:
        lines.append(
            "Recorded integer arguments (typical values, not guaranteed): "
            + ", ".join("%s=%d" % (n, v) for n, v in sorted(source.scalars.items()))
            + "."
        )
    args = " ".join(source.parse_args)
    if args:
        lines.append("Parse flags: %s" % args)
    if shown is None:
        lines += [
            "",
            "## The file `%s`" % source.filename,
            "```%s" % _fence(source),
            source.text.rstrip("\n"),
            "```",
            "",
        ]
        return "\n".join(lines) + "\n"
    lines += [
        "",
        "## The kernel's program",
        "The part of `%s` that `%s` needs: the kernel, the functions it calls, the types and globals they "
        "use, and the headers of its own tree (the rest of the file is left out). It compiles alone, and "
        "`r3 mep` runs it on the recorded inputs. Your definitions go back into `%s` in place of the ones "
        "they redefine." % (source.filename, source.function, source.filename),
    ]
    for path, text in sorted(shown.headers.items()):
        lines += ["", "### `%s`" % path, "```%s" % _fence(source), text.rstrip("\n"), "```"]
    lines += [
        "",
        "### `%s` (the slice)" % source.filename,
        "```%s" % _fence(source),
        shown.text.rstrip("\n"),
        "```",
        "",
    ]
    return "\n".join(lines) + "\n"


def _clip(text, lines=DIAGNOSTIC_LINES, chars=DIAGNOSTIC_CHARS):
    out = [l.rstrip() for l in (text or "").strip().splitlines() if l.strip()]
    more = len(out) > lines
    out = "\n".join(out[:lines])
    if len(out) > chars:
        out, more = out[:chars], True
    return out + ("\n[...]" if more else "")


def _times(speedup):
    return "%.2fx" % speedup if isinstance(speedup, (int, float)) else "?x"


def render_feedback(source: KernelSource, feedback: Optional[Feedback]) -> str:
    """The variable part of a proposal request."""
    fb = feedback or Feedback()
    lines = [FEEDBACK_HEADING]
    lines.append("The file above runs at %s the original's speed." % _times(fb.parent_speedup))
    if source.rules:
        lines.append("It already carries these rewrites: %s." % ", ".join(source.rules))
    if fb.best:
        lines.append("")
        lines.append("Best variants so far (speedup over the original):")
        for desc, speedup in fb.best[:MAX_BEST]:
            lines.append("- %s %s" % (_times(speedup), desc))
    if fb.failures:
        lines.append("")
        lines.append("Recent rewrites that failed (do not repeat them):")
        for desc, diag in fb.failures[:MAX_FAILURES]:
            lines.append("- %s: %s" % (desc, _clip(diag, lines=4, chars=400).replace("\n", "\n  ")))
    if fb.examples:
        lines.append("")
        lines.append("Rewrites that won on other kernels (ideas, not to be copied blindly):")
        for ex in fb.examples[:MAX_EXAMPLES]:
            gain = ex.get("gain")
            head = "- %s: %s" % (ex.get("rule", "?"), ex.get("description", ""))
            if isinstance(gain, (int, float)):
                head += " (%s over that kernel's best without it)" % _times(gain)
            lines.append(head)
            patch = (ex.get("patch") or "").strip("\n")
            if patch:
                if len(patch) > PATCH_CHARS:
                    patch = patch[:PATCH_CHARS] + "\n[...]"
                lines += ["```diff", patch, "```"]
    if not (fb.best or fb.failures or fb.examples):
        lines.append("Nothing else has been tried on this kernel yet.")
    lines += [
        "",
        "Propose up to %d different rewrites of `%s` likely to be faster than the file above, "
        "in the answer format." % (ALTERNATIVES, source.function),
    ]
    return "\n".join(lines) + "\n"


def system_prompt(source: KernelSource) -> str:
    return SYSTEM_FORTRAN if language(source) == "Fortran" else SYSTEM


def build_messages(source: KernelSource, feedback: Optional[Feedback]) -> List[dict]:
    """[system, user] for a proposal request: stable prefix first, feedback last."""
    return [
        {"role": "system", "content": system_prompt(source)},
        {"role": "user", "content": stable_prefix(source) + render_feedback(source, feedback)},
    ]


def failed_definition(source: KernelSource, proposal: Proposal):
    """(fence tag, text) showing what ``proposal`` changed: its new definition of the
    kernel when the rest of the unit is the parent's, a unified diff otherwise."""
    try:
        k = kernel_info(source)
        head, tail = source.text[: k.begin], source.text[k.end :]
        text = proposal.text
        if text.startswith(head) and text.endswith(tail) and len(text) >= len(head) + len(tail):
            return _fence(source), text[len(head) : len(text) - len(tail)].strip("\n")
    except cast.ASTError:
        pass
    diff = difflib.unified_diff(
        source.text.splitlines(True), proposal.text.splitlines(True), "a/" + source.filename, "b/" + source.filename
    )
    return "diff", "".join(diff).rstrip("\n")


def build_repair_messages(source: KernelSource, proposal: Proposal, diagnostic: str) -> List[dict]:
    """[system, user] for a repair request: the same stable prefix, then the failure."""
    tag, shown = failed_definition(source, proposal)
    what = "its new definition of `%s`" % source.function if tag != "diff" else "its change to the file"
    tail = [
        REPAIR_HEADING,
        'The rewrite "%s" (%s below) failed:' % (proposal.description, what),
        "```%s" % tag,
        shown,
        "```",
        "",
        "The failure:",
        "```",
        _clip(diagnostic),
        "```",
        "",
        "Answer with one corrected rewrite of `%s` in the answer format (one code block with the "
        "complete definition), keeping what made the rewrite worth trying where you can." % source.function,
    ]
    return [
        {"role": "system", "content": system_prompt(source)},
        {"role": "user", "content": stable_prefix(source) + "\n".join(tail) + "\n"},
    ]


# -- the answer --------------------------------------------------------------------------


def code_blocks(answer: str) -> List[str]:
    """The C/C++ fenced blocks of a markdown answer, in order (other languages skipped)."""
    return [m.group(2) for m in _FENCE.finditer(answer or "") if m.group(1).lower() in CODE_TAGS and m.group(2).strip()]


def split_description(block: str, fallback: str):
    """(description, block without its leading ``// r3:`` line)."""
    lines = block.strip("\n").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        marker = next((m for m in (MARKER, FORTRAN_MARKER) if line.strip().startswith(m)), None)
        if marker:
            desc = line.strip()[len(marker) :].strip() or fallback
            return desc[:DESCRIPTION_CHARS], "\n".join(lines[:i] + lines[i + 1 :]).strip("\n") + "\n"
        break
    return fallback[:DESCRIPTION_CHARS], "\n".join(lines).strip("\n") + "\n"


def check(source: KernelSource, kernel: _Kernel, text: str) -> Optional[str]:
    """Why a rewritten unit is unusable (no kernel, changed signature), or None (usable, or
    not parsing: then the worker's compile diagnostic goes to repair)."""
    if language(source) == "Fortran":
        span = fortranrules.procedure_span(text, fortranrules.procedure_names(source))
        if span is None:
            return "the rewrite does not define %s" % source.function
        dummies = _dummies(text.split("\n")[span[0]])
        if dummies != kernel.dummies:
            return "the rewrite changes the dummy arguments of %s (%s, was %s)" % (
                source.function,
                ", ".join(dummies),
                ", ".join(kernel.dummies),
            )
        return None
    probe = text
    if language(source) == "C":
        # a redeclaration with the original signature: clang says "conflicting types" if it changed
        probe = text.rstrip("\n") + "\n" + kernel.signature + ";\n"
    try:
        fn = cast.function_definition(source, probe)
    except cast.ASTError as err:
        msg = str(err)
        name = source.function.split("::")[-1]
        if "defines no function" in msg:
            return "the rewrite does not define %s" % source.function
        if "conflicting types for '%s'" % name in msg:
            return "the rewrite changes the signature of %s" % source.function
        return None
    if kernel.mangled and fn.get("mangledName") and fn.get("mangledName") != kernel.mangled:
        return "the rewrite changes the signature of %s (%s, was %s)" % (
            source.function,
            fn.get("mangledName"),
            kernel.mangled,
        )
    return None


class LLMMutator(Mutator):
    """Rewrites from a chat model; ``rejected`` keeps (block, reason) of dropped answers."""

    name = "llm"
    concurrent = True
    uses_model = True

    def __init__(
        self,
        config: ModelConfig,
        alternatives: int = ALTERNATIVES,
        temperature: float = 0.6,
        repair_temperature: float = 0.2,
    ):
        if config is None:
            raise ModelError(
                "the llm mutator needs a model: pass --llm-url and --llm-model (or set R3_LLM_URL and R3_LLM_MODEL)"
            )
        self.config = config
        self.timeout = config.timeout
        self.alternatives = alternatives
        self.temperature = temperature
        self.repair_temperature = repair_temperature
        self.rejected = []  # (block, reason)
        self.requests = 0
        self._model = None
        self._lock = threading.Lock()

    @property
    def model(self) -> ChatModel:
        with self._lock:
            if self._model is None:
                self._model = ChatModel(self.config)
            return self._model

    def _ask(self, messages, temperature):
        with self._lock:
            self.requests += 1
        return self.model.complete(messages, temperature=temperature)

    def proposals(self, source: KernelSource, answer: str, limit: int, fallback: str, exclude=()) -> List[Proposal]:
        """The usable rewrites in a model answer, spliced into the unit (no-ops, repeats and
        the texts in ``exclude`` skipped)."""
        kernel = kernel_info(source)
        out, seen = [], {source.text, *exclude}
        for block in code_blocks(answer):
            if len(out) >= limit:
                break
            desc, definition = split_description(block, fallback)
            # the kernel's definition replaced, and the callees the block defines again
            text = reintegrate(source, kernel, definition)
            if text in seen:
                continue
            seen.add(text)
            reason = check(source, kernel, text)
            if reason:
                with self._lock:
                    self.rejected.append((block, reason))
                continue
            out.append(Proposal(text=text, rule="llm", description=desc))
        return out

    def propose(self, source: KernelSource, feedback: Optional[Feedback] = None) -> List[Proposal]:
        kernel_info(source)  # the parent must parse (ASTError) before a request is spent on it
        answer = self._ask(build_messages(source, feedback), self.temperature)
        return self.proposals(source, answer, self.alternatives, "llm rewrite of %s" % source.function)

    def repair(self, source: KernelSource, proposal: Proposal, diagnostic: str) -> Optional[Proposal]:
        kernel_info(source)
        answer = self._ask(build_repair_messages(source, proposal, diagnostic), self.repair_temperature)
        old = proposal.description
        desc = old if old.startswith("repair of: ") else "repair of: " + old
        found = self.proposals(source, answer, 1, desc, exclude=(proposal.text,))
        if not found:
            return None
        found[0].description = desc[:DESCRIPTION_CHARS]
        return found[0]

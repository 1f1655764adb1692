"""Unified diffs of one source file: what a source variant is, and what emit applies.

    patch = make_patch(old_text, new_text, "kernels.c")
    assert apply_patch(old_text, patch) == new_text

``apply_patch`` is strict (every context and removed line must match where the hunk
says): a patch that no longer fits its file is an error, never a guess. With ``offset``,
a hunk whose lines all match elsewhere applies at the nearest such place (``patch`` with
no fuzz does the same). The format is the one ``patch -p1`` and Spack's ``patch()``
directive read.

Rewrites of two kernels of one unit, each made against the original, are put together
by ``Composer`` (what emit does): their line edits, without context, go on the original
when no two touch the same line, so a rewrite that ends where the next kernel's begins
(a ``free`` before one function's closing brace, a helper before the next function)
still composes.
"""

import difflib
import re

from .errors import R3Error

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(R3Error):
    """A patch that does not apply to the text it is given."""


def make_patch(old, new, filename, context=3):
    """The unified diff from ``old`` to ``new`` (``a/<filename>`` -> ``b/<filename>``)."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), "a/" + filename, "b/" + filename, n=context
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def patched_file(patch):
    """The file name a patch changes (without the ``b/`` prefix)."""
    for line in patch.splitlines():
        if line.startswith("+++ "):
            name = line[4:].split("\t")[0].strip()
            return name[2:] if name.startswith("b/") else name
    raise PatchError("not a unified diff: no '+++' line")


def _old_lines(lines, i):
    """The lines of the file that the hunk whose body starts at ``lines[i]`` expects (its
    context and removed lines)."""
    want = []
    while i < len(lines) and not HUNK.match(lines[i]) and not lines[i].startswith(("--- ", "+++ ")):
        if lines[i].startswith("\\"):
            if want and lines[i - 1][:1] in " -":
                want[-1] = want[-1].rstrip("\n")
        elif lines[i][:1] in " -":
            want.append(lines[i][1:])
        i += 1
    return want


def _nearest_match(old, want, start, pos):
    """The line nearest to ``start`` (not before ``pos``) where ``want`` follows exactly."""
    for delta in range(len(old) + 1):
        for at in (start - delta, start + delta) if delta else (start,):
            if pos <= at <= len(old) - len(want) and old[at : at + len(want)] == want:
                return at
    return None


def apply_patch(text, patch, offset=False):
    """``text`` with ``patch`` applied; PatchError if any hunk does not match exactly
    (``offset``: exactly, at the nearest place to where the hunk says)."""
    old = text.splitlines(keepends=True)
    out, pos = [], 0  # pos: the next line of ``old`` not yet copied
    lines = patch.splitlines(keepends=True)
    i, hunks, moved = 0, 0, 0
    while i < len(lines):
        m = HUNK.match(lines[i])
        if not m:
            i += 1
            continue
        hunks += 1
        start = int(m.group(1)) - (0 if m.group(2) == "0" else 1)
        if offset:  # where the hunk's lines are, the previous hunk's offset carried on
            found = _nearest_match(old, _old_lines(lines, i + 1), start + moved, pos)
            if found is not None:
                moved, start = found - start, found
        if start < pos or start > len(old):
            raise PatchError(
                "hunk %d starts at line %s, outside the file or before the previous hunk" % (hunks, m.group(1))
            )
        out.extend(old[pos:start])
        pos = start
        i += 1
        while i < len(lines) and not HUNK.match(lines[i]):
            line = lines[i]
            tag, body = line[:1], line[1:]
            if line.startswith("\\"):  # "\ No newline at end of file": the previous line has none
                if out and out[-1].endswith("\n") and lines[i - 1][:1] in "+ ":
                    out[-1] = out[-1][:-1]
                i += 1
                continue
            if tag in (" ", "-"):
                want = body
                nxt = lines[i + 1] if i + 1 < len(lines) else ""
                have = old[pos] if pos < len(old) else None
                if nxt.startswith("\\") and have is not None and not have.endswith("\n"):
                    want = body.rstrip("\n")
                if have != want:
                    raise PatchError(
                        "hunk %d does not match line %d: expected %r, found %r"
                        % (hunks, pos + 1, want.rstrip("\n"), (have or "").rstrip("\n"))
                    )
                if tag == " ":
                    out.append(have)
                pos += 1
            elif tag == "+":
                out.append(body)
            elif line.startswith(("--- ", "+++ ")):
                break
            i += 1
    if not hunks:
        raise PatchError("not a unified diff: no hunks")
    out.extend(old[pos:])
    return "".join(out)


class Composer:
    """Rewrites of one original text, each made against the original, put together.

        unit = Composer(original)
        unit.add(patch_a)
        unit.add(patch_b)  # PatchError (and nothing added) when it edits a line patch_a edits
        unit.text

    A rewrite is its line edits against the original, without context; insertions at one
    place keep the order they were added in."""

    def __init__(self, original):
        self.original = original
        self.lines = original.splitlines(keepends=True)
        self.edits = []  # (begin, end, new lines) on the original's lines

    def add(self, patch):
        changed = apply_patch(self.original, patch).splitlines(keepends=True)
        opcodes = difflib.SequenceMatcher(None, self.lines, changed, autojunk=False).get_opcodes()
        edits = [(i1, i2, changed[j1:j2]) for tag, i1, i2, j1, j2 in opcodes if tag != "equal"]
        for begin, end, _ in edits:
            for b, e, _ in self.edits:
                if (begin < e and b < end) or (begin == end and b < begin < e) or (b == e and begin < b < end):
                    raise PatchError("it changes line %d, which another rewrite of the unit changes too" % (begin + 1))
        self.edits += edits

    @property
    def text(self):
        out, pos = [], 0
        for begin, end, new in sorted(self.edits, key=lambda edit: edit[:2]):  # stable: insertions in order
            out += self.lines[pos:begin] + new
            pos = max(pos, end)
        return "".join(out + self.lines[pos:])

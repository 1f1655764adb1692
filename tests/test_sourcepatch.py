"""Unified diffs of one source file: what a source variant is, and how emit composes the
rewrites of two kernels of one unit."""

import pytest

from spack_r3.sourcepatch import Composer, PatchError, apply_patch, make_patch

UNIT = "".join("line %d\n" % i for i in range(1, 41))


def _edit(text, number, new):
    lines = text.splitlines(keepends=True)
    lines[number - 1] = new
    return "".join(lines)


def test_rewrites_of_two_kernels_compose_where_the_first_moved_the_seconds_lines():
    first = make_patch(UNIT, UNIT.replace("line 5\n", "#pragma omp simd\nline 5\n"), "k.c")  # one line more
    second = make_patch(UNIT, _edit(UNIT, 30, "line 30 /* restrict */\n"), "k.c")
    after_first = apply_patch(UNIT, first)
    with pytest.raises(PatchError, match="hunk 1 does not match"):
        apply_patch(after_first, second)  # strict: where the hunk says, and nowhere else
    both = apply_patch(after_first, second, offset=True)
    assert "#pragma omp simd\nline 5\n" in both and "line 30 /* restrict */\n" in both
    assert both.count("\n") == UNIT.count("\n") + 1
    # The emitted patch is made against the original, so it applies strictly.
    assert apply_patch(UNIT, make_patch(UNIT, both, "k.c")) == both


def test_a_hunk_whose_lines_are_gone_does_not_apply_anywhere():
    second = make_patch(UNIT, _edit(UNIT, 30, "line 30 /* restrict */\n"), "k.c")
    changed = _edit(UNIT, 29, "line 29 changed by the first\n")  # the second's context
    with pytest.raises(PatchError):
        apply_patch(changed, second, offset=True)


def test_rewrites_that_touch_neighbouring_lines_compose_and_ones_that_edit_one_line_do_not():
    """Two kernels staged apart: the first frees its copy before its closing brace (line 10),
    the second puts a helper before its own definition (after line 11). Each patch's
    context holds the other's lines, so applying one after the other fails; their edits
    touch no common line, so they compose."""
    first = make_patch(UNIT, UNIT.replace("line 10\n", "free(a);\nline 10\n"), "k.c")
    second = make_patch(UNIT, UNIT.replace("line 11\n", "line 11\nstatic int helper;\n"), "k.c")
    with pytest.raises(PatchError):
        apply_patch(apply_patch(UNIT, first), second, offset=True)
    unit = Composer(UNIT)
    unit.add(first)
    unit.add(second)
    assert "line 9\nfree(a);\nline 10\nline 11\nstatic int helper;\nline 12\n" in unit.text
    # a third that rewrites lines 9 and 10, between which the first inserted, is refused and
    # leaves the unit as it was
    before = unit.text
    with pytest.raises(PatchError, match="line 9,"):
        unit.add(make_patch(UNIT, UNIT.replace("line 9\nline 10\n", "line nine\nline ten\n"), "k.c"))
    assert unit.text == before
    # insertions at one place keep the order they came in
    both = Composer(UNIT)
    both.add(make_patch(UNIT, "#define A 1\n" + UNIT, "k.c"))
    both.add(make_patch(UNIT, "#define B 2\n" + UNIT, "k.c"))
    assert both.text == "#define A 1\n#define B 2\n" + UNIT

"""Unified diffs of one source file: what a source variant is, and how emit composes the
rewrites of two kernels of one unit."""

import pytest

from spack_r3.sourcepatch import PatchError, apply_patch, make_patch

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

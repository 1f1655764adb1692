"""The textual-IR helpers that record and replay edit modules with."""

from spack_r3.irtext import FunctionDef, c_string, find_define, global_ref, matching, split_top


def test_split_top_keeps_aggregates_and_strings_whole():
    params = 'ptr noundef byval(%struct.big_t) align 8 %0, { double, double } %1, ptr @"a,b"'
    assert split_top(params) == ["ptr noundef byval(%struct.big_t) align 8 %0", "{ double, double } %1", 'ptr @"a,b"']
    assert split_top("") == [] and split_top("i32 %0") == ["i32 %0"]


def test_matching_skips_nested_brackets_and_strings():
    text = "[4 x { i32, [2 x i8] }] zeroinitializer"
    assert text[: matching(text, 0)] == "[4 x { i32, [2 x i8] }]"
    assert matching('(a, ")", b) rest', 0) == len('(a, ")", b)')


def test_function_definitions_split_and_render():
    line = "define dso_local noundef nonnull align 8 dereferenceable(8) ptr @_Z1fRi(ptr noundef %0) #0 !dbg !7 {"
    d = FunctionDef(line, "_Z1fRi")
    assert d.prefix == "dso_local noundef nonnull align 8 dereferenceable(8) ptr"
    assert d.params == ["ptr noundef %0"] and d.param_name(0) == "%0"
    assert d.linkage_free_prefix == "noundef nonnull align 8 dereferenceable(8) ptr"
    assert d.render("g", prefix="internal " + d.linkage_free_prefix) == (
        "define internal noundef nonnull align 8 dereferenceable(8) ptr @g(ptr noundef %0) #0 !dbg !7 {"
    )
    assert find_define(["; x", line], "_Z1fRi") == 1


def test_names_and_strings_are_quoted_for_llvm():
    assert global_ref("kernel.omp_outlined") == "@kernel.omp_outlined"
    assert global_ref("a b") == '@"a b"'
    assert c_string('say "hi"\n') == ('c"say \\22hi\\22\\0A\\00"', 10)

"""LLVM IR editing (spack_r3.iredit): the names, lines and entities record, replay and r3-apply edit."""

import re

from spack_r3.iredit import (
    GLOBAL_REF,
    FunctionDef,
    c_string,
    declare_only,
    add_fp_flags,
    add_to_attribute_groups,
    amdgpu_kernels,
    body_without_debug,
    defines_function,
    edit_call_args,
    ensure_declared,
    external_global,
    find_define,
    for_analysis,
    function_span,
    global_ref,
    globals_to_addresses,
    local_ref,
    make_hidden,
    matching,
    push_num_threads,
    redirect_calls,
    ref_name,
    rename_globals,
    set_linkage,
    set_target,
    set_thread_limit,
    split_fmuladd,
    split_module,
    split_top,
    string_attributes,
    target_triple,
    with_fn_attribute,
)


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


def test_references_read_back_to_the_names_they_quote():
    for name in ("kernel.omp_outlined", "a b", 'say "hi"', "_ZN1a1bEv"):
        assert ref_name(global_ref(name)) == name
    text = 'call void @"a b"(ptr @g, ptr @"x\\22y")'
    assert [ref_name(r) for r in GLOBAL_REF.findall(text)] == ["a b", "g", 'x"y']


def test_a_module_splits_into_its_top_level_entities():
    text = "\n".join(
        [
            "@g = internal global [4 x i32] zeroinitializer, align 16",
            'define dso_local noundef ptr @"k 1"(ptr %0) #0 {',
            "  ret ptr @g",
            "}",
            "declare void @free(ptr)",
            "attributes #0 = { nounwind }",
        ]
    )
    kinds = [(kind, name) for kind, name, _ in split_module(text)]
    assert kinds == [("global", "g"), ("function", "k 1"), ("declare", "free"), ("other", None)]
    assert defines_function(text.split("\n")[1], "k 1") and not defines_function("declare void @free(ptr)", "free")


def test_a_recorded_global_becomes_an_external_declaration():
    line = "@tab = internal unnamed_addr global [2 x { i32, i8 }] [{ i32, i8 } { i32 1, i8 2 }, { i32, i8 } zeroinitializer], align 8"
    assert external_global(line) == "@tab = external global [2 x { i32, i8 }], align 8"
    assert external_global("@n = dso_local global i64 7, align 8") == "@n = external global i64, align 8"


def test_renamed_and_hidden_definitions_keep_every_reference():
    text = "\n".join(
        [
            "@n = internal global i32 0, align 4",
            'define internal void @"k 1"(ptr %p) {',
            "  %v = load i32, ptr @n, align 4",
            "  ret void",
            "}",
            'define i32 @main() {\n  call void @"k 1"(ptr @n)\n  ret i32 0\n}',
        ]
    )
    out = make_hidden(rename_globals(text, {"n": "n.r3", "k 1": "k.r3"}), ["n.r3", "k.r3"])
    assert "@n.r3 = hidden global i32 0" in out and "define hidden void @k.r3(ptr %p) {" in out
    assert "load i32, ptr @n.r3" in out and "call void @k.r3(ptr @n.r3)" in out
    assert "@n " not in out and "k 1" not in out
    declared = declare_only(out, ["k.r3"])
    assert "declare hidden void @k.r3(ptr) " in declared and "load i32" not in declared


def test_forks_get_their_thread_count_and_declarations_once():
    text = "\n".join(
        [
            "define void @k(ptr %p) {",
            "  tail call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr nonnull @1, i32 1, ptr @k.omp_outlined, ptr %p)",
            "  ret void",
            "}",
            "declare i32 @__kmpc_global_thread_num(ptr)",
        ]
    )
    out, forks = push_num_threads(text, 4)
    assert forks == 1
    assert "%r3.gtid.1 = call i32 @__kmpc_global_thread_num(ptr nonnull @1)" in out
    assert "call void @__kmpc_push_num_threads(ptr nonnull @1, i32 %r3.gtid.1, i32 4)" in out
    assert out.count("declare i32 @__kmpc_global_thread_num") == 1
    assert out.count("declare void @__kmpc_push_num_threads(ptr, i32, i32)") == 1
    assert push_num_threads("define void @f() {\n  ret void\n}", 4)[1] == 0
    assert ensure_declared(out, ["declare i32 @__kmpc_global_thread_num(ptr)"]) == out


FUNCTION = "\n".join(
    [
        'target triple = "x86_64-pc-linux-gnu"',
        "define internal double @f(ptr %p, double %a, double %b) #0 {",
        "  %m = call double @llvm.fmuladd.f64(double %a, double %b, double 1.0)",
        "  %s = fadd double %m, %a",
        "  %c = fcmp olt double %s, %b",
        "  call void @free(ptr %p)",
        "  ret double %s",
        "}",
        'attributes #0 = { nounwind "target-cpu"="x86-64" "target-features"="+sse2" "tune-cpu"="generic" }',
    ]
)


def test_a_functions_linkage_calls_and_attributes_are_edited_in_place():
    assert "define double @f(" in set_linkage(FUNCTION, "f", "")
    assert "define hidden double @f(" in set_linkage(FUNCTION, "f", "hidden")
    text, calls = redirect_calls(FUNCTION, "free", "__r3_replay_free")
    assert calls == 1 and "call void @__r3_replay_free(ptr %p)" in text
    assert string_attributes(FUNCTION, "f") == {
        "target-cpu": "x86-64",
        "target-features": "+sse2",
        "tune-cpu": "generic",
    }
    assert string_attributes(FUNCTION, "g") == {} and target_triple(FUNCTION) == "x86_64-pc-linux-gnu"
    retargeted = string_attributes(set_target(FUNCTION, "znver4", "+avx2,+fma"), "f")
    assert retargeted == {"target-cpu": "znver4", "target-features": "+avx2,+fma", "tune-cpu": "znver4"}


def test_fp_edits_split_fmuladd_and_add_flags():
    split = split_fmuladd(FUNCTION)
    assert "%r3.fmul.m = fmul double %a, %b\n  %m = fadd double %r3.fmul.m, 1.0" in split
    fast = add_fp_flags(split, ["nnan", "contract"])
    assert "= fadd contract nnan double %r3.fmul.m" in fast and "= fcmp nnan olt double" in fast
    assert add_fp_flags(fast, ["nnan"]) == fast
    # flang's form of a contraction: operations flagged contract, which a split leaves unfused
    flang = "  %3 = fmul contract double %1, %2\n  %4 = fadd fast double %3, %0\n  %5 = fsub double %4, %0"
    assert split_fmuladd(flang) == (
        "  %3 = fmul double %1, %2\n  %4 = fadd reassoc nnan ninf nsz arcp afn double %3, %0\n  %5 = fsub double %4, %0"
    )


def test_call_arguments_are_edited_by_position():
    text = "  call void @g(ptr @0, i32 %t, { i32, i32 } { i32 1, i32 2 }, i64 7)\n  call void @h(i32 1)"
    out = edit_call_args(text, re.compile(r"call void @g\("), lambda args: args[:3] + ["i64 8"])
    assert out == "  call void @g(ptr @0, i32 %t, { i32, i32 } { i32 1, i32 2 }, i64 8)\n  call void @h(i32 1)"


def test_a_function_attribute_goes_where_llvm_reads_it():
    assert with_fn_attribute("#0 !dbg !7", "noinline") == "#0 noinline !dbg !7"
    assert with_fn_attribute("local_unnamed_addr comdat", "noinline") == "local_unnamed_addr noinline comdat"
    assert with_fn_attribute("noinline #1", "noinline") == "noinline #1"


def test_a_body_copied_for_a_clone_drops_debug_and_keeps_whole_names():
    body = ["  %x = add i32 %n, 1, !dbg !12", "    #dbg_value(i32 %n, !5, !DIExpression(), !9)", "  ret i32 %x"]
    assert body_without_debug(body) == ["  %x = add i32 %n, 1", "  ret i32 %x"]
    assert local_ref("%n").sub("7", "add i32 %n, %n.1") == "add i32 7, %n.1"
    text = 'define void @f() #0 {\n  ret void\n}\nattributes #0 = { noinline optnone "target-cpu"="x86-64" }'
    assert "optnone" not in for_analysis(text) and "target-cpu" not in for_analysis(text)


def test_recorded_globals_become_their_addresses():
    text = '@n = external global i32, align 4\n@"a b" = global i32 0\n  %v = load i32, ptr @n, align 4'
    out = globals_to_addresses(text, {"n": 0x1000})
    assert out == '@"a b" = global i32 0\n  %v = load i32, ptr inttoptr (i64 4096 to ptr), align 4'


def test_a_kernels_span_and_attribute_groups():
    start, end = function_span(FUNCTION, "f")
    assert FUNCTION[start:end].startswith("define internal double @f(") and FUNCTION[end:].startswith("\n}\n")
    assert function_span(FUNCTION, "g") is None
    out = add_to_attribute_groups(FUNCTION, ["f"], '"amdgpu-num-vgpr"="32"')
    assert string_attributes(out, "f")["amdgpu-num-vgpr"] == "32"


def test_a_device_kernels_thread_limit_and_calling_convention():
    """What device code generation edits: the thread limit a region was compiled with, in
    its attributes and its kernel environment, and the AMDGPU kernels LLVM upgraded wrongly."""
    text = (
        "@k_kernel_environment = constant %struct.KernelEnvironmentTy { %struct.ConfigurationEnvironmentTy "
        "{ i8 0, i8 1, i8 2, i32 1, i32 256, i32 0 } }\n"
        'attributes #0 = { "omp_target_thread_limit"="256" "nvvm.maxntid"="256" '
        '"amdgpu-flat-work-group-size"="1,256" }\n'
        "define ptx_kernel void @k() #0 {\n  ret void\n}\n"
    )
    out = set_thread_limit(text, 64)
    assert '"omp_target_thread_limit"="64"' in out and '"nvvm.maxntid"="64"' in out
    assert '"amdgpu-flat-work-group-size"="1,64"' in out and "i32 1, i32 64, i32 0" in out
    assert "define amdgpu_kernel void @k()" in amdgpu_kernels(out)

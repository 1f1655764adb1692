"""The pipeline's settings are declared once, each on its field of ``data.Pipeline``, and
read into ``settings.SETTINGS``: the SPEC parser and formatter, the search space and the
simplifier are derived from that table. These tests
pin what the derived parts did when each spelled the settings out by hand (the pinned
digests and fingerprints were computed by that code): SPECs read and write the same,
and a study's space keeps its fingerprint, so existing studies resume."""

import hashlib
import json
import os
import random
import re
import subprocess
from dataclasses import fields, replace

import pytest
from conftest import REPO_ROOT

from spack_r3.data import Pipeline, Variant
from spack_r3.errors import PipelineError
from spack_r3.compile.pipeline import _READ, format_spec, parse
from spack_r3.search.simplify import settings, without
from spack_r3.search.space import KernelFacts, Space
from spack_r3.settings import BY_KEY, BY_NAME, FAST_MATH_FLAGS, SETTINGS, lower, same

# Every value of every field, in Pipeline's order: random pipelines drawn from these
# cover every setting at and away from its default.
FIELD_VALUES = dict(
    opt=["0", "1", "2", "3", "s", "z"],
    loop_vectorize=[None, True, False],
    slp_vectorize=[None, True, False],
    unroll=[None, True, False],
    interleave=[None, True, False],
    inline_threshold=[None, 0, 25, 500],
    passes=[(), ("sroa",), ("new_gvn", "sccp")],
    codegen=[0, 1, 2, 3],
    cpu=["host", "built", "skylake"],
    features=["host", "built", "+avx2,-fma"],
    fast_math=[(), ("contract",), ("reassoc", "contract"), FAST_MATH_FLAGS, FAST_MATH_FLAGS[::-1]],
    fma=["built", "on", "off"],
    noalias=[False, True],
    polly=[False, True],
    polly_tile=[None, 0, 64],
    polly_matmul=[True, False],
    polly_vectorizer=["none", "stripmine"],
    polly_parallel=[False, True],
    polly_fusion=[False, True],
    polly_coincidence=[False, True],
    polly_tile2=[False, True],
    polly_regtile=[False, True],
    build_compiler=[False, True],
    specialize=[(), ((0, 3),), ((0, 3), (2, -1))],
)


def random_pipelines(n, seed=47):
    rng = random.Random(seed)
    return [Pipeline(**{k: rng.choice(v) for k, v in FIELD_VALUES.items()}) for _ in range(n)]


def test_every_field_of_pipeline_is_one_row_of_the_table():
    assert set(FIELD_VALUES) == {f.name for f in fields(Pipeline)}
    declared = [name for s in SETTINGS for name in s.fields if s.key != "target"]  # target= sets cpu and features
    assert sorted(declared) == sorted(f.name for f in fields(Pipeline))
    keys = [k for s in SETTINGS for k in (s.key,) + s.aliases]
    assert len(keys) == len(set(keys)) == len(BY_KEY)
    assert all(s.kind in _READ for s in SETTINGS)  # each value syntax has a reader


def test_specs_read_and_write_as_they_did():
    """2000 random pipelines: their SPECs, JSON and FP relaxation, digested; the digest is
    the one the hand-written formatter, to_json and relaxes_fp gave (plan digests depend
    on the SPEC text)."""
    digest = hashlib.sha256()
    for p in random_pipelines(2000):
        digest.update(("%s %s %d\n" % (format_spec(p), json.dumps(p.to_json()), p.relaxes_fp)).encode())
    assert digest.hexdigest()[:16] == "080aa086bb364c4e"


def test_every_spelling_reads_the_same():
    assert parse("O2,vectorize=0,slp=1,inline=500") == parse(
        "opt=2,loop_vectorize=off,slp_vectorize=on,inline_threshold=500"
    )
    assert (
        parse("fast")
        == parse("fast-math")
        == parse("fast_math=all")
        == parse("fast=1")
        == Pipeline(fast_math=FAST_MATH_FLAGS)
    )
    assert parse("polly=1,polly_vec=stripmine") == parse("polly=yes,polly_vectorizer=stripmine")
    assert parse("-O1,target=built") == Pipeline(opt="1", cpu="built", features="built")
    assert parse("O2,codegen=2,target=built,compiler=build") == Pipeline(
        opt="2", codegen=2, cpu="built", features="built", build_compiler=True
    )
    assert (
        format_spec(parse("loop_vectorize=1,polly_vectorizer=stripmine,polly=1"))
        == "O3,vectorize=1,polly=1,polly_vec=stripmine"
    )
    # the canonical SPEC reads back as the pipeline it writes (a target both fields
    # describe, as parse sets them; cpu and feature names this machine's LLVM may not know
    # left out)
    for p in random_pipelines(300, seed=1):
        p = replace(p, cpu=p.features if p.features in ("host", "built") else "host", build_compiler=False)
        p.features = p.cpu
        assert format_spec(parse(format_spec(p))) == format_spec(p)


@pytest.mark.parametrize(
    "spec, error",
    [
        ("opt=4", "opt=4: expected 0, 1, 2, 3, s or z"),
        ("fma=maybe", "fma=maybe: expected built, on or off"),
        ("target=x", "target=x: expected host or built"),
        ("polly=1,polly_vectorizer=x", "polly_vectorizer=x: expected none or stripmine"),
        ("compiler=gcc", "compiler=gcc: expected build (the build's own compiler and flags) or r3"),
        ("inline=100001", "inline=100001: expected 0..100000"),
        ("slp=2", "slp=2: expected 0 or 1"),
        ("bogus=1", "unknown pipeline key 'bogus'"),
        ("polly_tile=4,polly_vec=stripmine", "polly_tile=4,polly_vec=stripmine: Polly's settings need polly=1"),
        (
            "compiler=build,O2,vectorize=1",
            "compiler=build compiles with the build's own flags and takes none of vectorize=1",
        ),
    ],
)
def test_bad_values_say_what_each_setting_expects(spec, error):
    with pytest.raises(PipelineError) as e:
        parse(spec)
    assert str(e.value) == error


FACTS = {
    "plain": (KernelFacts("k"), "a0747121"),
    "everything": (
        KernelFacts(
            "k",
            parallel=True,
            cores=4,
            dispatch_loops=1,
            tolerance=1e-6,
            polly=True,
            retarget=True,
            built_target="x86-64",
            built_fma=False,
            knobs={"TILE": (32, 16, 64)},
            specialize=(("none", ()), ("0:300", ((0, 300),))),
            teams=True,
        ),
        "24795fc3",
    ),
    "polly-one-cpu": (KernelFacts("k", polly=True, cores=1, tolerance=1e-3), "c612e05a"),
    "polly-retarget": (KernelFacts("k", polly=True, cores=2, retarget=True), "d7f83588"),
}


@pytest.mark.parametrize("name", sorted(FACTS))
def test_a_space_keeps_its_fingerprint_so_studies_resume(name):
    facts, fingerprint = FACTS[name]
    assert Space(facts).fingerprint() == fingerprint


def test_the_space_offers_each_setting_as_its_row_says():
    space = Space(FACTS["everything"][0])
    offered = {p.name: (p.kind, p.choices) for p in space.params if not p.name.startswith("pass")}
    tri = ("default", "on", "off")
    assert offered == {
        "opt": ("categorical", ("2", "3", "s")),
        "vectorize": ("categorical", tri),
        "slp": ("categorical", tri),
        "unroll": ("categorical", tri),
        "interleave": ("categorical", tri),
        "inline": ("categorical", (None, 25, 225, 500, 1000)),
        "codegen": ("categorical", (1, 2, 3)),
        "target": ("categorical", ("host", "built")),
        "noalias": ("bool", ()),
        "polly": ("bool", ()),
        "polly_tile": ("categorical", (None, 0, 16, 32, 64, 128, 256)),
        "polly_matmul": ("bool", ()),
        "polly_vec": ("categorical", ("none", "stripmine")),
        "polly_parallel": ("bool", ()),
        "polly_fusion": ("bool", ()),
        "polly_coincidence": ("bool", ()),
        "polly_tile2": ("bool", ()),
        "polly_regtile": ("bool", ()),
        "fast_math": ("categorical", ("none", "contract", "reassoc+contract", "reassoc+contract+nsz+arcp", "fast")),
        "fma": ("categorical", ("built", "on")),  # the build does not fuse: fusing is what changes
        "threads": ("int", ()),
        "num_teams": ("categorical", (None, 1, 2, 4, 8)),
        "thread_limit": ("categorical", (None, 1, 2, 4)),
        "schedule": ("categorical", ("static", "dynamic", "guided")),
        "chunk": ("categorical", (None, 1, 4, 16, 64, 256)),
        "specialize": ("categorical", ("none", "0:300")),
        "knob:TILE": ("categorical", (32, 16, 64)),
    }
    # the baseline's values describe the default pipeline; each label means its row's value
    assert space.variant(space.defaults()).pipeline == Pipeline()
    values = dict(
        space.defaults(), vectorize="off", target="built", fast_math="contract", polly=True, polly_vec="stripmine"
    )
    assert (
        format_spec(space.variant(values).pipeline)
        == "O3,vectorize=0,target=built,fast=contract,polly=1,polly_vec=stripmine"
    )


def test_a_winner_drops_polly_with_all_its_settings():
    winner = Variant(pipeline=parse("O3,noalias=1,polly=1,polly_tile=32,polly_fusion=1,polly_regtile=1"))
    names = [name for name, _ in settings(winner)]
    assert names == ["noalias", "polly", "polly_tile", "polly_fusion", "polly_regtile"]
    assert without(winner, ["polly"]).pipeline == Pipeline(noalias=True)  # Polly's knobs go with it
    assert without(winner, ["polly_fusion"]).pipeline == parse("O3,noalias=1,polly=1,polly_tile=32,polly_regtile=1")
    # the target is what the search compiles for, not a passenger
    assert [name for name, _ in settings(Variant(pipeline=parse("O3,target=built")))] == []


def test_a_setting_is_searched_once_its_row_offers_values(monkeypatch):
    """The space asks its own settings in its own order, and after them any setting whose
    row offers values: here the target features, which no row offers today."""
    row = replace(BY_KEY["features"], offer=same("host", "+avx2,+fma"), doc="target features")
    monkeypatch.setitem(BY_NAME, "features", row)
    space = Space(KernelFacts("k"))
    assert [(p.name, p.choices) for p in space.params][-1] == ("features", ("host", "+avx2,+fma"))
    assert space.defaults()["features"] == "host" and space.variant(space.defaults()).pipeline == Pipeline()
    assert space.variant(dict(space.defaults(), features="+avx2,+fma")).pipeline == Pipeline(features="+avx2,+fma")
    # a row that relaxes FP is offered only within the kernel's tolerance
    monkeypatch.setitem(BY_NAME, "features", replace(row, relaxes_fp=True))
    assert "features" not in [p.name for p in Space(KernelFacts("k")).params]
    assert "features" in [p.name for p in Space(KernelFacts("k", tolerance=1e-6)).params]


def test_the_replay_page_lists_every_key():
    with open(os.path.join(REPO_ROOT, "docs", "replay.md")) as f:
        page = f.read()
    missing = [k for s in SETTINGS for k in (s.key,) + s.aliases if not re.search(r"`%s[=`]" % k, page)]
    assert missing == [], "docs/replay.md's Pipeline SPECs leave out %s" % missing


# -- lowering: each row says what its values are as flags --------------------------------


def test_every_value_of_every_setting_lowers_to_flags_or_says_why_not():
    """A setting away from its default either has flags (clang's, or LLVM options) or is
    listed as unlowered with its row's reason: none is dropped silently."""
    for name, values in FIELD_VALUES.items():
        (row,) = [s for s in SETTINGS if s.fields == (name,)]
        assert row.clang is not None or row.llvm is not None or row.unlowered, name
        for value in values:
            p = replace(Pipeline(polly=True), **{name: value})
            lowered = lower(p, ["-march=x86-64"], rows=(row,))
            if lowered.unlowered:
                assert row.unlowered and row.unlowered in lowered.unlowered[0], (name, value)
            elif value != Pipeline.__dataclass_fields__[name].default and value:
                assert lowered.clang or value in ("built", ""), (name, value)


def test_polly_settings_reach_the_mep_flags_as_they_reach_replays_opt_stage():
    """The drift this table ends: the MEP once dropped Polly's fusion and tiling options."""
    from spack_r3.mep.writer import pipeline_flags
    from spack_r3.compile.stages import polly_options

    p = Pipeline(polly=True, polly_tile=32, polly_fusion=True, polly_tile2=True, polly_regtile=True)
    p = replace(p, polly_coincidence=True, polly_parallel=True, polly_matmul=False)
    flags, unlowered = pipeline_flags(p, ["-O2", "-march=x86-64"])
    opt = polly_options(p)
    assert opt[0] == "-O3" and unlowered == []
    for option in opt[1:]:  # each of opt's options is one -mllvm option of clang's
        assert flags[flags.index(option) - 1] == "-mllvm", option
    assert "-polly-loopfusion-greedy" in opt and "-polly-register-tiling" in opt
    assert "-fopenmp" in flags  # Polly's OpenMP code needs the runtime
    flags, unlowered = pipeline_flags(replace(p, specialize=((1, 64),)), [])
    assert unlowered == ["specialize=1:64 (a clone of the kernel with recorded arguments folded in, behind a guard)"]


def test_clang_and_opt_take_every_lowering(clang, tmp_path):
    """The flags are real: clang compiles with every pipeline's, and Polly's opt stage
    takes its options (an unknown LLVM option is an error to both)."""
    from spack_r3.compile.stages import polly_options, polly_tools

    src = tmp_path / "k.c"
    src.write_text("void k(int n, double *a, const double *b) { for (int i = 0; i < n; i++) a[i] += 2 * b[i]; }\n")
    seen = set()
    for p in random_pipelines(40, seed=5):
        p = replace(p, cpu="built" if p.cpu == "skylake" else p.cpu)  # not this CPU's business
        flags = lower(p, ["-march=x86-64"] if os.uname().machine == "x86_64" else []).clang
        if flags in seen:
            continue
        seen.add(flags)
        proc = subprocess.run([clang, *flags, "-c", str(src), "-o", str(tmp_path / "k.o")], capture_output=True)
        assert proc.returncode == 0, (flags, proc.stderr.decode())
    bitcode = tmp_path / "k.bc"
    subprocess.run(
        [clang, "-O0", "-Xclang", "-disable-O0-optnone", "-emit-llvm", "-c", str(src), "-o", str(bitcode)], check=True
    )
    opt = polly_tools(clang).opt
    for p in random_pipelines(20, seed=6):
        argv = [opt, *polly_options(replace(p, polly=True)), str(bitcode), "-o", os.devnull]
        proc = subprocess.run(argv, capture_output=True)
        assert proc.returncode == 0, (argv, proc.stderr.decode())

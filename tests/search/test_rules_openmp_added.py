"""Rewrites that add OpenMP threads to a unit its build compiles without -fopenmp (issue 46:
PolyBench's own build, a user's ``-O3 -march=native``). The Gauss-Seidel kernel of the
stencil forms, built ``-O3`` alone: its wavefront of time tiles is offered, its variant
compiles with -fopenmp added (that unit only) and replays bit for bit on two threads. The
same program with an OpenMP pragma of its own, which its build leaves inactive: no rewrite
that adds threads is offered (-fopenmp would turn the user's pragma on), and the reason says
where the pragma is.
"""

import dataclasses
import os

import pytest

from spack_r3.capture import load_capture_dir
from spack_r3.data import OK, Launch, Variant
from spack_r3.replay.server import ReplayServer
from spack_r3.replay.source import variant_bitcode
from spack_r3.search import openmp
from spack_r3.search.mutators import Feedback
from spack_r3.search.mutators import ruleset
from spack_r3.search.mutators.ruleset import RulesMutator
from spack_r3.search.remix import kernel_source
from spack_r3.search.results import KernelResult, save_results
from spack_r3.sourcepatch import make_patch
from spack_r3.workspace import Workspace

from test_mep import make_check
from test_record_replay import capture_of, r3, source_tree
from test_rules import one, rules_of
from test_rules_stencil_forms import FORMS_C

MAKEFILE = "prog: forms.c\n\t$(CC) -O3 -o $@ forms.c -lm\n"  # no -fopenmp
# main's own loop with a pragma the build leaves inactive
INIT = "  for (int t = 0; t < STEPS; t++)\n    src[t] = t * 0.25;\n"
WITH_PRAGMA_C = FORMS_C.replace(INIT, "#pragma omp parallel for\n" + INIT)


def _record(tmp_path_factory, name, text):
    src = source_tree(tmp_path_factory, name, {"forms.c": text, "Makefile": MAKEFILE})
    ws = str(tmp_path_factory.mktemp(name + "-ws"))
    assert r3("--workspace", ws, "record", "--source", src, "--run", "./prog", "--kernel", "seidel9") == 0
    return capture_of(ws, "seidel9")


@pytest.fixture(scope="module")
def plain(tmp_path_factory, clang):
    return _record(tmp_path_factory, "omp-added", FORMS_C)


def test_a_wavefront_is_offered_without_fopenmp_and_replays_bit_for_bit_on_two_threads(plain, tmp_path, clang):
    capture = load_capture_dir(plain)
    src = kernel_source(capture, plain)
    assert not src.openmp and src.add_openmp and src.openmp_refusal == ""
    props = RulesMutator().propose(src, Feedback())
    wave = one(props, "wavefront")
    assert wave.description.startswith("wavefront of time tiles of t over 1 row loop in seidel9 (skew 1;")
    assert "omp-parallel" not in rules_of(props)  # Gauss-Seidel: the wavefront is its only parallelism

    patch = make_patch(src.text, wave.text, src.filename)
    knobs = dict(zip(wave.knobs, (2, 3)))  # 5 steps, 24 rows: partial tiles both ways
    assert openmp.adds_openmp(capture, ("wavefront",)) and not openmp.adds_openmp(capture, ("time-tile",))
    # -fopenmp added for this unit's variant: its wavefront forks threads (without, the pragma is inert)
    assert b"__kmpc_fork_call" in variant_bitcode(capture, plain, patch, knobs, openmp=True)
    assert b"__kmpc_fork_call" not in variant_bitcode(capture, plain, patch, knobs)

    variant = Variant(
        launch=Launch(threads=2),
        source_patch=patch,
        source_defines=knobs,
        source_rule="wavefront",
        source_openmp=True,
    )
    assert Variant.from_json(variant.to_json()) == variant
    with ReplayServer(cache_dir=str(tmp_path / "cache")) as server:
        ev = server.submit(plain, variant, pairs=3, timeout=60, verify_runs=3)  # exact comparison
    assert ev.status == OK, (ev.status, ev.diagnostics)

    # The child carrying it is parsed as it compiles (-fopenmp): no second wavefront of it.
    child = kernel_source(capture, plain, wave.text, ("wavefront",))
    assert child.openmp and "-fopenmp" in child.parse_args
    assert "wavefront" not in rules_of(RulesMutator().propose(child, Feedback()))

    # r3 mep of it as a winner: its kernel compiles and links with OpenMP, on the plan's threads.
    ws = os.path.dirname(os.path.dirname(plain))
    result = KernelResult("seidel9", [capture.id], 0.9, 1e-3, 5e-4, 1.5, 1.4, 1.6, 10, {}, False, True, variant)
    save_results(Workspace(ws), [result])
    out = tmp_path / "mep"
    assert r3("--workspace", ws, "mep", "seidel9", "--variant", "-o", out) == 0
    assert "#define MEP_THREADS 2\n" in (out / "mep.h").read_text()
    assert "-fopenmp" in (out / "Makefile").read_text()
    proc = make_check(out, clang, clang)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "seidel9: verified" in proc.stdout


def test_no_threads_are_added_to_a_unit_with_an_inactive_omp_pragma(tmp_path_factory, clang):
    directory = _record(tmp_path_factory, "omp-inactive", WITH_PRAGMA_C)
    capture = load_capture_dir(directory)
    src = kernel_source(capture, directory)
    line = WITH_PRAGMA_C.splitlines().index("#pragma omp parallel for") + 1
    assert not src.openmp and not src.add_openmp
    assert src.openmp_refusal == (
        "the unit has OpenMP pragmas its build leaves inactive (no -fopenmp: forms.c:%d), "
        "which -fopenmp would turn on" % line
    )
    rules = rules_of(RulesMutator().propose(src, Feedback()))
    assert "time-tile" in rules  # serial rewrites still are
    assert not {"wavefront", "omp-parallel"} & set(rules)
    # the same unit built with -fopenmp: its pragmas are active already, nothing is added
    built = dataclasses.replace(capture, bitcode_args=list(capture.bitcode_args) + ["-fopenmp"])
    assert openmp.refusal(built, directory) == "" and not openmp.adds_openmp(built, ("wavefront",))


def test_serial_tuning_offers_no_threads(plain):
    """``r3 tune --serial`` (an MPI rank per core): no threads setting, no Polly parallel
    code, and the remix drops the rewrites that add threads (the wavefront), keeping the
    serial time tile."""
    from spack_r3.search.bayes import storage
    from spack_r3.search.remix import Remix, RemixOptions
    from spack_r3.search.space import Space
    from spack_r3.search.tune import Target, kernel_facts

    target = Target(kernel="seidel9", captures=[plain], source_variant="serial")
    facts = kernel_facts(target, cores=4, serial=True)
    assert (facts.cores, facts.serial) == (1, True)
    names = [p.name for p in Space(facts).params]
    assert "threads" not in names and "polly_parallel" not in names
    threaded = kernel_facts(target, cores=4)
    assert "polly_parallel" in [p.name for p in Space(threaded).params] or not threaded.polly

    ws = Workspace(os.path.dirname(os.path.dirname(plain)))
    remix = Remix(ws, storage(ws), target, facts, RulesMutator(), RemixOptions(budget=4))
    rules = rules_of(remix._rewrites(None, 1.0))
    assert "time-tile" in rules and not any(ruleset.rule(r).threads for r in rules)
    parallel = dataclasses.replace(facts, parallel=True)  # a kernel that forks its own threads
    assert Space(parallel).variant({}).launch.threads == 1

"""C++ kernels by the names people read: demangled in tables, accepted in any form.

A kernel's identity stays its symbol (``_ZN6Solver11applyStressERSt6vectorIdSaIdEEi``);
tables show ``Solver::applyStress(std::vector<double>&, int)``, JSON carries both, and
``r3 record --kernel`` / ``r3 replay`` take the symbol, the demangled name or the
qualified name alone when no other overload shares it.
"""

import json

import pytest

from spack_r3 import cxxnames
from spack_r3.capture import list_captures, resolve
from spack_r3.errors import CaptureError
from spack_r3.workspace import Workspace

from test_record_replay import r3, r3_subprocess

APPLY = "_ZN6Solver11applyStressERSt6vectorIdSaIdEEi"
RELAX = "_ZN6Solver5relaxERSt6vectorIdSaIdEE"  # Solver::relax(std::vector<double>&)
RELAX_W = "_ZN6Solver5relaxERSt6vectorIdSaIdEEd"  # Solver::relax(std::vector<double>&, double)
SMOOTH_CXX = "_Z6smoothRSt6vectorIdSaIdEE"  # smooth(std::vector<double>&), beside extern "C" smooth


def test_symbols_demangle_to_what_the_source_says():
    assert cxxnames.demangle(APPLY) == "Solver::applyStress(std::vector<double, std::allocator<double> >&, int)"
    # tables leave out template arguments that only repeat a default
    assert cxxnames.tidy(APPLY) == "Solver::applyStress(std::vector<double>&, int)"
    assert cxxnames.qualified(APPLY) == "Solver::applyStress"
    assert cxxnames.qualified("_ZNK1A1fEv") == "A::f"  # A::f() const
    assert cxxnames.qualified("_Z3fooIiEvT_") == "foo<int>"  # void foo<int>(int): no return type
    assert cxxnames.qualified("_ZN1AltERKS_") == "A::operator<"  # operators are not brackets
    # C names, names that only look mangled and bare type codes come back unchanged
    for name in ("spmv", "_Zbad", "i"):
        assert cxxnames.demangle(name) == cxxnames.tidy(name) == cxxnames.display(name) == name


def test_long_names_are_shortened_for_a_table_column():
    symbol = "_ZN2ns6detail30really_long_function_name_hereIdLi3EEEvRKSt6vectorIS2_IT_SaIS3_EESaIS5_EEPdm"
    assert cxxnames.tidy(symbol) == (
        "void ns::detail::really_long_function_name_here<double, 3>"
        "(std::vector<std::vector<double> > const&, double*, unsigned long)"
    )
    assert cxxnames.display(symbol) == "ns::detail::really_long_function_name_here<...>(...)"
    assert cxxnames.display(symbol, width=80) == "ns::detail::really_long_function_name_here<double, 3>(...)"
    saxpy = "_Z5saxpyRSt6vectorIdSaIdEERKS1_d"
    assert cxxnames.display(saxpy) == "saxpy(...)"
    assert cxxnames.display(saxpy, width=80) == "saxpy(std::vector<double>&, std::vector<double> const&, double)"
    # a parameter of type std::allocator is a parameter, not a default template argument
    assert cxxnames.tidy("_Z1hiRKSaIcE") == "h(int, std::allocator<char> const&)"


def test_a_name_matches_by_symbol_demangled_or_qualified():
    symbols = [APPLY, RELAX, RELAX_W, SMOOTH_CXX, "smooth"]
    assert cxxnames.best_matches(APPLY, symbols) == (cxxnames.EXACT, [APPLY])
    full = "Solver::applyStress(std::vector<double, std::allocator<double> >&, int)"
    assert cxxnames.best_matches(full, symbols) == (cxxnames.DEMANGLED, [APPLY])
    # spaces do not matter, nor the default arguments the tables leave out
    assert cxxnames.best_matches("Solver::applyStress(std::vector<double> &, int)", symbols)[1] == [APPLY]
    assert cxxnames.best_matches("Solver::applyStress", symbols) == (cxxnames.QUALIFIED, [APPLY])
    # a qualified name shared by overloads matches them all: the caller says it is ambiguous
    assert cxxnames.best_matches("Solver::relax", symbols) == (cxxnames.QUALIFIED, sorted([RELAX, RELAX_W]))
    # the C function named exactly so wins over the C++ overload of the same name
    assert cxxnames.best_matches("smooth", symbols) == (cxxnames.EXACT, ["smooth"])
    assert cxxnames.best_matches("applyStress", symbols) == (0, [])
    # a function template's return type may be left out
    assert cxxnames.match_level("foo<int>(int)", "_Z3fooIiEvT_") == cxxnames.DEMANGLED


SOLVER_H = r"""
#include <vector>
class Solver {
public:
    explicit Solver(double k) : k_(k) {}
    void applyStress(std::vector<double>& field, int sweeps);
    double relax(std::vector<double>& field);
    double relax(std::vector<double>& field, double weight);
private:
    double k_;
};
extern "C" void smooth(double *v, int n);
void smooth(std::vector<double>& v);
"""

SOLVER_CPP = r"""
#include "solver.h"
void Solver::applyStress(std::vector<double>& field, int sweeps) {
    for (int s = 0; s < sweeps; s++)
        for (std::size_t i = 1; i + 1 < field.size(); i++)
            field[i] += k_ * (field[i - 1] - 2 * field[i] + field[i + 1]);
}
double Solver::relax(std::vector<double>& field) { return relax(field, 0.5); }
double Solver::relax(std::vector<double>& field, double weight) {
    double change = 0;
    for (std::size_t i = 1; i + 1 < field.size(); i++) {
        double next = (1 - weight) * field[i] + weight * 0.5 * (field[i - 1] + field[i + 1]);
        change += next > field[i] ? next - field[i] : field[i] - next;
        field[i] = next;
    }
    return change;
}
extern "C" void smooth(double *v, int n) { for (int i = 1; i < n; i++) v[i] = 0.5 * (v[i] + v[i - 1]); }
void smooth(std::vector<double>& v) { smooth(v.data(), (int)v.size()); }
"""

MAIN_CPP = r"""
#include <cstdio>
#include <vector>
#include "solver.h"
int main() {
    std::vector<double> field(512);
    for (std::size_t i = 0; i < field.size(); i++) field[i] = (i % 7) * 0.25;
    Solver solver(0.2);
    solver.applyStress(field, 4);
    double change = solver.relax(field) + solver.relax(field, 0.8);
    smooth(field);
    std::printf("%.6f\n", change + field[100]);
    return 0;
}
"""

MAKEFILE = (
    "CXX ?= clang++\n"
    "solver_app: main.o solver.o\n\t$(CXX) -O2 -o solver_app main.o solver.o\n"
    "%.o: %.cpp solver.h\n\t$(CXX) -O2 -c $< -o $@\n"
)


def _solver_tree(path):
    path.mkdir()
    (path / "solver.h").write_text(SOLVER_H)
    (path / "solver.cpp").write_text(SOLVER_CPP)
    (path / "main.cpp").write_text(MAIN_CPP)
    (path / "Makefile").write_text(MAKEFILE)
    return path


def record_solver(src, ws, *kernels):
    argv = ["record", "--source", src, "--run", "./solver_app", "--build", 'make CXX="$R3_CXX"']
    for k in kernels:
        argv += ["--kernel", k]
    return r3_subprocess(*argv, "--workspace", ws)  # the workspace may follow the command


@pytest.fixture(scope="module")
def solver(tmp_path_factory, clang):
    """A C++ app recorded with its kernels named three ways; (workspace, r3 record's output)."""
    src = _solver_tree(tmp_path_factory.mktemp("solver") / "src")
    ws = str(tmp_path_factory.mktemp("solver-ws"))
    proc = record_solver(
        src,
        ws,
        "Solver::applyStress",  # qualified
        "Solver::relax(std::vector<double>&)",  # tidy demangled
        "Solver::relax(std::vector<double, std::allocator<double> >&, double)",  # demangled
        "smooth",
    )  # the C function
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return ws, proc.stdout


def test_record_takes_demangled_and_qualified_names(solver):
    ws, record_out = solver
    assert sorted(c.kernel for c in list_captures(Workspace(ws))) == sorted([APPLY, RELAX, RELAX_W, "smooth"])
    # "smooth" is the C function: the C++ overload sharing its name was profiled, not captured
    row = next(l for l in record_out.splitlines() if l.startswith("smooth(std::vector<double>&)"))
    assert row.split()[-1] == "-"


def test_tables_show_demangled_names_and_json_keeps_both(solver, capsys):
    ws, record_out = solver
    assert "Solver::applyStress(std::vector<double>&, int)" in record_out  # r3 record's hotness table
    assert r3("kernels", "--workspace", ws) == 0
    table = capsys.readouterr().out
    for name in (
        "Solver::applyStress(std::vector<double>&, int)",
        "Solver::relax(std::vector<double>&)",
        "Solver::relax(std::vector<double>&, double)",
        "smooth",
    ):
        assert name in table
    assert "_ZN6Solver" not in table
    assert r3("kernels", "--workspace", ws, "--json") == 0
    entries = {e["kernel"]: e for e in json.loads(capsys.readouterr().out)}
    assert entries[APPLY]["kernel_demangled"] == cxxnames.demangle(APPLY)
    assert entries["smooth"]["kernel_demangled"] == "smooth"


def test_replay_finds_a_kernel_by_any_of_its_names(solver, capsys):
    ws, _ = solver
    want = resolve(Workspace(ws), APPLY)
    for ref in ("Solver::applyStress", "Solver::applyStress(std::vector<double>&, int)", cxxnames.demangle(APPLY)):
        assert resolve(Workspace(ws), ref) == want
    assert r3("replay", "Solver::applyStress", "--repeat", 1, "--json", "--workspace", ws) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kernel"] == APPLY and out["kernel_demangled"] == cxxnames.demangle(APPLY)
    assert out["verified"] is True
    assert r3("replay", "Solver::applyStress", "--repeat", 1, "--workspace", ws) == 0
    assert capsys.readouterr().out.startswith("Solver::applyStress(std::vector<double>&, int) (")


def test_a_name_shared_by_overloads_is_one_clear_error(solver, tmp_path):
    ws, _ = solver
    with pytest.raises(CaptureError, match="'Solver::relax' is ambiguous") as err:
        resolve(Workspace(ws), "Solver::relax")
    # each candidate by capture id and readable name
    assert "(Solver::relax(std::vector<double>&))" in str(err.value)
    assert "(Solver::relax(std::vector<double>&, double))" in str(err.value)
    proc = r3_subprocess("replay", "Solver::relax", "--workspace", ws)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "ambiguous" in proc.stderr
    # and in r3 record, before the application runs
    src = _solver_tree(tmp_path / "src")
    proc = record_solver(src, str(tmp_path / "ws"), "Solver::relax")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "ambiguous" in proc.stderr and RELAX in proc.stderr and RELAX_W in proc.stderr
    assert "Traceback" not in proc.stderr and not list_captures(Workspace(str(tmp_path / "ws")))

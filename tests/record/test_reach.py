"""Globals a kernel reaches only through a function of another unit (``record.reach``).

SNAP's sweep calls into a unit that reads a module variable, Nekbone's dot products call
one that reads a COMMON block: the kernel's own unit names neither global. The link of
r3-record names them for the runtime, which captures them with the kernel's own, and the
kernel replays verified. Both programs change the global between calls (through a setter
of its own unit), so only a value recorded at the call replays right.
"""

import glob
import json
import os

import pytest

from spack_r3.capture import list_captures
from spack_r3.record.reach import load_units, reached
from spack_r3.workspace import Workspace

from test_record_replay import source_tree
from r3cli import flags, r3, r3_output

C_FILES = {
    "kernel.c": r"""
#include <stdio.h>
#include <stdlib.h>
void scale(double *x, long n);
void set_factor(double f);
void sweep(double *x, long n) {
  for (int r = 0; r < 3; r++) scale(x, n);
}
int main(void) {
  long n = 50000;
  double *x = malloc(n * sizeof *x), s = 0;
  for (long i = 0; i < n; i++) x[i] = 1 + i % 5;
  for (int step = 0; step < 6; step++) {
    set_factor(0.9 + 0.05 * step);
    sweep(x, n);
  }
  for (long i = 0; i < n; i++) s += x[i];
  printf("%.6f\n", s);
  return 0;
}
""",
    "scale.c": r"""
double factor = 1.0; /* another unit's globals: what sweep reaches through scale() */
long scaled;
void set_factor(double f) { factor = f; }
void scale(double *x, long n) {
  for (long i = 0; i < n; i++) x[i] = x[i] * factor + 0.5;
  scaled += n;
}
""",
    "Makefile": "prog: kernel.o scale.o\n\t$(CC) -o $@ kernel.o scale.o\n%.o: %.c\n\t$(CC) -O2 -c $<\n",
}

F_FILES = {
    "plib.f90": """module plib
  implicit none
  real(8) :: w = 1.0d0
  integer :: nsweeps = 0
contains
  subroutine set_w(v)
    real(8), intent(in) :: v
    w = v
  end subroutine
end module
""",
    "helper.f90": """subroutine helper(x, n)
  use plib
  implicit none
  integer, intent(in) :: n
  real(8), intent(inout) :: x(n)
  x = x * w + 0.5d0
  nsweeps = nsweeps + 1
end subroutine
""",
    "sweep.f90": """subroutine sweep(x, n)
  implicit none
  integer, intent(in) :: n
  real(8), intent(inout) :: x(n)
  integer :: r
  do r = 1, 3
    call helper(x, n)
  end do
end subroutine
""",
    "main.f90": """program main
  use plib
  implicit none
  integer, parameter :: n = 50000
  real(8), allocatable :: x(:)
  integer :: i, step
  allocate(x(n))
  do i = 1, n
    x(i) = 1 + mod(i, 5)
  end do
  do step = 0, 5
    call set_w(0.9d0 + 0.05d0 * step)
    call sweep(x, n)
  end do
  print '(f20.6)', sum(x)
end program
""",
    "Makefile": "OBJ = plib.o helper.o sweep.o main.o\nprog: $(OBJ)\n\t$(FC) -o $@ $(OBJ)\n"
    "%.o: %.f90\n\t$(FC) -O2 -c $<\n",
}


def _record(tmp_path_factory, name, files):
    src = source_tree(tmp_path_factory, name, files)
    ws = str(tmp_path_factory.mktemp(name + "-ws"))
    assert r3("--workspace", ws, "record", *flags(source=src, run="./prog", kernel="sweep")) == 0
    return ws


@pytest.mark.parametrize("language", ["C", "Fortran"])
def test_a_global_reached_only_through_another_unit_is_recorded_and_replays(language, tmp_path_factory, clang, request):
    if language == "Fortran":
        request.getfixturevalue("flang")
    ws = _record(tmp_path_factory, "reach-" + language, C_FILES if language == "C" else F_FILES)
    [cap] = [c for c in list_captures(Workspace(ws)) if c.kernel.startswith("sweep")]
    names = {g["name"] for g in cap.globals}
    want = {"factor", "scaled"} if language == "C" else {"_QMplibEw", "_QMplibEnsweeps"}
    assert want <= names, cap.globals
    # the kernel's own unit named none of them: the link's table did
    [record_dir] = glob.glob(os.path.join(ws, "runs", "*", "record"))
    assert {(cap.kernel, n) for n in want} <= {(r.kernel, r.name) for r in reached(load_units(record_dir))}
    rc, out, err = r3_output("--workspace", ws, "replay", cap.id, "--repeat", "2", "--json")
    assert rc == 0 and json.loads(out)["verified"] is True, out + err

"""``r3-spack-cc`` / ``r3-spack-cxx`` / ``r3-spack-fc`` / ``r3-spack-f77``: a launcher
behind Spack's compiler wrapper.

Spack's wrapper runs ``$SPACK_CC`` with the final command line (include paths, target
flags and all); a recording or tuned package points ``SPACK_CC``/``SPACK_CXX`` (and ``SPACK_FC``/``SPACK_F77``)
here and says which launcher (``R3_SPACK_LAUNCHER``: record or apply) runs in front of which
real compiler (``R3_REAL_CC``/``R3_REAL_CXX``/``R3_REAL_FC``/``R3_REAL_F77``). Behind the wrapper, one mechanism serves every
build system (CMake, Autotools, Make), and the launcher sees what the compiler sees.
"""

import os
import sys


def _launch(real_var):
    real = os.environ.get(real_var)
    if not real:
        print(
            "r3-spack: %s is not set (this launcher runs inside a Spack build of an r3 package)" % real_var,
            file=sys.stderr,
        )
        return 2
    argv = [real] + sys.argv[1:]
    which = os.environ.get("R3_SPACK_LAUNCHER", "")
    if which == "record":
        from ..record.launcher import launch
    elif which == "apply":
        from ..emit.apply import launch
    else:
        os.execv(real, argv)
    return launch(argv)


def cc_main():
    sys.exit(_launch("R3_REAL_CC"))


def cxx_main():
    sys.exit(_launch("R3_REAL_CXX"))


def fc_main():
    sys.exit(_launch("R3_REAL_FC"))


def f77_main():
    sys.exit(_launch("R3_REAL_F77"))

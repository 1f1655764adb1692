# Demo application for spack-r3 (record / replay / remix of hot kernels).
import os

from spack.package import *


class R3Nbody(MakefilePackage):
    """All-pairs gravitational n-body demo with softening and a leapfrog
    integrator (hot kernel compute_forces) that checks energy conservation."""

    homepage = "https://example.org/spack-r3/r3-nbody"
    url = "file://" + os.path.join(os.path.dirname(__file__), "nbody-1.0.tar.gz")

    version("1.0", sha256="bbabf332658f7baef1615e71e31c247400f6b5f0e41036169bea31720f990844")

    variant("openmp", default=True, description="Parallelize the kernels with OpenMP")

    depends_on("c", type="build")

    @property
    def build_targets(self):
        return ["CC=" + spack_cc, "OPENMP=" + ("1" if self.spec.satisfies("+openmp") else "0")]

    @property
    def install_targets(self):
        return self.build_targets + ["PREFIX=" + self.prefix, "install"]

# Demo application for spack-r3 (record / replay / remix of hot kernels).
import os

from spack.package import *


class R3Heat(MakefilePackage):
    """2-D heat equation demo: an explicit 5-point Jacobi stencil (hot kernel
    jacobi_step) that checks symmetry, the maximum principle and residual decay."""

    homepage = "https://example.org/spack-r3/r3-heat"
    url = "file://" + os.path.join(os.path.dirname(__file__), "heat-1.0.tar.gz")

    version("1.0", sha256="65c847e4fa19d0ce536344b9d10c0936dc59c33db889358011ea6d94bded3427")

    variant("openmp", default=True, description="Parallelize the kernels with OpenMP")

    depends_on("c", type="build")

    @property
    def build_targets(self):
        return ["CC=" + spack_cc, "OPENMP=" + ("1" if self.spec.satisfies("+openmp") else "0")]

    @property
    def install_targets(self):
        return self.build_targets + ["PREFIX=" + self.prefix, "install"]

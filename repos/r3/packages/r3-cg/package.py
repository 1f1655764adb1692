# Demo application for spack-r3 (record / replay / remix of hot kernels).
import os

from spack.package import *


class R3Cg(MakefilePackage):
    """Conjugate gradient demo on the 2-D Poisson matrix in CSR (hot kernels spmv,
    dot, axpy) that checks the true residual of its solution."""

    homepage = "https://example.org/spack-r3/r3-cg"
    url = "file://" + os.path.join(os.path.dirname(__file__), "cg-1.0.tar.gz")

    version("1.0", sha256="e6373798af431f46b16e97804ccdc7523264296faa0bd17c30aeeaa511ec35d0")

    variant("openmp", default=True, description="Parallelize the kernels with OpenMP")

    depends_on("c", type="build")

    @property
    def build_targets(self):
        return ["CC=" + spack_cc, "OPENMP=" + ("1" if self.spec.satisfies("+openmp") else "0")]

    @property
    def install_targets(self):
        return self.build_targets + ["PREFIX=" + self.prefix, "install"]

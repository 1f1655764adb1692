# Demo application for spack-r3 (record / replay / remix of hot kernels).
import os

from spack.package import *


class R3Dense(MakefilePackage):
    """Dense loop-nest demo: a chain of naive triple-loop matrix products and a
    covariance matrix (hot kernels matmul and covariance, where loop transformations
    such as Polly's matter) with order-independent self-checks."""

    homepage = "https://example.org/spack-r3/r3-dense"
    url = "file://" + os.path.join(os.path.dirname(__file__), "dense-1.0.tar.gz")

    version("1.0", sha256="efe3a0efe4a54ff7a33a278ab2c70c16f32a348d3b8e13e13286db205a0dacfa")

    depends_on("c", type="build")

    @property
    def build_targets(self):
        return ["CC=" + spack_cc]

    @property
    def install_targets(self):
        return self.build_targets + ["PREFIX=" + self.prefix, "install"]

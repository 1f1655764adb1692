# Demo application for spack-r3: heat with its kernels as OpenMP target regions.
import os

from spack.package import *


class R3HeatOffload(MakefilePackage):
    """2-D heat equation demo with its kernels (the Jacobi step and the residual) as OpenMP
    target regions: clang's offload compile for -fopenmp-targets (default the host plugin's
    x86_64-pc-linux-gnu, which runs the regions on the CPU as device kernels). Run it with
    libomptarget on the library path (LD_LIBRARY_PATH=$(llvm-config --libdir))."""

    homepage = "https://example.org/spack-r3/r3-heat-offload"
    url = "file://" + os.path.join(os.path.dirname(__file__), "heat-offload-1.0.tar.gz")

    version("1.0", sha256="e195ab727b412e92e476c4eb61fcb7e76263f9c3f4fbd740e437ffcc3de55151")

    variant("offload_targets", default="x86_64-pc-linux-gnu",
            description="the -fopenmp-targets of the offload compile")

    depends_on("c", type="build")
    requires("%clang", msg="the offload compile is clang's (-fopenmp-targets)")

    @property
    def build_targets(self):
        return ["CC=" + spack_cc, "OFFLOAD_TARGETS=" + self.spec.variants["offload_targets"].value]

    @property
    def install_targets(self):
        return self.build_targets + ["PREFIX=" + self.prefix, "install"]

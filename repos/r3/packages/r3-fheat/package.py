# Demo application for spack-r3: Fortran kernels, and C and Fortran calling each other.
import os

from spack.package import *


class R3Fheat(MakefilePackage):
    """2-D heat diffusion in Fortran: module allocatables (diffuse), an assumed-shape
    kernel (smooth), fixed-form FORTRAN 77 with COMMON and SAVE data (relax), a C norm
    the Fortran program calls and a C driver of a Fortran kernel (cdrive)."""

    homepage = "https://example.org/spack-r3/r3-fheat"
    url = "file://" + os.path.join(os.path.dirname(__file__), "fheat-1.0.tar.gz")

    version("1.0", sha256="f16cb3abe8a7a4674499dd9bb1398bdd9b6d8e6548a28dba3ea45fdd5a8084bd")

    depends_on("c", type="build")
    depends_on("fortran", type="build")

    @property
    def build_targets(self):
        return ["FC=" + spack_fc, "CC=" + spack_cc]

    @property
    def install_targets(self):
        return self.build_targets + ["PREFIX=" + self.prefix, "install"]

    def test_fheat(self):
        """diffuses heat and checks the maximum principle"""
        exe = which(self.prefix.bin.fheat)
        out = exe("64", "50", output=str.split, error=str.split)
        assert "check passed" in out

    def test_cdrive(self):
        """a C driver sums through a Fortran kernel"""
        exe = which(self.prefix.bin.cdrive)
        out = exe("512", "10", output=str.split, error=str.split)
        assert "check passed" in out

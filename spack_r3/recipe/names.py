"""Map a project's dependency names to Spack package names, with the package index at hand.

``find_package(ZLIB)`` -> ``zlib-api`` (a virtual), ``pkg_check_modules(... fftw3)`` ->
``fftw-api``, ``-lopenblas`` -> ``blas``, ``dependency('r3tvec')`` -> ``r3tvec`` when some
configured repository has it. A known table first (names that differ), then the index:
exact name, lower-case, ``lib`` prefix added or removed, ``_`` -> ``-``, ``py-`` for Python;
for a library also without an HDF5 flavour or version (``siloh5`` -> ``silo``), for a header
also its directory (``silo/silo.h`` -> ``silo``). Only a name some configured repository has
(``index.has``) is taken.
"""

import re

# CMake find_package names whose Spack name differs from the lower-cased name.
CMAKE = {
    "ZLIB": "zlib-api",
    "MPI": "mpi",
    "BLAS": "blas",
    "LAPACK": "lapack",
    "OpenMP": None,
    "Threads": None,
    "PkgConfig": "pkgconfig",
    "PNG": "libpng",
    "JPEG": "jpeg",
    "CURL": "curl",
    "OpenSSL": "openssl",
    "BZip2": "bzip2",
    "LibXml2": "libxml2",
    "Python": "python",
    "Python3": "python",
    "PythonInterp": "python",
    "PythonLibs": "python",
    "CUDA": "cuda",
    "CUDAToolkit": "cuda",
    "FFTW": "fftw-api",
    "FFTW3": "fftw-api",
    "Eigen3": "eigen",
    "TBB": "tbb",
    "SQLite3": "sqlite",
    "EXPAT": "expat",
    "LibLZMA": "xz",
    "zstd": "zstd",
    "GTest": "googletest",
    "nlohmann_json": "nlohmann-json",
    "HDF5": "hdf5",
    "NetCDF": "netcdf-c",
    "Boost": "boost",
    "GSL": "gsl",
    "LibFFI": "libffi",
    "Iconv": "iconv",
    "Intl": "gettext",
    "OpenCL": "opencl",
    "Kokkos": "kokkos",
    "Catch2": "catch2",
    "benchmark": "benchmark",
    "Doxygen": "doxygen",
    "BISON": "bison",
    "FLEX": "flex",
    "SWIG": "swig",
    "Perl": "perl",
    "Git": None,
    "GMP": "gmp",
    "MPFR": "mpfr",
    "METIS": "metis",
    "ParMETIS": "parmetis",
    "ScaLAPACK": "scalapack",
    "Protobuf": "protobuf",
    "LLVM": "llvm",
    "Clang": "llvm",
    "yaml-cpp": "yaml-cpp",
    "fmt": "fmt",
    "spdlog": "spdlog",
    "Libunwind": "libunwind",
    "CURSES": "ncurses",
    "Curses": "ncurses",
    "X11": "libx11",
    "OpenGL": "gl",
    "GLUT": "glut",
}

# pkg-config module names that differ.
PKGCONFIG = {
    "zlib": "zlib-api",
    "libpng": "libpng",
    "libpng16": "libpng",
    "libxml-2.0": "libxml2",
    "fftw3": "fftw-api",
    "fftw3f": "fftw-api",
    "libcurl": "curl",
    "ompi": "mpi",
    "mpich": "mpi",
    "blas": "blas",
    "cblas": "blas",
    "openblas": "blas",
    "lapack": "lapack",
    "glib-2.0": "glib",
    "gobject-2.0": "glib",
    "sqlite3": "sqlite",
    "libzstd": "zstd",
    "liblzma": "xz",
    "libcrypto": "openssl",
    "libssl": "openssl",
    "hdf5": "hdf5",
    "netcdf": "netcdf-c",
    "bzip2": "bzip2",
    "libffi": "libffi",
    "expat": "expat",
    "gsl": "gsl",
    "ncurses": "ncurses",
    "libjpeg": "jpeg",
    "hwloc": "hwloc",
    "libunwind": "libunwind",
    "eigen3": "eigen",
}

# -l library names that differ.
LIBRARY = {
    "z": "zlib-api",
    "png": "libpng",
    "png16": "libpng",
    "bz2": "bzip2",
    "blas": "blas",
    "openblas": "blas",
    "cblas": "blas",
    "lapack": "lapack",
    "lapacke": "lapack",
    "mpi": "mpi",
    "fftw3": "fftw-api",
    "fftw3f": "fftw-api",
    "gsl": "gsl",
    "gslcblas": "gsl",
    "curl": "curl",
    "xml2": "libxml2",
    "ssl": "openssl",
    "crypto": "openssl",
    "sqlite3": "sqlite",
    "lzma": "xz",
    "zstd": "zstd",
    "gmp": "gmp",
    "mpfr": "mpfr",
    "hdf5": "hdf5",
    "netcdf": "netcdf-c",
    "ncurses": "ncurses",
    "readline": "readline",
    "jpeg": "jpeg",
    "ffi": "libffi",
    "expat": "expat",
    "hwloc": "hwloc",
    "numa": "numactl",
    "unwind": "libunwind",
    "uuid": "uuid",
}

# Names for headers seen in "fatal error: X.h: No such file or directory".
HEADER = {
    "zlib.h": "zlib-api",
    "png.h": "libpng",
    "bzlib.h": "bzip2",
    "mpi.h": "mpi",
    "fftw3.h": "fftw-api",
    "cblas.h": "blas",
    "lapacke.h": "lapack",
    "hdf5.h": "hdf5",
    "netcdf.h": "netcdf-c",
    "curl/curl.h": "curl",
    "openssl/ssl.h": "openssl",
    "sqlite3.h": "sqlite",
    "lzma.h": "xz",
    "zstd.h": "zstd",
    "gmp.h": "gmp",
    "expat.h": "expat",
    "ffi.h": "libffi",
    "hwloc.h": "hwloc",
    "jpeglib.h": "jpeg",
    "gsl/gsl_math.h": "gsl",
    "omp.h": None,
    "pthread.h": None,
    "math.h": None,
}

TOOLS = {
    "pkg-config": "pkgconfig",
    "pkgconf": "pkgconfig",
    "PkgConfig": "pkgconfig",
    # what autoreconf runs for some macros (AM_GNU_GETTEXT, IT_PROG_INTLTOOL, GTK_DOC_CHECK)
    "autopoint": "gettext",
    "gettextize": "gettext",
    "intltoolize": "intltool",
    "gtkdocize": "gtk-doc",
}

TABLES = {"cmake": CMAKE, "pkgconfig": PKGCONFIG, "library": LIBRARY, "header": HEADER, "tool": TOOLS}
_MISSING = object()


def candidates(name, kind):
    """Spack names to try for a project's dependency name, best first."""
    low = name.lower()
    out = []
    if kind == "python":
        base = re.sub(r"[._]+", "-", low)
        return ["py-" + base, base]
    if kind == "header":
        base = re.sub(r"\.h(pp)?$", "", low.split("/")[-1])
        out = [base, "lib" + base]
        if "/" in low:  # the directory: silo/silo.h -> silo, eigen3/Eigen/Core -> eigen
            top = low.split("/")[0]
            out += [top, re.sub(r"-?\d+(\.\d+)*$", "", top)]
        return out
    out += [name, low, low.replace("_", "-")]
    if low.startswith("lib"):
        out.append(low[3:])
    else:
        out.append("lib" + low)
    out.append(re.sub(r"-?\d+(\.\d+)*$", "", low))  # glib-2.0 -> glib, fftw3 -> fftw
    if kind == "library":
        stem = low[3:] if low.startswith("lib") else low
        stem = re.sub(r"[-_]?h5$", "", stem)  # the HDF5 flavour: siloh5 -> silo
        out.append(stem)
        out.append(re.sub(r"[-_.]?\d+(\.\d+)*$", "", stem))  # version digits: silo4.11 -> silo
    seen, uniq = set(), []
    for c in out:
        if c and c not in seen:
            seen.add(c)
            uniq.append(c)
    return uniq


def resolve_name(name, kind, index):
    """The Spack package or virtual for ``name``, or None (unknown) -- and whether it is a
    system library that needs no dependency at all."""
    table = TABLES.get(kind, {})
    hit = table.get(name, _MISSING)
    if hit is _MISSING and kind in ("cmake", "tool"):
        hit = CMAKE.get(name, TOOLS.get(name, _MISSING))
    if hit is None:
        return None, True
    if hit is not _MISSING and (index is None or index.has(hit)):
        return hit, False
    for cand in candidates(name, kind):
        if index is not None and index.has(cand):
            return cand, False
    return None, False


def resolve(analysis, index):
    """Fill ``spack`` (and ``system``) on every dependency of an analysis."""
    for d in analysis.dependencies:
        if d.system:
            continue
        if d.name.lower() in (analysis.name.lower(), analysis.name.lower().replace("-", "")):
            d.system = True  # the project itself (its own library or config file)
            continue
        for name in [d.name] + list(d.alternatives):
            spack_name, system = resolve_name(name, d.kind, index)
            if spack_name or system:
                break
        if system:
            d.system = True
            continue
        if spack_name == analysis.name:
            d.system = True  # the project finds itself (exported targets): not a dependency
            continue
        d.spack = spack_name
        if spack_name == "pkgconfig":
            d.type = ["build"]
    # a pkg-config lookup needs the tool at build time
    if any(d.kind == "pkgconfig" and d.spack for d in analysis.dependencies) and not any(
        d.spack == "pkgconfig" for d in analysis.dependencies
    ):
        from .analyze import Dependency

        analysis.dependencies.append(
            Dependency("pkg-config", "tool", "pkg-config lookups above", ["build"], spack="pkgconfig")
        )
    return analysis

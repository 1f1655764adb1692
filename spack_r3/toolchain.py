"""Find the clang that record builds need (bitcode before optimization), and the
LLVM tools of the same version that an opt stage (Polly) runs."""

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache

from .errors import ToolchainError

MIN_CLANG = 15
# Newest first: the newest clang usually matches llvmlite's LLVM best.
CANDIDATES = ["clang"] + ["clang-%d" % v for v in range(22, MIN_CLANG - 1, -1)]


def _major_version(path, pattern):
    """The major version ``path --version`` prints after ``pattern``, or None."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(pattern + r" (\d+)", out)
    return int(m.group(1)) if m else None


def clang_version(path):
    """Major version of the clang at ``path``, or None if it is not clang."""
    return _major_version(path, "clang version")


@lru_cache(maxsize=None)
def find_clang():
    """Absolute path of a clang >= MIN_CLANG: ``R3_CLANG`` first, then PATH."""
    explicit = os.environ.get("R3_CLANG")
    names = [explicit] if explicit else CANDIDATES
    seen = []
    for name in names:
        path = shutil.which(name)
        if not path:
            continue
        version = clang_version(path)
        seen.append("%s (%s)" % (path, version))
        if version and version >= MIN_CLANG:
            return path
    hint = "set R3_CLANG or install it (Debian: apt-get install clang-19 libomp-19-dev)"
    if explicit:
        raise ToolchainError("R3_CLANG=%s is not a clang >= %d; %s" % (explicit, MIN_CLANG, hint))
    found = ("; found only " + ", ".join(seen)) if seen else ""
    raise ToolchainError("no clang >= %d found for recording%s; %s" % (MIN_CLANG, found, hint))


@lru_cache(maxsize=None)
def clang_of_version(recorded, version):
    """A clang of major ``version``: ``recorded`` (the compiler a build ran) where it still
    runs here, else ``clang-N`` on PATH, else LLVM's own bin directory; None if none."""
    for path in (
        shutil.which(recorded) if recorded else None,
        shutil.which("clang-%d" % version),
        "/usr/lib/llvm-%d/bin/clang" % version,
    ):
        if path and os.access(path, os.X_OK) and clang_version(path) == version:
            return path
    return None


def clang_release(clang):
    """The full version ``clang -dumpversion`` prints (``19.1.7``), or None."""
    try:
        out = subprocess.run([clang, "-dumpversion"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.strip() or None


def clangxx_beside(clang):
    """The ``clang++`` installed beside ``clang`` (``clang-19`` -> ``clang++-19``), or None."""
    cxx = os.path.join(os.path.dirname(clang), os.path.basename(clang).replace("clang", "clang++", 1))
    return cxx if os.access(cxx, os.X_OK) else None


def flang_beside(clang):
    """The flang of ``clang``'s version (``flang-new-19`` for ``clang-19``), or None."""
    from .fortran import flang_of_version

    version = clang_major(clang)
    return flang_of_version(None, version) if version else None


def clang_libdir(clang):
    """The LLVM library directory of ``clang`` (where its libomp.so lives)."""
    out = subprocess.run([clang, "-print-resource-dir"], capture_output=True, text=True).stdout.strip()
    # resource dir is <prefix>/lib/clang/<ver>
    return os.path.normpath(os.path.join(out, "..", ".."))


def find_libomp(clang=None):
    """Path of the LLVM OpenMP runtime matching ``clang``, or None."""
    dirs = []
    if os.environ.get("R3_LIBOMP"):
        return os.environ["R3_LIBOMP"]
    try:
        dirs.append(clang_libdir(clang or find_clang()))
    except ToolchainError:
        pass
    dirs += ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib"]
    for d in dirs:
        for name in ("libomp.so", "libomp.so.5"):
            p = os.path.join(d, name)
            if os.path.exists(p):
                return p
    return None


# The LLVM tools of an opt stage (Polly) before llvmlite's pipeline. They must read the
# record clang's bitcode (same LLVM or newer) and write bitcode llvmlite reads (its LLVM
# or older): the record clang's own version first.
LLVM_TOOLS = ("opt", "llvm-link", "llvm-dis")


@dataclass(frozen=True)
class LLVMTools:
    version: int
    opt: str
    link: str
    dis: str


def clang_major(clang):
    """Major version of a clang named by path or name (``clang-19``), or None."""
    if not clang:
        return None
    m = re.search(r"clang(?:\+\+)?-(\d+)$", os.path.basename(clang))
    if m:
        return int(m.group(1))
    path = shutil.which(clang)
    return clang_version(path) if path else None


def llvm_major(compiler):
    """The LLVM major version of a record compiler, clang or flang; None if neither."""
    from .fortran import flang_major, is_flang

    if not compiler:
        return None
    return flang_major(compiler) if is_flang(compiler) else clang_major(compiler)


def before_llvm_passes(compiler):
    """The flags that make ``compiler`` write its IR before LLVM optimizes it: clang's
    ``-disable-llvm-passes``; flang's equivalent (``fortran.BITCODE_FLAGS``)."""
    from .fortran import BITCODE_FLAGS, is_flang

    return list(BITCODE_FLAGS) if is_flang(compiler) else ["-Xclang", "-disable-llvm-passes"]


def ir_input_flags(compiler):
    """What ``compiler`` needs to compile IR quietly (clang warns that flags went unused
    and that the module's target is overridden; flang refuses -W options)."""
    from .fortran import is_flang

    return [] if is_flang(compiler) else ["-Wno-unused-command-line-argument", "-Wno-override-module"]


def _tools_in(version, directory=None):
    """{tool: path} of one LLVM version: ``opt-N`` on PATH, LLVM's own bin directory,
    or (unversioned names) a tool reporting that version. ``directory``: only there."""
    found = {}
    for tool in LLVM_TOOLS:
        if directory:
            candidates = [os.path.join(directory, n) for n in ("%s-%d" % (tool, version), tool)]
        else:
            candidates = [shutil.which("%s-%d" % (tool, version)), os.path.join("/usr/lib/llvm-%d/bin" % version, tool)]
        for path in candidates:
            if path and os.path.isfile(path) and os.access(path, os.X_OK):
                found[tool] = path
                break
        else:
            path = None if directory else shutil.which(tool)
            if path and _major_version(path, "LLVM version") == version:
                found[tool] = path
    return found


@lru_cache(maxsize=None)
def _find_llvm_tools(version, newest, directory):
    own = _tools_in(version, directory)
    for v in range(version, newest + 1):
        have = own if v == version else _tools_in(v, directory)
        if len(have) == len(LLVM_TOOLS):
            return LLVMTools(v, have["opt"], have["llvm-link"], have["llvm-dis"])
    missing = ", ".join("%s-%d" % (t, version) for t in LLVM_TOOLS if t not in own)
    where = (" in R3_LLVM_TOOLS=%s" % directory) if directory else ""
    raise ToolchainError("not found%s: %s (Debian: apt-get install llvm-%d)" % (where, missing, version))


def find_llvm_tools(version=None, newest=None):
    """opt, llvm-link and llvm-dis of LLVM ``version`` (default: the record clang's),
    or of a newer LLVM up to ``newest``; ``R3_LLVM_TOOLS`` names a directory to take
    them from instead. Raises ToolchainError naming what is missing."""
    if version is None:
        version = clang_major(find_clang())
    return _find_llvm_tools(version, max(version, newest or version), os.environ.get("R3_LLVM_TOOLS") or None)


@lru_cache(maxsize=None)
def opt_has_polly(opt):
    """True when ``opt`` has Polly built in (Debian's opt-19 does)."""
    try:
        proc = subprocess.run([opt, "-polly", "-disable-output"], input=b"", capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


@lru_cache(maxsize=None)
def target_names(triple):
    """(CPU names, feature names) that LLVM knows for ``triple``, as ``llc -mcpu=help``
    of the record clang's LLVM lists them; None where there is no such llc (names then go
    unchecked, and LLVM ignores an unknown one with a warning)."""
    try:
        version = clang_major(find_clang())
    except ToolchainError:
        return None
    for llc in (shutil.which("llc-%s" % version), "/usr/lib/llvm-%s/bin/llc" % version):
        if llc and os.access(llc, os.X_OK):
            break
    else:
        return None
    try:
        out = subprocess.run(
            [llc, "-mtriple=" + triple, "-mcpu=help", "-mattr=help"],
            capture_output=True,
            text=True,
            timeout=30,
            input="",
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stdout + out.stderr
    if "Available features" not in text:
        return None
    cpus_part, features_part = text.split("Available features", 1)

    def names(part):
        return frozenset(re.findall(r"^\s+([\w.-]+)\s+- ", part, re.M))

    return names(cpus_part), names(features_part)


@lru_cache(maxsize=None)
def cpu_features(cpu, triple):
    """The target features (``+avx2,+fma,...``) LLVM gives ``cpu`` on ``triple``, as the
    record clang writes them on a function; "" where it cannot say. flang writes only
    ``target-cpu`` on its functions, so what its build fused is read from the CPU."""
    try:
        clang = find_clang()
    except ToolchainError:
        return ""
    arch = ["-march=" + cpu] if triple.split("-")[0] in ("x86_64", "i386", "i686") else ["-mcpu=" + cpu]
    try:
        out = subprocess.run(
            [clang, "--target=" + triple, *arch, "-S", "-emit-llvm", "-x", "c", "-", "-o", "-"],
            input="void f(void) {}\n",
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    m = re.search(r'"target-features"="([^"]*)"', out)
    return m.group(1) if m else ""

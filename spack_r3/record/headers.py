"""A unit's header closure: the non-system headers it includes, kept with its captures so a
source variant compiles where the application's tree is not (a Dask worker on a node that
does not mount it).

    paths = closure(compiler, flags, source_file, compile_dir)   # {absolute path: as clang named it}
    digests = keep(paths, capture_dir)                           # {absolute path: sha256}; files headers/SHA
    flags = overlay_flags(digests, capture_dir, compile_dir, scratch)   # for the variant's compile

The closure is clang's own dependency output (``-M``) of the unit's compile command, run in
its compile directory; headers under the compiler's and the system's include directories
are left out (every node has them). Each header is kept once by content (``headers/SHA``),
and a variant finds them through clang's ``-ivfsoverlay``: a generated overlay maps the
recorded absolute paths to the kept copies, so the compile command stays as recorded (its
relative ``-I`` resolve against the recorded compile directory, given to cc1 as its
working directory, which need not exist here).
"""

import functools
import json
import os
import shutil
import subprocess
import tempfile

from ..capture import HEADERS as FOLDER  # in a capture: headers/SHA256
from ..fileutil import sha256_file

TIMEOUT_S = 120
SYSTEM_DIRS = ("/usr/include", "/usr/local/include")


class ClosureError(Exception):
    """The unit's dependencies could not be listed (its compile command fails here)."""


def closure(compiler, flags, source_file, compile_dir, timeout=TIMEOUT_S):
    """The non-system headers the unit includes: {absolute, normalized path: the path as
    clang named it}. ClosureError with clang's first error when it cannot preprocess the unit."""
    with tempfile.TemporaryDirectory(prefix="r3-deps-") as tmp:
        deps = os.path.join(tmp, "unit.d")
        cmd = [compiler] + list(flags) + ["-M", "-MF", deps, "-MT", "unit", source_file, "-o", os.devnull]
        try:
            proc = subprocess.run(cmd, cwd=compile_dir, timeout=timeout, capture_output=True, text=True)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ClosureError(str(err))
        if proc.returncode != 0 or not os.path.isfile(deps):
            lines = proc.stderr.strip().splitlines()
            errors = [line for line in lines if "error:" in line] or lines[-1:]
            raise ClosureError(errors[0] if errors else "clang -M failed (%d)" % proc.returncode)
        with open(deps, errors="surrogateescape") as f:
            named = parse_deps(f.read())
    system = system_dirs(compiler, language(source_file))
    source = os.path.normpath(os.path.join(compile_dir, source_file))
    out = {}
    for name in named:
        path = os.path.normpath(os.path.join(compile_dir, name))
        if path == source or _under(os.path.realpath(path), system) or _under(path, system):
            continue
        out.setdefault(path, name)
    return out


def parse_deps(text):
    """The prerequisites of a make rule as clang writes it (``target: a b \\`` lines; a
    space in a name is ``\\ ``, a dollar ``$$``), in order, each once."""
    body = text.replace("\\\r\n", " ").replace("\\\n", " ")
    _, _, body = body.partition(": ")
    names, cur, i = [], [], 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body) and body[i + 1] in " #":
            cur.append(body[i + 1])
            i += 2
            continue
        if c == "$" and body[i + 1 : i + 2] == "$":
            cur.append("$")
            i += 2
            continue
        if c.isspace():
            if cur:
                names.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    if cur:
        names.append("".join(cur))
    return list(dict.fromkeys(names))


def language(source_file):
    ext = os.path.splitext(source_file)[1]
    return {".c": "c", ".cu": "cuda", ".hip": "hip", ".m": "objective-c"}.get(ext, "c++")


@functools.lru_cache(maxsize=None)
def system_dirs(compiler, lang):
    """The compiler's own include search list for ``lang`` (its builtin headers, the C++
    library's, the system's), real paths, with the usual system folders."""
    dirs = set(SYSTEM_DIRS)
    try:
        proc = subprocess.run(
            [compiler, "-x", lang, "-E", "-v", "-"],
            input="",
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        listing = proc.stderr.partition("#include <...> search starts here:")[2].partition("End of search list.")[0]
        dirs.update(line.strip().split(" (")[0] for line in listing.splitlines() if line.strip())
    except (OSError, subprocess.TimeoutExpired):
        pass
    return tuple(sorted({os.path.realpath(d) for d in dirs} | dirs))


def _under(path, dirs):
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def keep(paths, folder, like=None):
    """Copy each header of ``paths`` into ``folder/headers/SHA`` (one file per content: a
    header named twice is kept once); with ``like`` (another folder holding them), a copy
    already there is hard-linked instead. Returns {path: sha256}."""
    out = {}
    for path in paths:
        digest = sha256_file(path)
        out[path] = digest
        dest = os.path.join(folder, FOLDER, digest)
        if os.path.exists(dest):
            continue
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        have = os.path.join(like, FOLDER, digest) if like else None
        try:
            os.link(have, dest)
        except (OSError, TypeError):
            shutil.copyfile(path, dest)
    return out


def overlay(digests, folder):
    """A VFS overlay (clang's YAML; JSON is YAML) mapping each recorded path to its copy in
    ``folder/headers``; None when a copy is missing (then the tree itself is needed)."""
    roots = []
    for path, digest in sorted(digests.items()):
        copy = os.path.join(os.path.abspath(folder), FOLDER, digest)
        if not os.path.isfile(copy):
            return None
        roots.append({"name": path, "type": "file", "external-contents": copy})
    return json.dumps({"version": 0, "case-sensitive": True, "roots": roots}, indent=1)


def overlay_flags(digests, folder, compile_dir, scratch):
    """The flags that make the unit's headers found at their recorded paths from their
    copies in ``folder`` (the overlay is written in ``scratch``); [] when there are none."""
    text = overlay(digests, folder) if digests else None
    if text is None:
        return []
    path = os.path.join(scratch, "headers.yaml")
    with open(path, "w") as f:
        f.write(text)
    # (cc1's working directory only prefixes relative paths: the driver's would have to exist)
    return ["-ivfsoverlay", path, "-Xclang", "-working-directory", "-Xclang", compile_dir]

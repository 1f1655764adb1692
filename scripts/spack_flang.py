"""Give Spack's clang compilers their Fortran compiler: the flang of the same version.

``spack compiler find`` looks for a clang's Fortran compiler under the name ``flang``;
Debian installs it as ``flang-new-19``, so a clang entry gets ``fc: null`` and every
package that needs Fortran fails to concretize with ``%clang``. This sets ``fc`` and
``f77`` of each clang entry whose Fortran is missing, in the scope that holds it, with
Spack's own configuration code (``spack python``). Idempotent.

    python scripts/spack_flang.py SPACK_EXECUTABLE
"""

import os
import subprocess
import sys
import tempfile

FIX = r"""
import os, re, shutil
import spack.config
changed = []
for scope in spack.config.CONFIG.writable_scopes:
    entries = spack.config.CONFIG.get_config("compilers", scope=scope.name)
    touched = False
    for entry in entries or []:
        c = entry.get("compiler", {})
        m = re.match(r"clang@=?(\d+)", str(c.get("spec", "")))
        paths = c.get("paths", {})
        if not m or paths.get("fc"):
            continue
        v = m.group(1)
        flang = shutil.which("flang-new-" + v) or ("/usr/lib/llvm-%s/bin/flang-new" % v)
        if not os.access(flang, os.X_OK):
            continue
        paths["fc"] = paths["f77"] = flang
        touched = True
        changed.append("%s: %s" % (c["spec"], flang))
    if touched:
        spack.config.CONFIG.update_config("compilers", entries, scope=scope.name)
print("\n".join(changed))
"""


def main():
    spack = sys.argv[1]
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(FIX)  # (spack python -c takes one statement)
    try:
        proc = subprocess.run([spack, "python", f.name], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if proc.returncode != 0:
        print(
            "spack_flang: could not set clang's Fortran compiler: %s" % (proc.stderr.strip().splitlines() or ["?"])[-1]
        )
        return 0  # the Fortran tests through Spack will say what is missing
    for line in proc.stdout.split("\n"):
        if line.strip():
            print("==> Spack's %s gets Fortran" % line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

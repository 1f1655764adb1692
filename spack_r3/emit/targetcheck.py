"""The run-time check of a tuned build's target: a binary tuned for one microarchitecture
refuses, with one line, to run on a CPU that lacks what its tuned code was built for,
instead of dying on an illegal instruction somewhere inside a kernel.

r3-apply links this check into each tuned unit (``build_unit``): a constructor, compiled
for the baseline of the architecture (so the check itself runs anywhere), that asks the
CPU (``__builtin_cpu_supports``) for each feature the unit's tuned kernels were compiled
with. The features are what clang predefines for that target (``__AVX2__`` ...), so
they are the compiler's own view of the cpu and feature string, not a table of ours.

    R3_TARGET_CHECK=warn   print the line and run anyway (a CPU that misreports itself)
    R3_TARGET_CHECK=off    no check
    R3_TARGET_CHECK_LACKS=avx2,fma   act as if the CPU lacked these (to see the refusal
                                     on a machine that has everything)

x86 only: elsewhere the names ``__builtin_cpu_supports`` takes differ, and no check is
linked (the target is still Spack's to match at install).
"""

import os
import platform
import subprocess

# clang's predefined macro for a feature -> its name for __builtin_cpu_supports: the
# features a tuned loop's code may be made of, each known to clang 19's builtin and to the
# CPU model of libgcc 12 and compiler-rt (a feature the runtime does not know reads as
# missing: one outside both is left out rather than refusing a CPU that has it).
FEATURE_MACROS = (
    ("__SSE3__", "sse3"),
    ("__SSSE3__", "ssse3"),
    ("__SSE4_1__", "sse4.1"),
    ("__SSE4_2__", "sse4.2"),
    ("__POPCNT__", "popcnt"),
    ("__AVX__", "avx"),
    ("__AVX2__", "avx2"),
    ("__FMA__", "fma"),
    ("__BMI__", "bmi"),
    ("__BMI2__", "bmi2"),
    ("__AVX512F__", "avx512f"),
    ("__AVX512CD__", "avx512cd"),
    ("__AVX512DQ__", "avx512dq"),
    ("__AVX512BW__", "avx512bw"),
    ("__AVX512VL__", "avx512vl"),
    ("__AVX512IFMA__", "avx512ifma"),
    ("__AVX512VBMI__", "avx512vbmi"),
    ("__AVX512VBMI2__", "avx512vbmi2"),
    ("__AVX512VNNI__", "avx512vnni"),
    ("__AVX512BITALG__", "avx512bitalg"),
    ("__AVX512VPOPCNTDQ__", "avx512vpopcntdq"),
    ("__AVX512BF16__", "avx512bf16"),
    ("__AVX512FP16__", "avx512fp16"),
    ("__AVX512VP2INTERSECT__", "avx512vp2intersect"),
    ("__AVXVNNI__", "avxvnni"),
    ("__F16C__", "f16c"),
    ("__MOVBE__", "movbe"),
    ("__PCLMUL__", "pclmul"),
    ("__AES__", "aes"),
    ("__VAES__", "vaes"),
    ("__VPCLMULQDQ__", "vpclmulqdq"),
    ("__GFNI__", "gfni"),
    ("__AMX_TILE__", "amx-tile"),
    ("__AMX_BF16__", "amx-bf16"),
    ("__AMX_INT8__", "amx-int8"),
)


def applies(triple=None):
    """Whether a check is linked for code of ``triple`` (default: this machine's)."""
    arch = (triple or platform.machine()).split("-")[0]
    return arch in ("x86_64", "amd64", "i686", "i386")


def required_features(compiler, cpu, features):
    """The features (``__builtin_cpu_supports`` names) that code compiled for ``cpu`` with
    the LLVM feature string ``features`` ("+avx2,-avx512f,...") may use: the macros clang
    predefines for that target."""
    argv = [compiler, "-x", "c", "-dM", "-E", os.devnull]
    if cpu and cpu not in ("generic", "host"):
        argv.insert(1, "-march=%s" % cpu)
    for feat in (features or "").split(","):
        feat = feat.strip()
        if feat[:1] in "+-" and len(feat) > 1:
            argv[1:1] = ["-Xclang", "-target-feature", "-Xclang", feat]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(argv[:2]), (out.stderr.strip().splitlines() or ["failed"])[-1]))
    defined = {line.split()[1] for line in out.stdout.splitlines() if line.startswith("#define ")}
    return [name for macro, name in FEATURE_MACROS if macro in defined]


def check_c(target, names):
    """C source of the constructor that refuses to run on a CPU lacking any of ``names``;
    ``target``: what the line calls the build (a cpu name)."""
    tests = "\n".join('  if (!has("%s")) note(missing, "%s");' % (n, n) for n in names)
    supports = "\n".join('  if (!strcmp(f, "%s")) return __builtin_cpu_supports("%s");' % (n, n) for n in names)
    return _CHECK_C % {"target": target.replace('"', ""), "tests": tests, "supports": supports}


_CHECK_C = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* spack-r3's target check (emit/targetcheck.py), linked into a tuned unit */
static int listed(const char *list, const char *f) {
  size_t n = strlen(f);
  for (const char *p = list; p && *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && !strncmp(p, f, n)) return 1;
    p = end ? end + 1 : 0;
  }
  return 0;
}
static int supports(const char *f) {
%(supports)s
  return 1;
}
static int has(const char *f) {
  if (listed(getenv("R3_TARGET_CHECK_LACKS"), f)) return 0;
  return supports(f);
}
static void note(char *missing, const char *f) {
  if (strlen(missing) + strlen(f) + 3 < 512) { if (*missing) strcat(missing, ", "); strcat(missing, f); }
}
__attribute__((constructor)) static void r3_target_check(void) {
  const char *mode = getenv("R3_TARGET_CHECK");
  if (mode && !strcmp(mode, "off")) return;
  char missing[512] = "";
  __builtin_cpu_init();
%(tests)s
  if (!*missing) return;
  fprintf(stderr, "r3: this program was tuned for %(target)s and its tuned code needs %%s, which this CPU lacks: "
                  "install the +r3 build of this machine's target, or ~r3 (R3_TARGET_CHECK=warn runs it anyway)\n",
          missing);
  if (!(mode && !strcmp(mode, "warn"))) exit(1);
}
"""


def check_object(compiler, target, names, tmp, run):
    """Compile the check for ``names`` into ``tmp``; its object's path (``run``: r3-apply's
    command runner). Compiled for the architecture's baseline, whatever the unit's flags."""
    path = os.path.join(tmp, "r3-target-check.c")
    with open(path, "w") as f:
        f.write(check_c(target, names))
    obj = path[:-2] + ".o"
    run([compiler, "-O1", "-fPIC", "-w", "-c", "-x", "c", path, "-o", obj], "the target check")
    return obj

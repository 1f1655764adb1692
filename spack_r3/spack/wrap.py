"""Packages that inherit a recipe and build it through an r3 launcher.

Both the record build (``r3-record``) and the tuned variant (``r3-apply``) are the
original recipe, subclassed: the same versions, variants, dependencies and build, with
``SPACK_CC``/``SPACK_CXX``/``SPACK_FC``/``SPACK_F77`` pointed at ``r3-spack-cc`` and its
siblings (``hook.py``),
which run the launcher in front of the real compiler, behind Spack's wrapper.

Importing the parent, by the layout of the parent's repository (``layout`` below; not the
layout of the repository the subclass is written to: Spack 1.x reads v1 repositories too):

- v1 (all of 0.x; 1.x for v1 repositories): ``from spack.pkg.<ns>.<module> import *``
  brings the class and every builder class the parent module defines (without them Spack
  silently skips the parent's build phases);
- v2 (1.x): ``from spack_repo.<ns>.packages.<dir>.package import *``, the same way.
"""

import os
import sys

from .repos import class_name, package_dir_name

HOOK_DIR = os.path.dirname(os.path.abspath(sys.executable))

# Where the launchers are when the package builds: spack-r3 may have moved since it wrote the
# package (another virtualenv, another node of the facility), so $R3_HOOKS first.
_HOOKS = '''
def _r3_hooks():
    """The directory of r3-spack-cc and r3-spack-cxx: $R3_HOOKS, else where spack-r3 was
    when it wrote this package."""
    hooks = os.environ.get("R3_HOOKS") or R3_HOOKS_AT_EMIT
    if not os.access(os.path.join(hooks, "r3-spack-cc"), os.X_OK):
        raise InstallError("spack-r3's r3-spack-cc is not in %s: install spack-r3 and set R3_HOOKS to the "
                           "directory of its scripts" % hooks)
    return hooks
'''


def parent_module(namespace, name, layout):
    if layout == "v2":
        return "spack_repo.%s.packages.%s.package" % (namespace, package_dir_name(name, "v2"))
    return "spack.pkg.%s.%s" % (namespace, name.replace("-", "_"))


# The subclass's compilers: on 1.x compilers are the dependencies that provide the
# languages (``self.compiler`` is only a deprecated adaptor there, which raises for a
# language the package does not use: a C-only package has no ``cxx``); 0.x has
# ``self.compiler``.
_COMPILERS = """
    def _r3_compilers(self):
        # {cc, cxx, fc, f77: the real compiler} of this build
        found = {}
        for lang, attr, keys in (("c", "cc", ("cc",)), ("cxx", "cxx", ("cxx",)), ("fortran", "fortran", ("fc", "f77"))):
            try:
                deps = self.spec.dependencies(virtuals=[lang])
                path = getattr(deps[0].package, attr) if deps else None
            except Exception:
                path = None
            for key in keys:
                found[key] = path
        if any(found.values()):
            return found
        compiler = super().compiler
        return {key: getattr(compiler, key, None) if compiler is not None else None for key in R3_LAUNCHERS}

    @property
    def compiler(self):
        # A recipe that hands its build the real compiler (1.x's xsbench: CC=self.compiler.cc)
        # goes around Spack's wrapper and the launcher behind it: inside the build, the
        # compiler's cc and cxx are the launchers.
        real = super().compiler
        return _R3Compiler(real) if real is not None and os.environ.get("R3_SPACK_LAUNCHER") else real

    def _r3_launch(self, env, launcher):
        env.set("R3_SPACK_LAUNCHER", launcher)
        for key, real in self._r3_compilers().items():
            if real:
                env.set("R3_REAL_" + key.upper(), real)
                env.set("SPACK_" + key.upper(), os.path.join(_r3_hooks(), R3_LAUNCHERS[key]))
"""


_COMPILER_PROXY = '''
# Spack's compiler variable (lower case) -> the launcher that stands in for it
R3_LAUNCHERS = {"cc": "r3-spack-cc", "cxx": "r3-spack-cxx", "fc": "r3-spack-fc", "f77": "r3-spack-f77"}


class _R3Compiler:
    """The build's compiler, with the launchers as its cc, cxx, fc and f77."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        if name in R3_LAUNCHERS and os.environ.get("R3_REAL_" + name.upper()):
            return os.path.join(_r3_hooks(), R3_LAUNCHERS[name])
        return getattr(self._real, name)
'''


def _header(namespace, name, layout, what):
    module = parent_module(namespace, name, layout)
    cls = class_name(name)
    return [
        "# %s" % what,
        "import os",
        "",
        "from spack.package import *",
        "from %s import *  # the recipe, and the builder classes it defines" % module,
        "from %s import %s as _R3Original" % (module, cls),
        "",
        "# r3-spack-cc, -cxx, -fc, -f77 (spack-r3's launchers behind Spack's compiler wrapper) were here",
        "R3_HOOKS_AT_EMIT = %r" % HOOK_DIR,
        "",
        _HOOKS,
        _COMPILER_PROXY,
    ]


def record_package(namespace, name, layout, env):
    """A recipe that builds ``namespace.name`` through ``r3-record``, with ``env`` (the
    record directory and its settings) in its build and test environment. Its text holds
    ``env``, so each record is a new hash: Spack builds it again instead of reusing."""
    cls = class_name(name)
    lines = _header(namespace, name, layout, "Written by spack-r3 (r3 record): %s built with probes." % name)
    lines += [
        "",
        "class %s(_R3Original):" % cls,
        "    r3_record_env = %s" % _literal(env).replace("\n", "\n    "),
        "",
        "    def setup_build_environment(self, env):",
        "        super().setup_build_environment(env)",
        "        for key, value in self.r3_record_env.items():",
        "            env.set(key, value)",
        '        self._r3_launch(env, "record")',
        "",
        "    def setup_run_environment(self, env):",
        "        super().setup_run_environment(env)",
        "        for key, value in self.r3_record_env.items():",
        "            env.set(key, value)",
    ]
    return "\n".join(lines) + "\n" + _COMPILERS


def tuned_package(namespace, name, layout, targets, toolchain):
    """The tuned variant: ``targets`` maps each plan's name (``Plan.name``: the archspec
    microarchitecture, and a device plan's GPU) to its plan (``emit.plan.Plan``, written as
    ``r3-<name>.json`` beside the recipe) and patches; each is built for its spec keys
    (``target=zen3``; ``target=zen3 cuda_arch=90`` for device kernels tuned for sm_90).
    ``toolchain``: the digest of what builds the planned units (``emit.apply.toolchain_digest``)."""
    cls = class_name(name)
    lines = _header(
        namespace,
        name,
        layout,
        "Written by spack-r3 (spack r3 emit): %s with the kernels r3 tune measured, per target. "
        "Emit rewrites this file from the r3-<target>.json plans beside it." % name,
    )
    # The digests are in the package's text so that Spack's hash of the package follows
    # them: a new plan, or an r3 that builds differently, is a new install, never the old one.
    lines += [
        "# target -> (the plan r3-apply builds: kernels, pipelines, launch settings, FP labels; its digest)",
        "R3_PLANS = %s" % _literal({t: ("r3-%s.json" % t, targets[t].build_digest()) for t in sorted(targets)}),
        "# what builds the planned units (spack-r3's r3-apply, replay's stages, the timed builds' runtime)",
        "R3_TOOLCHAIN = %r" % toolchain,
        "",
        "",
        "class %s(_R3Original):" % cls,
        '    variant("r3", default=True, description="build the kernels spack-r3 tuned for this '
        'target (%s)")' % ", ".join(sorted(targets)),
    ]
    for target in sorted(targets):
        plan = targets[target]
        for unit in plan.units:
            if unit.patch:
                lines.append('    patch("%s", when="+r3 %s")' % (unit.patch, plan.spec_keys()))
        relaxed = sorted(k.symbol for u in plan.units for k in u.kernels if k.relaxes_fp)
        if relaxed:
            lines.append("    # target=%s relaxes floating-point semantics in: %s" % (target, ", ".join(relaxed)))
    lines += [
        '    variant("r3probes", default=False, description="time the planned kernels inside the application '
        "(tuned with +r3, untuned with ~r3): a run with R3_RECORD_DIR=<dir> R3_CAPTURE=none writes "
        '<dir>/profile.<pid>.json")',
        "",
        "    def _r3_plan(self):",
    ]
    keyed = {t: targets[t].spec_keys() for t in sorted(targets) if targets[t].gpu}
    if keyed:  # device plans first: the one whose target and GPU this spec has
        lines += [
            "        for name, keys in %s:" % _literal(sorted(keyed.items())).replace("\n", "\n        "),
            "            if self.spec.satisfies(keys):",
            "                return os.path.join(os.path.dirname(os.path.abspath(__file__)), R3_PLANS[name][0])",
        ]
    lines += [
        "        name, _ = R3_PLANS.get(str(self.spec.target), (None, None))",
        "        return os.path.join(os.path.dirname(os.path.abspath(__file__)), name) if name else None",
        "",
        "    def setup_build_environment(self, env):",
        "        super().setup_build_environment(env)",
        "        plan = self._r3_plan()",
        '        tuned, probes = self.spec.satisfies("+r3"), self.spec.satisfies("+r3probes")',
        "        if plan and (tuned or probes):",
        '            env.set("R3_APPLY_PLAN", plan)',
        "            if not tuned:",
        '                env.set("R3_APPLY_UNTUNED", "1")',
        "            if probes:",
        '                env.set("R3_APPLY_PROBES", "1")',
        '            self._r3_launch(env, "apply")',
        "",
    ]
    return "\n".join(lines) + "\n" + _COMPILERS


def _literal(value):
    import pprint

    return pprint.pformat(value, indent=4, width=100)

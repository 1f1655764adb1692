"""``host``: a CPU function, recorded by the instrumented unit (record/hostunit.py) and
r3rt.c, replayed by the host engine (llvmlite's JIT in a forked, confined child); the
+r3 build compiles its tuned IR (emit/apply.py's own path). Every compile line no other
backend claims is the host's."""

from .base import Backend


class Host(Backend):
    runs_on = "this CPU (llvmlite JIT)"
    rewrites = True

    def claims(self, args):
        return True

    def record_source(self, line, argv, source, obj, record_dir, wanted, warn):
        from ..record.compileline import run
        from ..record.hostunit import record_unit

        try:
            reason = record_unit(line, source, obj, record_dir, wanted)
        except Exception as err:  # instrumentation must never break a build
            reason = "%s: %s" % (type(err).__name__, err)
        if reason is None:
            return 0
        rc = run(argv if "-o" in argv else argv + ["-o", obj])
        if rc == 0:
            warn("%s: compiled without probes (%s)" % (source, reason))
        return rc

    def record_link_args(self, clang, line):
        from ..record.runtime import link_args

        return link_args(clang)

    def timed_link_args(self, clang, line):
        return self.record_link_args(clang, line)  # (its probes are the record runtime's)


BACKEND = Host("host")

"""``offload``: an OpenMP ``target`` region's device function, recorded by
``record/offload.py`` (device IR at the unit's device compile) and
``record/runtime/r3offload.c`` (the launch, through libomptarget and OpenMP's device
memory interface). On libomptarget's host plugin the device function is x86 code calling
libomp, so the host engine replays it: the region's device memory mapped at its device
addresses, the device function JIT-compiled and called as the host plugin calls it. Its
launch geometry (teams, threads per team) is written into the device function
(``compile.module.apply_geometry``), as the region's own ``num_teams`` / ``thread_limit``
clauses are; the +r3 build puts the tuned regions into the unit's device image
(``emit/offload.py``)."""

from .base import Backend


class Offload(Backend):
    runs_on = "this CPU: the device function as libomptarget's host plugin runs it (llvmlite JIT)"
    geometry = ("num_teams", "thread_limit")

    def claims(self, args):
        return any(a.startswith("-fopenmp-targets=") for a in args)

    def record_source(self, line, argv, source, obj, record_dir, wanted, warn):
        from ..record.compileline import run
        from ..record.offload import record_device_unit

        rc = run(argv if "-o" in argv else argv + ["-o", obj])  # compiled as the build compiles it
        if rc == 0:
            try:
                reason = record_device_unit(line, source, record_dir)  # its device IR kept beside
            except Exception as err:  # recording must never break a build
                reason = "%s: %s" % (type(err).__name__, err)
            if reason:
                warn("%s: target regions not recorded (%s)" % (source, reason))
        return rc

    def record_link_args(self, clang, line):
        from ..record.runtime import offload_link_args

        return offload_link_args(clang) if self.claims(line.args) else []

    def build_unit(self, line, source, obj, unit, plan, run, error):
        from ..emit import offload

        offload.build_unit(line, source, obj, unit, run, error)
        return True

    def timed_link_args(self, clang, line):
        return self.record_link_args(clang, line)  # (its probes are the record runtime's)


BACKEND = Offload("offload")

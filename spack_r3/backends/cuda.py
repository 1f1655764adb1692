"""``cuda``: a ``__global__`` kernel of a unit compiled by clang, recorded by
``record/cuda.py`` (device IR per GPU arch at the unit's compile) and
``record/runtime/r3cuda.c`` (the launch and the device allocations, through the CUDA
runtime it interposes: one recorder for CUDA and HIP, ``runtime/gpurec.h``). Its code is the
GPU's: the host engine never runs it; a replay server runs ``device/cudaworker.py`` for
it, which replays it through the driver API (``device/cudareplay.py``) where a CUDA device
exists, and ``r3 retarget`` / ``tune`` screen it statically anywhere. Its launch geometry:
``num_teams`` is the grid's x, ``thread_limit`` the block's x (CUDA's blocks are OpenMP's
teams); the +r3 build links a launch shim that sets it (``emit/cuda.py``)."""

from .base import Backend


class Cuda(Backend):
    runs_on = "a CUDA GPU, through the driver API (device/cudareplay.py)"
    worker = "spack_r3.device.cudaworker"
    host_engine = False
    geometry = ("num_teams", "thread_limit")

    def claims(self, args):
        from ..record.flags import unit_kind

        return unit_kind(args) == self.name

    def record_line(self, line, record_dir, warn):
        from ..record import cuda  # compiled unchanged, its device IR kept

        return cuda.launch(line.compiler, line.args, record_dir, warn)

    def record_link_args(self, clang, line):
        from ..record.cuda import link_args

        return link_args(clang, line.args, self.name)

    def build_unit(self, line, source, obj, unit, plan, run, error):
        from ..emit import cuda  # its device image and launch geometry

        cuda.build_unit(line, source, obj, unit, plan, run, error)
        return True

    def build_link_args(self, clang, plan, line):
        from ..emit.cuda import launch_args

        return launch_args(clang, plan, line, self.name)


BACKEND = Cuda("cuda")

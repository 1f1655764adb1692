"""What ``r3 tune`` asks of the device package, kept to a small hook: the ``--gpu``
option, its targets validated before any work, a line per tuned kernel the targets do
not apply to, and ``reject`` for the search to call on a device kernel's candidate
before it spends a run on it (the candidate's code for each named GPU: rejected when it
spills or cannot launch at its geometry)."""

from .targets import parse_targets

DEVICE_BACKENDS = ("offload", "cuda", "hip")


def add_arguments(subparser):
    subparser.add_argument("--gpu", default=None, metavar="TARGETS",
                           help="GPU targets a device kernel's candidates must compile for without spilling and "
                                "launch on, checked before any run (comma-separated: sm_80,sm_90,gfx90a,gfx942; "
                                "no GPU needed; see r3 retarget)")


def targets(args):
    """The --gpu targets ([] when not given); R3Error with one line for an unknown one."""
    value = getattr(args, "gpu", None)
    return parse_targets(value) if value is not None else []


def is_device(capture):
    return (capture.launch or {}).get("backend", "host") in DEVICE_BACKENDS


def notes(captures, gpus):
    """Lines for the tune's progress: which kernels --gpu does not apply to."""
    if not gpus:
        return []
    host = sorted({c.kernel for c in captures if not is_device(c)})
    if not host:
        return []
    return ["--gpu %s: not for host kernels (%s); it screens device kernels' candidates"
            % (",".join(t.name for t in gpus), ", ".join(host))]


def reject(capture, variant, gpus, max_registers=None):
    """Why ``variant`` of the device kernel ``capture`` is rejected on ``gpus`` before any
    run (one line), or None where it compiles, does not spill and launches on each."""
    if not gpus or not is_device(capture):
        return None
    from .occupancy import Geometry
    from .screen import DeviceUnit, rejection, screen

    unit = DeviceUnit(capture.source_file, tuple(capture.compile_command or ()), capture.compile_dir or None)
    geometry = Geometry.from_launch(variant.launch, max_registers)
    if geometry.threads is None:
        geometry = Geometry.from_launch(capture.launch or {}, max_registers)
    return rejection(screen(unit, variant.pipeline, geometry, gpus, capture.kernel))

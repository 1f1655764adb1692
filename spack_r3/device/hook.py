"""What ``r3 tune`` asks of the device package, kept to a small hook: the ``--gpu``
option, its targets validated before any work, a line per tuned kernel the targets do
not apply to, and a ``Screener`` on each device kernel's search target, which its
``submit`` asks before it spends a run on a candidate (the candidate's code for each
named GPU: rejected when it does not compile, spills or cannot launch at its geometry)."""

import os
import tempfile

from ..errors import R3Error
from .targets import parse_targets

DEVICE_BACKENDS = ("offload", "cuda", "hip")


def add_arguments(subparser):
    subparser.add_argument(
        "--gpu",
        default=None,
        metavar="TARGETS",
        help="GPU targets a device kernel's candidates must compile for without spilling and "
        "launch on, checked before any run (comma-separated: sm_80,sm_90,gfx90a,gfx942; "
        "no GPU needed; see r3 retarget)",
    )


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
    return [
        "--gpu %s: not for host kernels (%s); it screens device kernels' candidates"
        % (",".join(t.name for t in gpus), ", ".join(host))
    ]


def attach(targets, captures, gpus, max_registers=None):
    """Give each search target (``bayes.Target``) of a device kernel a screen of its
    candidates on ``gpus``, and a CUDA or HIP launch's on the arch it was recorded for even
    without ``--gpu`` (its block and grid are searched: a block its code cannot launch
    with is rejected before any GPU time); lines for the tune's progress about the
    kernels ``--gpu`` does not apply to."""
    by_id = {c.id: c for c in captures}
    host = []
    for t in targets:
        capture = by_id.get(t.capture_id)
        if capture is not None and is_device(capture):
            on = gpus or recorded_gpus(capture)
            if on:
                t.screen = Screener(capture, t.captures[0], on, max_registers)
        elif capture is not None:
            host.append(t.kernel)
    return notes([c for c in captures if c.kernel in host], gpus)


def recorded_gpus(capture):
    """[GpuTarget] a CUDA or HIP launch was recorded on (its arch), where the limits table
    knows it; [] for any other capture."""
    from .geometry import GEOMETRY_BACKENDS

    launch = capture.launch or {}
    if launch.get("backend") not in GEOMETRY_BACKENDS or not launch.get("arch"):
        return []
    try:
        return parse_targets(launch["arch"])
    except R3Error:  # an arch the limits table does not know: screened only where --gpu names one
        return []


class Screener:
    """``screener(variant)``: why a candidate of one device kernel is rejected on the GPUs
    before any run (one line), or None. The application's own build (the baseline,
    ``compiler=build``) is never screened: it is what runs today. Verdicts are kept by
    source variant, pipeline and geometry: a search asks for the same ones again."""

    def __init__(self, capture, capture_dir, gpus, max_registers=None):
        self.capture, self.capture_dir, self.gpus = capture, capture_dir, list(gpus)
        self.max_registers = max_registers
        self._units, self._seen = {}, {}

    def __call__(self, variant):
        if variant.pipeline.build_compiler:
            return None
        from .screen import rejection

        try:
            return rejection(self.verdicts(variant))
        except (R3Error, ValueError) as err:  # a patch that does not apply, a source gone: this candidate's
            return "cannot be compiled for the GPUs: %s" % err

    def verdicts(self, variant):
        """[Verdict] of ``variant`` on each GPU (``screen.screen``)."""
        from ..compile.pipeline import format_spec
        from .screen import screen

        geometry = geometry_of(self.capture, variant, self.max_registers)
        source_key = (variant.source_patch or "", tuple(sorted(variant.source_defines.items())))
        key = (source_key, format_spec(variant.pipeline), geometry.threads, geometry.max_registers)
        if key not in self._seen:
            with tempfile.TemporaryDirectory(prefix="r3-screen-") as tmp:
                unit = tuned_unit(self.capture, self.capture_dir, variant, tmp)
                unit._irs = self._units.setdefault(source_key, {})  # device IR once per source variant and GPU
                self._seen[key] = screen(unit, variant.pipeline, geometry, self.gpus, self.capture.kernel)
        return self._seen[key]


def winners(targets, results):
    """[(kernel, [Verdict])]: each screened kernel's winner on the GPUs, for the report."""
    screens = {t.kernel: t.screen for t in targets if isinstance(getattr(t, "screen", None), Screener)}
    out = []
    for r in results:
        s = screens.get(r.kernel)
        if s is not None:
            try:
                out.append((r.kernel, s.verdicts(r.variant)))
            except (R3Error, ValueError) as err:
                out.append((r.kernel, err))
    return out


def winners_table(targets, results):
    """The winners' per-GPU table (text), or None when no kernel was screened."""
    from .table import render, rows, short

    found = winners(targets, results)
    if not found:
        return None
    lines = []
    for kernel, verdicts in found:
        if isinstance(verdicts, Exception):
            lines.append([short(kernel), "-", "-", "-", "-", "-", "-", "-", str(verdicts)])
        else:
            lines += rows(verdicts, short(kernel))
    return "the winners on the GPUs (--gpu; static figures, not measured):\n" + render(lines)


def geometry_of(capture, variant, max_registers=None):
    """The launch geometry of a variant of a captured kernel: the variant's thread_limit,
    else the recorded one, else (None) the kernel's launch bounds; its register cap
    ``max_registers`` (r3 retarget's), else the variant's."""
    from .occupancy import Geometry

    geometry = Geometry.from_launch(variant.launch, max_registers)
    if geometry.threads is None:
        geometry = Geometry.from_launch(capture.launch or {}, geometry.max_registers)
    return geometry


def tuned_unit(capture, capture_dir, variant, tmp):
    """The capture's unit as ``variant`` changes it: its source with the variant's patch
    applied (written in ``tmp``), compiled with its recorded command plus the variant's
    macro knobs."""
    from ..sourcepatch import apply_patch
    from .screen import DeviceUnit

    source = capture.source_file
    if not os.path.isfile(source):
        copy = os.path.join(capture_dir, os.path.basename(source))
        if not os.path.isfile(copy):
            raise R3Error("capture %s: its source %s is gone and no copy is kept" % (capture.id, source))
        source = copy
    command = list(capture.compile_command or ["clang", "-O2"])
    command += ["-D%s=%s" % (k, v) for k, v in sorted(variant.source_defines.items())]
    if variant.source_patch:
        with open(source) as f:
            text = apply_patch(f.read(), variant.source_patch)
        patched = os.path.join(tmp, os.path.basename(source))
        with open(patched, "w") as f:
            f.write(text)
        command += ["-I", os.path.dirname(os.path.abspath(source))]  # its own includes still found
        source = patched
    return DeviceUnit(source, tuple(command), capture.compile_dir or None)

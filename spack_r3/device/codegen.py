"""A device module optimized by a candidate's pipeline, its code for one GPU, and the
resources of each kernel as the vendor's tools report them.

- NVIDIA: PTX from llvmlite's NVPTX target, assembled by ``ptxas -arch=sm_XX -v``
  (registers, stack frame, spill stores and loads, shared memory; where the geometry caps
  registers, ``.maxnreg`` in the PTX and ``-maxrregcount``); launch bounds from the PTX's
  ``.maxntid``.
- AMD: a code object from llvmlite's AMDGPU target, and its ``NT_AMDGPU_METADATA`` note
  read by ``llvm-readelf --notes`` (VGPRs, AGPRs, SGPRs, their spills, private segment,
  LDS, maximum workgroup size, wave size); ``amdgpu-num-vgpr`` caps VGPRs (``num_vgpr``).

LLVM aborts the process on some inputs ("LLVM ERROR: unsupported calling convention"),
so the LLVM part runs in a child process (``python -m spack_r3.device.codegen``).

The pipeline is the host's (``compile/pipeline.py`` SPEC, ``stages.run_pipeline``), with
the GPU as its target: its cpu/features keys do not apply; a*b+c stays fused as the
device compile wrote it (GPUs fuse ``llvm.fmuladd``) unless ``fma=off``.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from typing import Dict

from ..data import Pipeline
from ..errors import R3Error
from ..iredit import add_to_attribute_groups, amdgpu_kernels, drop_comment_asm, mark_noalias, set_thread_limit
from . import tools
from .occupancy import Resources
from .targets import NVIDIA

CODEGEN_TIMEOUT_S = 300


class CodegenError(R3Error):
    """A device module that does not generate code for a target (one line)."""


@dataclass
class DeviceCode:
    target: object  # GpuTarget
    code: bytes  # PTX text (NVIDIA) or the code object (AMD)
    resources: Dict[str, Resources] = field(default_factory=dict)  # by kernel


def generate(dev, pipeline=None, max_registers=None, thread_limit=None, timeout=CODEGEN_TIMEOUT_S):
    """DeviceCode of ``dev`` (a DeviceIR) under ``pipeline`` (data.Pipeline; None: -O3).
    Raises CodegenError with one line."""
    code = generate_many(dev, [pipeline or Pipeline()], max_registers, thread_limit, timeout)[0]
    if isinstance(code, CodegenError):
        raise code
    return code


def generate_many(dev, pipelines, max_registers=None, thread_limit=None, timeout=CODEGEN_TIMEOUT_S):
    """[DeviceCode or CodegenError] of ``dev`` under each of ``pipelines``, in one child
    process (a search's candidates for one target share it). CodegenError (raised) where
    the child itself fails. ``thread_limit``: an OpenMP region's threads a team, compiled
    into its kernels as a ``thread_limit(N)`` clause would (their launch bound, which
    bounds registers)."""
    target = dev.target
    ext = ".ptx" if target.vendor == NVIDIA else ".o"
    with tempfile.TemporaryDirectory(prefix="r3-codegen-") as tmp:
        outs = [os.path.join(tmp, "device%d%s" % (i, ext)) for i in range(len(pipelines))]
        job = {
            "bitcode": os.path.join(tmp, "device.bc"),
            "triple": target.triple,
            "arch": target.name,
            "kernels": list(dev.kernels),
            "pipelines": [p.to_json() for p in pipelines],
            "clang": dev.clang,
            "max_registers": max_registers,
            "num_vgpr": num_vgpr(target, max_registers),
            "outs": outs,
            "thread_limit": thread_limit if dev.kind == "openmp" else None,
        }
        with open(job["bitcode"], "wb") as f:
            f.write(dev.bitcode)
        with open(os.path.join(tmp, "job.json"), "w") as f:
            json.dump(job, f)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "spack_r3.device.codegen", os.path.join(tmp, "job.json")],
                capture_output=True,
                text=True,
                timeout=timeout * max(1, len(pipelines)),
            )
        except subprocess.TimeoutExpired:
            raise CodegenError("code generation for %s took longer than %ds" % (target, timeout))
        if proc.returncode != 0:
            raise CodegenError(
                "code generation for %s failed: %s" % (target, _first_error(proc.stderr, proc.returncode))
            )
        results = []
        for out in outs:
            if not os.path.exists(out):
                try:
                    with open(out + ".error") as f:
                        results.append(CodegenError("code generation for %s failed: %s" % (target, f.read().strip())))
                except OSError:
                    results.append(CodegenError("code generation for %s wrote nothing" % target))
                continue
            with open(out, "rb") as f:
                code = f.read()
            try:
                if target.vendor == NVIDIA:
                    resources = ptxas_resources(out, target, max_registers, tmp, timeout)
                else:
                    resources = amdgpu_resources(out, timeout)
            except CodegenError as err:
                results.append(err)
                continue
            results.append(DeviceCode(target, code, resources))
    return results


def num_vgpr(target, max_registers):
    """The ``amdgpu-num-vgpr`` that caps a kernel at ``max_registers`` VGPRs a lane, as its
    code object's ``.vgpr_count`` counts them: halved where VGPRs and AGPRs share one file
    (LLVM doubles the attribute there: at 24, gfx90a's moments kernel had 48). None for
    NVIDIA or no cap."""
    if not max_registers or target.vendor == NVIDIA:
        return None
    return max(1, max_registers // 2) if target.limits.unified_vgprs else max_registers


def ptxas_resources(ptx_path, target, max_registers=None, tmp=None, timeout=CODEGEN_TIMEOUT_S):
    """Resources of each entry kernel of a PTX file, from ``ptxas -v``."""
    out = os.path.join(tmp or os.path.dirname(ptx_path), "device.cubin")
    argv = [tools.find_ptxas(), "-arch=%s" % target.name, "-v", "-O3", ptx_path, "-o", out]
    if max_registers:
        argv.insert(3, "-maxrregcount=%d" % max_registers)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CodegenError("ptxas for %s took longer than %ds" % (target, timeout))
    if proc.returncode != 0:
        raise CodegenError("ptxas -arch=%s rejects the PTX: %s" % (target, _first_error(proc.stderr, proc.returncode)))
    with open(ptx_path, errors="replace") as f:
        bounds = ptx_launch_bounds(f.read())
    res = parse_ptxas(proc.stdout + proc.stderr)
    for name, r in res.items():
        r.max_threads = bounds.get(name)
        r.wave_size = 32
    return res


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?, (\d+) bytes smem)?")


def parse_ptxas(text):
    """{kernel: Resources} from ptxas -v's report (entry functions only)."""
    out, current = {}, None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _ENTRY.search(line)
        if m:
            current = out.setdefault(m.group(1), Resources(m.group(1)))
            continue
        if current is None:
            continue
        if "Function properties for " in line:
            name = line.split("Function properties for ", 1)[1].strip()
            props = _PROPS.search(lines[i + 1]) if i + 1 < len(lines) else None
            if props and name == current.kernel:
                current.stack, current.spill_stores, current.spill_loads = (int(g) for g in props.groups())
            continue
        m = _USED.search(line)
        if m:
            current.registers = int(m.group(1))
            current.shared = int(m.group(2) or 0)
    return out


def ptx_launch_bounds(ptx):
    """{entry: threads} of the entries that declare ``.maxntid x, y, z``."""
    out = {}
    for m in re.finditer(r"\.entry\s+([\w$.]+)\s*\(", ptx):
        head = ptx[m.end() : ptx.find("{", m.end())]
        b = re.search(r"\.maxntid\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?", head)
        if b:
            out[m.group(1)] = int(b.group(1)) * int(b.group(2) or 1) * int(b.group(3) or 1)
    return out


def amdgpu_resources(obj_path, timeout=CODEGEN_TIMEOUT_S):
    """{kernel: Resources} from a code object's AMDGPU metadata note (llvm-readelf --notes)."""
    argv = [tools.llvm_tool("llvm-readelf"), "--notes", obj_path]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise CodegenError(
            "llvm-readelf --notes cannot read the code object: %s" % _first_error(proc.stderr, proc.returncode)
        )
    kernels = parse_amdgpu_notes(proc.stdout)
    if not kernels and "NT_AMDGPU_METADATA" not in proc.stdout:
        raise CodegenError("the code object has no AMDGPU metadata note")
    out = {}
    for k in kernels:
        name = str(k.get("name", ""))
        out[name] = Resources(
            name,
            registers=int(k.get("vgpr_count", 0)),
            sgprs=int(k.get("sgpr_count", 0)),
            agprs=int(k.get("agpr_count", 0)),
            spill_stores=int(k.get("vgpr_spill_count", 0)) + int(k.get("sgpr_spill_count", 0)),
            stack=int(k.get("private_segment_fixed_size", 0)),
            shared=int(k.get("group_segment_fixed_size", 0)),
            max_threads=int(k["max_flat_workgroup_size"]) if "max_flat_workgroup_size" in k else None,
            wave_size=int(k["wavefront_size"]) if "wavefront_size" in k else None,
            dynamic_stack=str(k.get("uses_dynamic_stack", "false")) == "true",
        )
    return out


def parse_amdgpu_notes(text):
    """The kernels of ``amdhsa.kernels`` in llvm-readelf's YAML of the metadata note: a
    list of {key: value} (their scalar keys, leading dot dropped; arguments skipped)."""
    kernels, inside = [], False
    for line in text.splitlines():
        if line.startswith("amdhsa.kernels:"):
            inside = True
            continue
        if not inside:
            continue
        if line and not line.startswith(" "):
            inside = False  # the next top-level key (amdhsa.target, ...)
            continue
        m = re.match(r"^  - \.(\w+):\s*(.*)$", line)
        if m:
            kernels.append({})
        else:
            m = re.match(r"^    \.(\w+):\s*(.*)$", line)
        if m and kernels and m.group(2) != "":
            value = m.group(2).strip().strip("'\"")
            kernels[-1][m.group(1)] = int(value) if re.fullmatch(r"-?\d+", value) else value
    return kernels


def _first_error(stderr, rc):
    lines = [l.strip() for l in (stderr or "").splitlines() if l.strip()]
    for pattern in ("LLVM ERROR", "error", "fatal"):
        hits = [l for l in lines if pattern in l]
        if hits:
            return hits[0]
    return lines[-1] if lines else "exit status %d" % rc


# ---- the child process: LLVM only ------------------------------------------------------


def _noalias(text, kernels):
    """The kernels' pointer parameters marked ``noalias`` (``ptr`` and ``ptr addrspace(N)``)."""
    for k in kernels:
        try:
            text = mark_noalias(text, k)
        except (KeyError, ValueError):
            continue
    return text


def _child(job):
    import llvmlite.binding as llvm

    from ..compile import stages
    from ..compile.module import apply_pipeline_edits, built_target

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    kernels, arch, amd = job["kernels"], job["arch"], job["triple"].startswith("amdgcn")
    with open(job["bitcode"], "rb") as f:
        bitcode = f.read()
    for spec, out in zip(job["pipelines"], job["outs"]):
        try:
            data = _one(
                llvm,
                stages,
                apply_pipeline_edits,
                built_target,
                job,
                bitcode,
                kernels,
                arch,
                amd,
                Pipeline.from_json(spec),
            )
        except (RuntimeError, ValueError, OSError, subprocess.SubprocessError, stages.CompileError) as err:
            with open(out + ".error", "w") as f:
                f.write(_first_error(str(err), 1) if str(err).strip() else type(err).__name__)
            continue
        with open(out, "wb") as f:
            f.write(data)


def _one(llvm, stages, apply_pipeline_edits, built_target, job, bitcode, kernels, arch, amd, p):
    """One pipeline's code (bytes) of the job's module."""

    def fix(text):
        return drop_comment_asm(amdgpu_kernels(text)) if amd else text

    def edits(text):
        features = built_target(text, kernels[0])[1] if kernels else ""
        # noalias for every kernel of the module, not only the first
        text = apply_pipeline_edits(
            text, kernels[0] if kernels else "", replace(p, noalias=False), arch, features, True
        )
        if p.noalias:
            text = _noalias(text, kernels)
        if job.get("thread_limit"):
            text = set_thread_limit(text, int(job["thread_limit"]))
        if job.get("max_registers"):
            # NVIDIA: "nvvm.maxnreg" is the PTX's .maxnreg, which ptxas and the driver's JIT
            # (a replay loads the PTX) both honour; ptxas -maxrregcount says the same
            attribute, value = ("amdgpu-num-vgpr", job.get("num_vgpr")) if amd else ("nvvm.maxnreg", None)
            text = add_to_attribute_groups(text, kernels, '"%s"="%d"' % (attribute, value or job["max_registers"]))
        return text, features

    if p.polly:
        ptools = stages.polly_tools(job.get("clang"))
        text19 = subprocess.run(
            [ptools.dis, job["bitcode"], "-o", "-"], capture_output=True, text=True, check=True
        ).stdout
        text19, features = edits(text19)
        proc = subprocess.run(
            [ptools.opt] + stages.polly_options(p) + ["-", "-o", "-"],
            input=text19.encode(),
            capture_output=True,
            timeout=stages.POLLY_TIMEOUT_S,
        )
        if proc.returncode != 0:
            raise RuntimeError("the polly stage failed: %s" % _first_error(proc.stderr.decode(), proc.returncode))
        mod = llvm.parse_assembly(fix(str(llvm.parse_bitcode(proc.stdout))))
    else:
        text, features = edits(fix(str(llvm.parse_bitcode(bitcode))))
        mod = llvm.parse_assembly(text)
    mod.verify()
    tm = stages.target_machine(job["triple"], arch, features, p.codegen)
    stages.run_pipeline(mod, tm, p)
    return tm.emit_object(mod) if amd else tm.emit_assembly(mod).encode()


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        _child(json.load(f))

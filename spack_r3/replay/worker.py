"""The persistent replay worker: ``python -m spack_r3.replay.worker``.

It speaks JSON lines on its stdin/stdout with ``ReplayServer``. Captures are
parsed once and kept; each candidate runs in a child forked from the worker, so a
kernel that crashes, hangs or scribbles over memory costs one evaluation: the
worker itself never maps recorded memory or runs compiled code.

Requests:  {"op": "load", "dir": D, "sequence": [D, D2, ...]|null}
           {"op": "evaluate", "dir": D, "variant": {...}, "repeat": N, "pairs": P,
            "tolerance": T|null, "timeout": S, "verify_runs": V, "cache": "warm"|"shared"|"cold",
            "sequence": [D, D2, ...]|null}   (recorded calls replayed in order: replay.sequence)
           {"op": "quit"}
"""

import json
import os
import select
import signal
import sys
import tempfile
import time
import traceback
from collections import OrderedDict

from ..capture import load_capture_dir
from ..data import COMPILE_ERROR, CRASH, OK, TIMEOUT, WARM, WRONG_OUTPUT, Evaluation, Variant
from ..errors import R3Error
from ..toolchain import find_libomp
from . import engine
from .pipeline import as_built
from .sequence import merge


class Worker:
    def __init__(self, cache_bytes=None):
        self.prepared = OrderedDict()  # capture dir -> Prepared, least recently used first
        self.baselines = {}  # capture dir -> Compiled baseline (or CompileError)
        self.sequences = {}  # capture dirs -> Sequence
        self.cache_bytes = cache_bytes or int(os.environ.get("R3_WORKER_CACHE_BYTES", 4 << 30))
        self.libomp = find_libomp()
        engine.init_llvm(self.libomp)

    def load(self, directory):
        if directory in self.prepared:
            self.prepared.move_to_end(directory)
        else:
            capture = load_capture_dir(directory)
            self.prepared[directory] = engine.prepare(capture, directory)
            self._evict(keep=directory)
        return self.prepared[directory]

    def _evict(self, keep):
        """Forget least recently used captures while their memory images exceed the cache."""
        def size(p):
            return sum(len(d) for _, d in p.pre) + sum(len(d) for _, d in p.post)

        total = sum(size(p) for p in self.prepared.values())
        for directory in list(self.prepared):
            if total <= self.cache_bytes or directory == keep:
                break
            total -= size(self.prepared.pop(directory))
            self.baselines.pop(directory, None)
            # a sequence holds its calls' captures (and their merged memory): it goes with them
            for dirs in [d for d in self.sequences if directory in d]:
                del self.sequences[dirs]

    def baseline(self, directory):
        """The baseline of a capture (the kernel as built: ``pipeline.as_built``), compiled
        once here (compiling runs no kernel code) and inherited by every candidate's child
        for the paired protocol."""
        if directory not in self.baselines:
            prepared = self.load(directory)
            engine.bind_globals(prepared)
            try:
                self.baselines[directory] = engine.Compiled(prepared, as_built(prepared.capture))
            except engine.CompileError as err:
                self.baselines[directory] = err
        return self.baselines[directory]

    def sequence(self, dirs):
        """The recorded calls in ``dirs`` merged into one sequence (SequenceError if they
        cannot be), once."""
        key = tuple(dirs)
        if key not in self.sequences:
            self.sequences[key] = merge([self.load(d) for d in dirs])
        return self.sequences[key]

    def evaluate(self, req):
        sequence = self.sequence(req["sequence"]) if req.get("sequence") else None
        prepared = sequence.view() if sequence else self.load(req["dir"])
        baseline = self.baseline(req["dir"]) if req.get("pairs") else None
        variant = Variant.from_json(req.get("variant") or {})
        if (req.get("cache") or WARM) != WARM and not sequence:
            engine.flush_ir()  # clang runs here once, not in every candidate's process
        base = Evaluation(capture=prepared.capture.id, variant=variant.to_json())
        with tempfile.TemporaryFile() as log:
            return self._fork_candidate(prepared, variant, req, baseline, base, log, sequence)

    def _fork_candidate(self, prepared, variant, req, baseline, base, log, sequence=None):
        """Run one candidate in a child; ``log`` receives its stdout and stderr."""
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the candidate's own process
            os.close(rfd)
            code = 0
            try:
                os.dup2(log.fileno(), 1)
                os.dup2(log.fileno(), 2)
                result = run_candidate(prepared, variant, req, self.libomp, base, baseline, sequence)
                os.write(wfd, json.dumps(result.to_json()).encode())
            except BaseException:
                traceback.print_exc()
                code = 3
            finally:
                os._exit(code)
        os.close(wfd)
        data, status = _collect(pid, rfd, req.get("timeout") or 60.0)
        os.close(rfd)
        if data:
            return json.loads(data)
        log.seek(0)
        tail = log.read()[-2000:].decode(errors="replace").strip()
        if status == "timeout":
            base.status, base.diagnostics = TIMEOUT, "killed after %ss" % req.get("timeout")
        else:
            base.status = CRASH
            base.diagnostics = "%s%s" % (status, ("; " + tail.splitlines()[-1]) if tail else "")
        return base.to_json()


def _collect(pid, rfd, timeout):
    """Read the child's result; kill it at the deadline. Returns (data, status)."""
    deadline, chunks = time.monotonic() + timeout, []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None, "timeout"
        ready, _, _ = select.select([rfd], [], [], min(left, 1.0))
        if ready:
            chunk = os.read(rfd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return None, "killed by %s" % signal.Signals(sig).name
    if chunks and os.WEXITSTATUS(status) == 0:
        return b"".join(chunks), "ok"
    return None, "exited with code %d" % os.WEXITSTATUS(status)


def run_candidate(prepared, variant, req, libomp, ev, baseline=None, sequence=None):
    """Compile, restore, verify and time one variant (inside the forked child). With a
    ``sequence`` (``prepared`` is its view), every recorded call is verified and a timed
    run is a pass over them all, in warm caches: the calls' own data is the cache state."""
    if variant.source_patch or variant.source_defines:
        try:
            prepared = engine.with_source_variant(prepared, variant.source_patch, variant.source_defines)
        except engine.CompileError as err:
            ev.status, ev.diagnostics = COMPILE_ERROR, str(err)
            return ev
    # Recorded globals must have their addresses before the JIT resolves symbols.
    engine.map_recorded_memory(prepared)
    if isinstance(baseline, engine.CompileError):
        ev.status, ev.diagnostics = COMPILE_ERROR, "the baseline (the kernel as built) does not compile: %s" % baseline
        return ev
    pairs = int(req.get("pairs") or 0)
    try:
        candidate = engine.Compiled(prepared, variant.pipeline, variant.launch)
    except engine.CompileError as err:
        ev.status, ev.diagnostics = COMPILE_ERROR, str(err)
        return ev
    ev.compiled, ev.compile_s, ev.code = True, candidate.compile_s, candidate.code
    threads = engine.thread_counts(prepared.capture.launch.get("threads"), variant.launch.threads,
                                   len(os.sched_getaffinity(0)))
    ev.baseline_threads, ev.threads = threads
    engine.set_threads(libomp, threads[1])
    frame = engine.Frame(prepared)
    tolerance = req.get("tolerance", prepared.capture.tolerance)
    # The verification run doubles as the warm-up; it is never timed. A parallel kernel
    # with a data race may verify once by luck: callers ask for several runs there.
    for run in range(max(1, int(req.get("verify_runs") or 1))):
        engine.restore(prepared)
        if sequence:
            checked = sequence.verify(candidate, tolerance)
        else:
            frame.run(candidate)
            checked = engine.check(prepared, frame, tolerance)
        ev.verified, ev.max_rel_error = checked.verified, max(ev.max_rel_error, checked.max_rel_error)
        ev.mismatched_bytes, ev.verify_runs = checked.mismatched_bytes, run + 1
        if not checked.verified:
            ev.status = WRONG_OUTPUT
            ev.diagnostics = checked.detail + (" (verification run %d)" % (run + 1) if run else "")
            return ev
    cache = WARM if sequence else (req.get("cache") or WARM)
    flush = engine.CacheFlush(cache, max(t or 1 for t in threads)) if cache != WARM else None
    ev.cache = cache
    repeat = max(1, int(req.get("repeat") or 5))
    if pairs:
        ev.runs_per_sample = (sequence.passes_per_sample(candidate) if sequence else
                              engine.runs_per_sample(prepared, frame, candidate, flush=flush))
        measured = engine.paired_ratios(prepared, frame, baseline, candidate, pairs, libomp, threads,
                                        ev.runs_per_sample, flush, sequence)
        ratios, times = measured.ratios, measured.candidate_s
        ev.speedup, ev.speedup_min, ev.speedup_max = engine.spread(ratios)
        ev.pairs, ev.ratios, ev.resampled = pairs, ratios, measured.resampled
        ev.baseline_median_s = engine.spread([r * t for r, t in zip(ratios, times)])[0]
    elif sequence:
        times = [sequence.timed(candidate) for _ in range(repeat)]
    else:
        times = engine.time_runs(prepared, frame, candidate, repeat, flush)
    if sequence:  # times per call, as the application's are
        ev.calls = len(sequence)
        times = [t / len(sequence) for t in times]
        if ev.baseline_median_s is not None:
            ev.baseline_median_s /= len(sequence)
    ev.time_median_s, ev.time_min_s, ev.time_max_s = engine.spread(times)
    ev.repeat = len(times)
    ev.status = OK
    return ev


def serve(inp, out):
    worker = None
    for line in inp:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            if req.get("op") == "quit":
                break
            worker = worker or Worker()
            if req.get("op") == "load":
                worker.load(req["dir"])
                if req.get("sequence"):
                    worker.sequence(req["sequence"])
                reply = {"ok": True}
            elif req.get("op") == "evaluate":
                reply = {"ok": True, "evaluation": worker.evaluate(req)}
            else:
                reply = {"ok": False, "error": "unknown op %r" % req.get("op")}
        except R3Error as err:
            reply = {"ok": False, "error": str(err), "user_error": True}
        except Exception as err:
            reply = {"ok": False, "error": "%s: %s" % (type(err).__name__, err)}
        out.write(json.dumps(reply) + "\n")
        out.flush()


def main():
    # The protocol gets a private copy of stdout; stray prints go to stderr.
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    serve(sys.stdin, proto)


if __name__ == "__main__":
    main()

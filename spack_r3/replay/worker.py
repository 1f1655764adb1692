"""The persistent replay worker: ``python -m spack_r3.replay.worker``.

It speaks JSON lines on its stdin/stdout with ``ReplayServer``. Captures are
parsed once and kept; each candidate runs in a child forked from the worker, so a
kernel that crashes, hangs or scribbles over memory costs one evaluation: the
worker itself never maps recorded memory or runs compiled code. The child leads a
process group of its own, killed when it ends, and confines itself before the
candidate's code runs (``replay.confine``: a memory limit, a seccomp filter); the
output of its timed runs is checked as well as its verification runs'.

Requests:  {"op": "load", "dir": D, "sequence": [D, D2, ...]|null}
           {"op": "evaluate", "dir": D, "variant": {...}, "repeat": N, "pairs": P,
            "tolerance": T|null, "timeout": S, "verify_runs": V, "cache": "warm"|"shared"|"cold",
            "sequence": [D, D2, ...]|null,   (recorded calls replayed in order: replay.sequence)
            "race": true|false}              (pairs stop early for a clearly slower candidate)
           {"op": "quit"}
"""

import ctypes
import glob
import json
import os
import random
import select
import signal
import sys
import tempfile
import time
import traceback
from collections import OrderedDict
from contextlib import contextmanager

from .. import cxxnames
from ..capture import load_capture_dir
from ..data import COMPILE_ERROR, CRASH, OK, TIMEOUT, WARM, WRONG_OUTPUT, Evaluation, Variant
from ..errors import R3Error, RewriteUncheckable
from ..lifetime import die_with_parent
from ..toolchain import find_libomp
from . import confine, engine, poison
from ..compile import stages
from ..compile.pipeline import as_built
from .sequence import merge


class Worker:
    def __init__(self, cache_bytes=None):
        self.prepared = OrderedDict()  # capture dir -> Prepared, least recently used first
        self.baselines = {}  # capture dir -> Compiled baseline (or CompileError)
        self.sequences = {}  # capture dirs -> Sequence
        self.probed = set()  # capture dirs whose first_written is known
        self.cache_bytes = cache_bytes or int(os.environ.get("R3_WORKER_CACHE_BYTES", 4 << 30))
        self.libomp = find_libomp()
        engine.init_llvm(self.libomp)
        self.unconfined = confine.probe()  # what this kernel does not let a candidate be confined by

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
            self.probed.discard(directory)
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
            before, t0 = dict(stages.SPENT), time.perf_counter()
            try:
                self.baselines[directory] = engine.Compiled(prepared, as_built(prepared.capture))
            except engine.CompileError as err:
                self.baselines[directory] = err
            finally:  # its build and load as one stage of the evaluation that paid for them
                stages.SPENT.clear()
                stages.SPENT.update(before, baseline=before.get("baseline", 0.0) + time.perf_counter() - t0)
        return self.baselines[directory]

    def sequence(self, dirs):
        """The recorded calls in ``dirs`` merged into one sequence (SequenceError if they
        cannot be), once."""
        key = tuple(dirs)
        if key not in self.sequences:
            self.sequences[key] = merge([self.load(d) for d in dirs])
        return self.sequences[key]

    def evaluate(self, req):
        t0 = time.perf_counter()
        stages.SPENT.clear()
        sequence = self.sequence(req["sequence"]) if req.get("sequence") else None
        prepared = sequence.view() if sequence else self.load(req["dir"])
        variant_json = req.get("variant") or {}
        if not sequence:
            self.first_written(req["dir"], prepared, req)
            if variant_json.get("source_patch") or variant_json.get("source_defines"):
                _checks_something(prepared)
        baseline = self.baseline(req["dir"]) if req.get("pairs") else None
        variant = Variant.from_json(req.get("variant") or {})
        if (req.get("cache") or WARM) != WARM and not sequence:
            engine.flush_ir()  # clang runs here once, not in every candidate's process
        if stages.cuts():
            engine.trampoline_object(prepared)  # compiled here once, not in every candidate's process
        base = Evaluation(capture=prepared.capture.id, variant=variant.to_json())
        # what this worker did before the fork (a capture's first load, its baseline's build)
        before = dict(stages.SPENT, prepare=time.perf_counter() - t0 - sum(stages.SPENT.values()))
        t1 = time.perf_counter()
        with tempfile.TemporaryFile() as log:
            result = self._fork_candidate(prepared, variant, req, baseline, base, log, sequence)
        split = result.setdefault("stages", {})
        # forking, collecting, the JSON: the worker's own part of the candidate's time
        split["process"] = time.perf_counter() - t1 - sum(split.values())
        for stage, seconds in before.items():
            if seconds > 0:
                split[stage] = split.get(stage, 0.0) + seconds
        return result

    def _fork_candidate(self, prepared, variant, req, baseline, base, log, sequence=None):
        """Run one candidate in a child; ``log`` receives its stdout and stderr."""

        def work():
            try:
                result = run_candidate(
                    prepared, variant, req, self.libomp, base, baseline, sequence, confinement=confine.apply
                )
            except confine.Denied as err:
                result = Evaluation(
                    capture=base.capture,
                    variant=base.variant,
                    status=CRASH,
                    compiled=base.compiled,
                    code=base.code,
                    diagnostics="denied: %s" % err,
                )
            return result.to_json()

        data, status = _fork(work, req.get("timeout") or 60.0, log)
        if data is not None:
            return data
        log.seek(
            max(0, os.fstat(log.fileno()).st_size - 2000)
        )  # its last words only: a chatty candidate's log is large
        tail = log.read().decode(errors="replace").strip()
        if status == "timeout":
            base.status, base.diagnostics = TIMEOUT, "killed after %ss" % req.get("timeout")
        else:
            base.status = CRASH
            base.diagnostics = "%s%s" % (status, ("; " + tail.splitlines()[-1]) if tail else "")
        return base.to_json()

    def first_written(self, directory, prepared, req):
        """Set ``prepared.first_written`` once per capture: the kernel as built, run in a
        confined child with what its call changed poisoned (``replay.poison.probe``). Where
        the probe cannot run (no baseline, a crash), nothing is poisoned."""
        if directory in self.probed:
            return
        baseline = self.baseline(directory)
        self.probed.add(directory)
        if isinstance(baseline, engine.CompileError):
            return
        libomp = self.libomp

        def work():
            engine.map_recorded_memory(prepared)
            cpus = len(os.sched_getaffinity(0))
            threads = engine.thread_counts(prepared.capture.launch.get("threads"), None, cpus)[0]
            engine.set_threads(libomp, threads)
            if libomp:
                ctypes.CDLL(libomp).omp_get_max_threads()
            frame = engine.Frame(prepared)
            image = sum(len(d) for _, d in prepared.pre)
            confine.apply(confine.memory_bound(image, threads or cpus))
            return poison.probe(prepared, frame, baseline, prepared.capture.tolerance, timeout / 2)

        timeout = 2 * (req.get("timeout") or 60.0)  # a candidate's: a few runs of the kernel
        with stages.spent("probe"), tempfile.TemporaryFile() as log:
            data, _ = _fork(work, timeout, log)
        prepared.first_written = [tuple(s) for s in data] if data is not None else None


def _checks_something(prepared):
    """Refuse a source rewrite on a capture against which a candidate that does nothing
    verifies: its call changed no memory replay compares and returned zero (HPCCG's first
    ``HPC_sparsemv``, A times a zero vector into a zero vector, returning 0): a rewrite that
    skips the work would win by thousands there. The code as written, under any pipeline,
    is still replayed and timed (a kernel that only checks and prints, as most calls do)."""
    if prepared.outputs or any(prepared.ret):
        return
    capture = prepared.capture
    raise RewriteUncheckable(
        "capture %s: the recorded call of %s changed no memory replay compares and returned "
        "nothing but zero, so no source rewrite can be checked against it; record a call that "
        "does work (r3 tune's --instances cover picks calls by their cost)"
        % (capture.id, cxxnames.display(capture.kernel))
    )


def _fork(work, timeout, log):
    """``work()`` (JSON-able) in a child forked from the worker: (its result, "ok") or
    (None, why not). ``log`` receives the child's stdout and stderr. The child leads a
    process group of its own, which is killed when it ends or times out; ``work`` confines
    it (``confine``) before untrusted code runs."""
    rfd, wfd = os.pipe()
    worker = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child's own process
        code = 0
        try:
            os.setpgid(0, 0)
            go_with(worker)
            os.close(rfd)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)  # not the worker's requests
            # nothing else of the worker's: its protocol pipe, the capture files
            os.closerange(3, wfd)
            os.closerange(wfd + 1, MAX_FD)
            os.write(wfd, json.dumps(work()).encode())
        except BaseException:
            traceback.print_exc()
            code = 3
        finally:
            os._exit(code)
    try:
        os.setpgid(pid, pid)  # whichever of the two comes first
    except OSError:
        pass
    os.close(wfd)
    data, status = _collect(pid, rfd, timeout)
    os.close(rfd)
    for path in glob.glob("/dev/shm/__KMP_REGISTERED_LIB_%d_*" % pid):  # libomp's, left by os._exit
        try:
            os.unlink(path)
        except OSError:
            pass
    return (json.loads(data) if data else None), status


MAX_FD = 1 << 20  # os.closerange closes with close_range(2): the bound costs nothing


def go_with(parent):
    """In a child forked from ``parent``: killed when it dies. A candidate leads a process
    group of its own, which the worker's own end (``_exit_with_parent``) does not reach."""
    die_with_parent()
    if os.getppid() != parent:  # (it died before the line above)
        os._exit(1)


def _kill_group(pid):
    """SIGKILL to the candidate's process group: whatever it started goes with it."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _exited(pid):
    """Whether the child has ended, without reaping it: its pid stays its group's until
    then, so that killing the group cannot reach a process that took the pid."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _collect(pid, rfd, timeout):
    """Read the child's result until it ends (not until the pipe closes: a process it
    started may hold the pipe), then kill its group; at the deadline, kill the group.
    Returns (data, status)."""
    deadline, chunks, eof = time.monotonic() + timeout, [], False
    try:
        pidfd = os.pidfd_open(pid)  # readable once the child ends
    except (AttributeError, OSError):
        pidfd = None
    try:
        while not _exited(pid):
            left = deadline - time.monotonic()
            if left <= 0:
                _kill_group(pid)
                os.waitpid(pid, 0)
                return None, "timeout"
            watch = ([] if eof else [rfd]) + ([pidfd] if pidfd is not None else [])
            ready, _, _ = select.select(watch, [], [], min(left, 1.0 if pidfd is not None else 0.02))
            if rfd in ready:
                chunk = os.read(rfd, 1 << 16)
                chunks.append(chunk)
                eof = not chunk
    finally:
        if pidfd is not None:
            os.close(pidfd)
    _kill_group(pid)
    _, status = os.waitpid(pid, 0)
    # what the child wrote before it ended is in the pipe; nothing more can come
    while not eof and select.select([rfd], [], [], 0)[0]:
        chunk = os.read(rfd, 1 << 16)
        chunks.append(chunk)
        eof = not chunk
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return None, "killed by %s" % signal.Signals(sig).name
    data = b"".join(chunks)
    if data and os.WEXITSTATUS(status) == 0:
        return data, "ok"
    return None, "exited with code %d" % os.WEXITSTATUS(status)


# Racing (``race`` in a request: true, or the speedup to beat): after this many pairs, a
# candidate whose every pair so far is below RACE_BELOW of that speedup (of the build's, 1,
# at least: the search's best so far a third faster, or more) stops there, marked ``raced_out``.
RACE_AFTER = 2
RACE_BELOW = 0.75
# A first (verification) run this long says one run fills a timing sample (engine.MIN_SAMPLE_S
# many times over, start-up costs such as a thread team's included): no calibration run.
LONG_RUN_S = 10 * engine.MIN_SAMPLE_S


def run_candidate(prepared, variant, req, libomp, ev, baseline=None, sequence=None, confinement=None):
    """Compile, restore, verify and time one variant (inside the forked child). With a
    ``sequence`` (``prepared`` is its view), every recorded call is verified and a timed
    run is a pass over them all, in warm caches: the calls' own data is the cache state.
    ``confinement(memory_limit)``, when given, is called once everything trusted is done and
    right before the candidate's code first runs (``replay.confine.apply``). ``ev.stages``
    gets the seconds each stage took."""
    stages.SPENT.clear()
    t0 = time.perf_counter()
    try:
        return _run_candidate(prepared, variant, req, libomp, ev, baseline, sequence, confinement)
    finally:
        split = dict(stages.SPENT)
        split["other"] = max(0.0, time.perf_counter() - t0 - sum(split.values()))
        ev.stages = {k: round(v, 6) for k, v in split.items()}


@contextmanager
def _exclusive(stage, inner=("restore", "flush", "check")):
    """``stages.spent(stage)`` less what the ``inner`` stages took meanwhile (counted as theirs)."""
    before = sum(stages.SPENT.get(s, 0.0) for s in inner)
    t0 = time.perf_counter()
    try:
        yield
    finally:
        took = time.perf_counter() - t0 - (sum(stages.SPENT.get(s, 0.0) for s in inner) - before)
        stages.SPENT[stage] = stages.SPENT.get(stage, 0.0) + took


def _run_candidate(prepared, variant, req, libomp, ev, baseline, sequence, confinement):
    if variant.source_patch or variant.source_defines:
        try:
            with stages.spent("source"):
                prepared = engine.with_source_variant(
                    prepared, variant.source_patch, variant.source_defines, variant.source_openmp
                )
        except engine.CompileError as err:
            ev.status, ev.diagnostics = COMPILE_ERROR, str(err)
            return ev
    # Recorded globals must have their addresses before the JIT resolves symbols.
    with stages.spent("map"):
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
    threads = engine.thread_counts(
        prepared.capture.launch.get("threads"), variant.launch.threads, len(os.sched_getaffinity(0))
    )
    ev.baseline_threads, ev.threads = threads
    engine.set_threads(libomp, threads[1])
    if libomp:  # libomp starts here, not under the filter: starting, it creates a file (/dev/shm)
        ctypes.CDLL(libomp).omp_get_max_threads()
    frame = engine.Frame(prepared)
    tolerance = req.get("tolerance", prepared.capture.tolerance)
    cache = WARM if sequence else (req.get("cache") or WARM)
    flush = engine.CacheFlush(cache, max(t or 1 for t in threads)) if cache != WARM else None
    if confinement:
        image = sum(len(d) for _, d in prepared.pre)
        team = max(t or len(os.sched_getaffinity(0)) for t in threads)  # libomp's default: a thread per CPU
        confinement(confine.memory_bound(image, team))
    # The verification run doubles as the warm-up; it is never timed. A parallel kernel
    # with a data race may verify once by luck: callers ask for several runs there.
    first_run_s = None  # the first verification run's time, in Python: a long kernel needs no calibration run
    for run in range(max(1, int(req.get("verify_runs") or 1))):
        engine.restore(prepared)
        with _exclusive("verify"):
            if sequence:
                checked = sequence.verify(candidate, tolerance)
            else:
                t_run = time.perf_counter()
                frame.run(candidate)
                first_run_s = first_run_s if first_run_s is not None else time.perf_counter() - t_run
                checked = engine.check(prepared, frame, tolerance)
        ev.verified, ev.max_rel_error = checked.verified, max(ev.max_rel_error, checked.max_rel_error)
        ev.mismatched_bytes, ev.verify_runs = checked.mismatched_bytes, run + 1
        if not checked.verified:
            ev.status = WRONG_OUTPUT
            ev.diagnostics = checked.detail + (" (verification run %d)" % (run + 1) if run else "")
            return ev
    if not sequence:  # what only the recording's fresh memory made right is wrong
        with _exclusive("verify"):
            wrong = poison.check_poisoned(prepared, frame, candidate, tolerance)
            engine.restore(prepared)
        if wrong is not None:
            ev.verified, ev.status, ev.diagnostics = False, WRONG_OUTPUT, wrong.detail
            ev.max_rel_error, ev.mismatched_bytes = max(ev.max_rel_error, wrong.max_rel_error), wrong.mismatched_bytes
            return ev

    def timed_check():
        """The output of the timed run just done against the recording (untimed): a
        candidate that does its work only while it is verified fails here."""
        with stages.spent("check"):
            if sequence:  # a pass leaves its last call's outputs in place
                return engine.check(sequence.calls[-1].prepared, sequence.frames[-1], tolerance)
            return engine.check(prepared, frame, tolerance)

    ev.cache = cache
    repeat = max(1, int(req.get("repeat") or 5))
    if pairs:
        with _exclusive("calibrate"):
            if sequence:
                ev.runs_per_sample = sequence.passes_per_sample(candidate)
            elif stages.cuts() and not flush and first_run_s is not None and first_run_s >= LONG_RUN_S:
                ev.runs_per_sample = 1  # what a calibration run would say: one run fills a sample
            else:
                ev.runs_per_sample = engine.runs_per_sample(prepared, frame, candidate, flush=flush)

        seen = [0, 0]  # tries and preempted tries of this evaluation's pairs (engine.paired_ratios)

        def measure(n):
            with _exclusive("timed"):
                return engine.paired_ratios(
                    prepared, frame, baseline, candidate, n, libomp, threads, ev.runs_per_sample, flush, sequence, seen
                )

        # Racing: the first RACE_AFTER pairs, each checked part as any; the rest only for a
        # candidate not clearly slower there than the speedup it races (the build's, or more).
        race = bool(req.get("race")) and stages.cuts() and pairs > RACE_AFTER
        to_beat = max(1.0, float(req.get("race") or 0))
        first = RACE_AFTER if race else pairs
        measured, wrong = _checked_in_parts(measure, first, timed_check, _join_pairs)
        if wrong:
            return _wrong_in_timing(ev, wrong, "pair")
        if race and max(measured.ratios) < RACE_BELOW * to_beat:
            ev.raced_out = True
        elif first < pairs:
            rest, wrong = _checked_in_parts(measure, pairs - first, timed_check, _join_pairs)
            if wrong:
                checked, done, _ = wrong
                return _wrong_in_timing(ev, (checked, first + done, pairs), "pair")
            measured = _join_pairs(measured, rest)
        ratios, times = measured.ratios, measured.candidate_s
        ev.speedup, ev.speedup_min, ev.speedup_max = engine.spread(ratios)
        ev.pairs, ev.ratios, ev.resampled = len(ratios), ratios, measured.resampled
        ev.baseline_median_s = engine.spread([r * t for r, t in zip(ratios, times)])[0]
    else:

        def measure(n):
            with _exclusive("timed"):
                if sequence:
                    return [sequence.timed(candidate) for _ in range(n)]
                return engine.time_runs(prepared, frame, candidate, n, flush)

        times, wrong = _checked_in_parts(measure, repeat, timed_check, lambda a, b: a + b)
        if wrong:
            return _wrong_in_timing(ev, wrong, "run")
    if sequence:  # times per call, as the application's are
        ev.calls = len(sequence)
        times = [t / len(sequence) for t in times]
        if ev.baseline_median_s is not None:
            ev.baseline_median_s /= len(sequence)
    ev.time_median_s, ev.time_min_s, ev.time_max_s = engine.spread(times)
    ev.repeat = len(times)
    ev.status = OK
    return ev


def _checked_in_parts(measure, n, check, join):
    """``measure(n)`` split in two at a point drawn at random, the output of the timed run
    at the split and of the last checked: memory is put back before every timed run, so
    each leaves what one run makes, and a candidate cannot tell which run is checked.
    Returns (the joined measurements, None) or (None, (the check, after which run of n))."""
    cut = random.SystemRandom().randrange(1, n) if n > 1 else n
    done, out = 0, None
    for part in (cut, n - cut) if cut < n else (n,):
        got = measure(part)
        out = got if out is None else join(out, got)
        done += part
        checked = check()
        if not checked.verified:
            return None, (checked, done, n)
    return out, None


def _join_pairs(a, b):
    return engine.Pairs(a.ratios + b.ratios, a.candidate_s + b.candidate_s, a.resampled + b.resampled)


def _wrong_in_timing(ev, wrong, unit):
    checked, done, n = wrong
    ev.status, ev.verified = WRONG_OUTPUT, False
    ev.max_rel_error, ev.mismatched_bytes = max(ev.max_rel_error, checked.max_rel_error), checked.mismatched_bytes
    ev.diagnostics = "%s (after timed %s %d of %d: verified, then wrong once timed)" % (checked.detail, unit, done, n)
    return ev


def serve_requests(inp, out, answer):
    """The workers' protocol: a JSON request a line on ``inp``, ``answer(request)``'s reply
    a line on ``out``, until ``quit``. An R3Error is the user's (one line, no traceback);
    anything else is this worker's own failure, reported and survived."""
    for line in inp:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            if req.get("op") == "quit":
                break
            reply = answer(req)
        except R3Error as err:
            reply = {"ok": False, "error": str(err), "user_error": True}
            if isinstance(err, RewriteUncheckable):
                reply["uncheckable"] = True
        except Exception as err:
            reply = {"ok": False, "error": "%s: %s" % (type(err).__name__, err)}
        out.write(json.dumps(reply) + "\n")
        out.flush()


def serve_stdio(serve):
    """Run ``serve`` on stdin and a private copy of stdout; stray prints go to stderr."""
    _exit_with_parent()
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    serve(sys.stdin, proto)


PARENT_POLL_S = 0.2
PARENT_ENV = "R3_WORKER_PARENT"  # the pid of the r3 that started the worker (replay.server)


def _exit_with_parent():
    """A worker whose r3 is gone (``kill -9``) goes too, with the candidate it may be
    running: it leads a process group of its own, and a thread kills the group when the
    parent changes. (It would see EOF on its requests only once the candidate ends.)"""
    import threading

    # (the parent as r3 named it: one killed while this process imported is already gone)
    parent = int(os.environ.get(PARENT_ENV) or os.getppid())
    try:
        os.setpgid(0, 0)
    except OSError:
        return  # (a session leader already: nothing to watch for)

    def watch():
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="r3-parent-watch", daemon=True).start()


def serve(inp, out):
    worker = None

    def answer(req):
        nonlocal worker
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
        if worker.unconfined:
            reply["unconfined"] = worker.unconfined
        return reply

    serve_requests(inp, out, answer)


def main():
    serve_stdio(serve)


if __name__ == "__main__":
    main()

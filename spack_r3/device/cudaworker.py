"""The CUDA replay worker: ``python -m spack_r3.device.cudaworker``, what a replay server
runs for a capture of backend ``cuda`` (``backends.CUDA.worker``), in the host worker's
protocol (``replay.worker``: JSON lines of ``load``, ``evaluate`` and ``quit``), so that
``r3 replay`` and ``r3 tune`` evaluate CUDA candidates as they do host ones.

This process never initializes the driver (a CUDA context does not survive a fork):
each request runs in a child forked for it (``device/cudareplay.py``: the device memory
mapped at the recorded addresses, the candidate's PTX loaded, launched, compared, timed
with device events), which leads a process group of its own, killed when it ends or at
the request's deadline (``replay.worker._collect``), with no core files and its output
bounded. Neither a seccomp filter nor an address-space limit confines it: the driver
opens its device files for writing and reserves address space far past any limit a
host candidate gets; the candidate's code runs on the GPU, not in the child.

Where no CUDA device is, a request is one line: ``no CUDA device: ...``. A HIP capture's
server runs this worker too (``backends.HIP.worker``): its child replays through HIP's
module API (``hip.HipDevice``), ``no HIP device: ...`` where there is none.

Written against the driver API and never run on a GPU here: nothing in it is
GPU-verified until its ``gpu`` test ran on one.
"""

import json
import os
import resource
import tempfile
import traceback

from ..capture import load_capture_dir
from ..data import Variant
from ..errors import R3Error

PRINTED = 64 << 20  # the most a child may write to its log


def _in_child(work, timeout):
    """``work()``'s JSON-able result, computed in a forked child of its own process group;
    R3Error with the child's one line where it raised one, or with how it ended."""
    from ..replay.worker import MAX_FD, _collect, go_with

    rfd, wfd = os.pipe()
    worker = os.getpid()
    with tempfile.TemporaryFile() as log:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.setpgid(0, 0)
                go_with(worker)
                os.close(rfd)
                os.dup2(log.fileno(), 1)
                os.dup2(log.fileno(), 2)
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
                os.closerange(3, wfd)
                os.closerange(wfd + 1, MAX_FD)
                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
                resource.setrlimit(resource.RLIMIT_FSIZE, (PRINTED, PRINTED))
                try:
                    reply = {"result": work()}
                except R3Error as err:
                    reply = {"error": str(err)}
                os.write(wfd, json.dumps(reply).encode())
            except BaseException:
                traceback.print_exc()
                code = 3
            finally:
                os._exit(code)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        os.close(wfd)
        data, status = _collect(pid, rfd, timeout)
        os.close(rfd)
        if data:
            reply = json.loads(data)
            if "error" in reply:
                raise R3Error(reply["error"])
            return reply["result"]
        log.seek(max(0, os.fstat(log.fileno()).st_size - 2000))  # (its end only: a child may print gigabytes)
        tail = log.read(2000).decode(errors="replace").strip().splitlines()
        raise _Ended("%s%s" % (status, ("; " + tail[-1]) if tail else ""))


class _Ended(Exception):
    """The child ended without a result (killed at the deadline, crashed)."""


def load(directory, timeout=120.0):
    """Check in a child that ``directory`` holds a CUDA (HIP) capture a device here can replay."""
    from .cudareplay import check_replayable, driver_of

    def work():
        capture = load_capture_dir(directory)
        check_replayable(capture)
        driver_of(capture)  # no device: "no CUDA device: <why>" ("no HIP device: <why>")
        return True

    _in_child(work, timeout)


def evaluate(req):
    """The Evaluation JSON of one request's candidate, from a child."""
    from ..data import CRASH, TIMEOUT, Evaluation
    from .cudareplay import evaluate as run

    directory, variant = req["dir"], Variant.from_json(req.get("variant") or {})
    timeout = float(req.get("timeout") or 60.0)

    def work():
        capture = load_capture_dir(directory)
        tolerance = req.get("tolerance", capture.tolerance)  # the user's, else the capture's (as the host worker)
        repeat, pairs = int(req.get("repeat") or 5), int(req.get("pairs") or 0)
        return run(capture, directory, variant, repeat=repeat, pairs=pairs, tolerance=tolerance)

    try:
        return _in_child(work, timeout)
    except _Ended as err:
        status = TIMEOUT if str(err).startswith("timeout") else CRASH
        why = "killed after %ss" % timeout if status == TIMEOUT else str(err)
        return Evaluation(os.path.basename(directory), variant.to_json(), status=status, diagnostics=why).to_json()


def answer(req):
    """The reply to one request of the host worker's protocol (``replay.worker``)."""
    if req.get("sequence") and len(req["sequence"]) > 1:
        raise R3Error("a CUDA launch replays one recorded call at a time (no --sequence)")
    if req.get("op") == "load":
        load(req["dir"])
        return {"ok": True}
    if req.get("op") == "evaluate":
        return {"ok": True, "evaluation": evaluate(req)}
    return {"ok": False, "error": "unknown op %r" % req.get("op")}


def serve(inp, out):
    from ..replay.worker import serve_requests

    serve_requests(inp, out, answer)


def main():
    from ..replay.worker import serve_stdio

    serve_stdio(serve)


if __name__ == "__main__":
    main()

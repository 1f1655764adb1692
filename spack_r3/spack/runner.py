"""Run ``bin/spack`` in a subprocess: concretize, install, locate, test.

Nothing here imports Spack: every call is a separate ``spack`` process, so a recipe that
Spack loads (generated, untrusted) is never loaded into our own process.
"""

import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import List, Optional

from ..childoutput import LINE_BYTES, read_excerpt, run_captured
from ..errors import R3Error
from .locate import find_spack_root


MAX_ERROR = 600  # characters of one error message kept for a one-line report
# Of what a spack process prints, memory keeps the head and tail (childoutput.Kept): the
# head of stdout up to this many bytes (a concrete spec's JSON), else KEEP_BYTES of each end.
MAX_STDOUT = 16 << 20
# A build log longer than this is parsed by its head and tail (read_excerpt), not whole.
MAX_PARSED_LOG = 4 << 20


@dataclass
class SpackResult:
    """One finished ``spack`` process."""

    argv: List[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self):
        return self.returncode == 0

    @property
    def output(self):
        return self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr

    def error_lines(self):
        """The ``==> Error:`` messages Spack printed (without the prefix), each on one line
        with the lines that go on from it (a concretization error's numbered reasons)."""
        out, going_on = [], False
        for line in self.output.splitlines():
            m = re.match(r"\s*==> Error:\s*(.*)", line)
            if m:
                out.append(m.group(1).strip())
                going_on = True
            elif line.lstrip().startswith("==>"):
                going_on = False
            elif going_on and line.strip():
                out[-1] = out[-1] + " " + " ".join(line.split())
        return [e if len(e) <= MAX_ERROR else e[: MAX_ERROR - 3] + "..." for e in out]


@dataclass
class ConcretizeOutcome:
    ok: bool
    result: SpackResult
    specfile: Optional[str] = None  # the concrete spec as JSON, written when ok
    hash: Optional[str] = None


@dataclass
class InstallOutcome:
    ok: bool
    result: SpackResult
    build_logs: List[str] = field(default_factory=list)  # build logs Spack pointed at


# ``spack repo list``: 0.x prints ``<namespace> <path>``; 1.x prints
# ``[+] <namespace> <api> <path>`` (``[-]`` for a repository that failed to load, `` - `` for
# a git repository not cloned yet: neither has packages to read).
_REPO_LINE = re.compile(r"^\s*(?:(\[\+\]|\[-\]| ?- ?)\s+)?(\S+)\s+(?:(v\d+\.\d+)\s+)?(\S.*?)\s*$")


def parse_repo_list(text):
    """[(namespace, path)] from the output of ``spack repo list`` (Spack 0.x or 1.x)."""
    repos = []
    for line in text.splitlines():
        m = _REPO_LINE.match(line)
        if not m or (m.group(1) and m.group(1) != "[+]"):
            continue
        if os.path.isdir(m.group(4)):
            repos.append((m.group(2), m.group(4)))
    return repos


def _version_tuple(text):
    m = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


class Spack:
    """A Spack installation plus the config scopes every call runs with (``spack -C``)."""

    def __init__(self, root=None, scopes=(), timeout=1800, confinement=None):
        self.root = root or find_spack_root()
        if not self.root:
            raise R3Error("no Spack found (set SPACK_ROOT, put spack on PATH, or clone it to ~/spack)")
        self.exe = os.path.join(self.root, "bin", "spack")
        self.scopes = [os.path.abspath(s) for s in scopes]
        self.timeout = timeout
        self.confinement = confinement  # spack.confinement.Confinement: where its calls may write
        self._version = None

    def with_scopes(self, *scopes):
        """The same Spack with more scopes (repositories: they name no place to write)."""
        other = Spack(
            self.root, list(self.scopes) + [os.path.abspath(s) for s in scopes], self.timeout, self.confinement
        )
        other._version = self._version
        return other

    def writing(self, *dirs):
        """The same Spack, whose confined calls may also write beneath ``dirs`` (a build's
        own directory: a dev_path copy, the record's capture folder)."""
        other = self.with_scopes()
        if self.confinement:
            other.confinement = self.confinement.also(*dirs)
        return other

    def environment(self):
        env = dict(os.environ)
        env["SPACK_ROOT"] = self.root
        if not env.get("SPACK_PYTHON"):
            try:  # our interpreter has clingo: let Spack use it (no bootstrap offline)
                import clingo  # noqa: F401

                env["SPACK_PYTHON"] = sys.executable
            except ImportError:
                pass
        env.pop("SPACK_ENV", None)
        env["TERM"] = "dumb"
        return env

    def argv(self, *args):
        argv = [self.exe, "--color=never"]
        for s in self.scopes:
            argv += ["-C", s]
        return argv + [str(a) for a in args]

    def run(self, *args, timeout=None, cwd=None, env=None):
        argv = self.argv(*args)
        start = time.monotonic()
        full_env = self.environment()
        full_env.update(env or {})
        jail = self.confinement
        if jail:
            full_env.update(jail.environment())
        try:  # (what a build prints through Spack is kept within bounds: childoutput)
            proc = run_captured(
                argv,
                timeout=timeout or self.timeout,
                cwd=cwd,
                env=full_env,
                stdout_head=MAX_STDOUT,
                preexec=jail.apply if jail else None,
                group=True,  # (a build's make and compilers go with it)
            )
        except OSError as err:
            raise R3Error("cannot run %s: %s" % (self.exe, err))
        if proc.timed_out:
            return SpackResult(
                argv,
                124,
                proc.stdout,
                "spack timed out after %ss" % (timeout or self.timeout),
                time.monotonic() - start,
            )
        return SpackResult(argv, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)

    # -- facts -------------------------------------------------------------------------

    def version(self):
        if self._version is None:
            res = self.run("--version", timeout=120)
            if not res.ok:
                raise R3Error("spack --version failed: %s" % res.output.strip()[-300:])
            self._version = res.stdout.strip().split()[0] if res.stdout.strip() else "0.0"
        return self._version

    def major_minor(self):
        return _version_tuple(self.version())

    def repo_list(self):
        """[(namespace, path)] of the repositories Spack is configured with, highest first."""
        res = self.run("repo", "list", timeout=120)
        if not res.ok:
            raise R3Error("spack repo list failed: %s" % (res.error_lines() or [res.output.strip()])[-1])
        return parse_repo_list(res.stdout)

    # -- the refine loop's calls -------------------------------------------------------

    def concretize(self, spec, specfile):
        """``spack spec --json --fresh-roots SPEC``; on success the concrete spec is written to
        ``specfile``. Fresh roots: with Spack's default reuse, a root already installed (an
        earlier ``+r3`` build, before emit wrote a new plan and patch) satisfies the spec and
        is reused, since patches are not part of the solve; the check then timed the old
        build. Dependencies are still reused."""
        res = self.run("spec", "--json", "--fresh-roots", spec)
        if not res.ok:
            return ConcretizeOutcome(False, res)
        text = res.stdout.strip()
        try:
            data = json.loads(text)
            nodes = data["spec"]["nodes"]
        except (ValueError, KeyError, TypeError):
            return ConcretizeOutcome(False, res)
        with open(specfile, "w") as f:
            f.write(text + "\n")
        root = nodes[0]
        return ConcretizeOutcome(True, res, specfile, root.get("hash"))

    def install_specfile(self, specfile, keep_stage=True, verbose=False, overwrite=False):
        """``spack install -f SPECFILE`` (0.x; 1.x: ``spack install ./SPECFILE``, ``-f`` is
        ``--force`` there): installs the concrete spec without solving again (``overwrite``:
        builds it again when that hash is installed already)."""
        args = ["install"]
        if keep_stage:
            args.append("--keep-stage")
        if overwrite:
            args += ["--overwrite", "-y"]
        if verbose:
            args.append("--verbose")
        cwd = None
        if self.major_minor() >= (1, 0):
            # A spec file is a spec literal there; its parser takes only [\w./-] in a file
            # name, so the file goes by its name relative to its directory.
            cwd, name = os.path.split(os.path.abspath(specfile))
            args.append(os.path.join(".", name))
        else:
            args += ["-f", specfile]
        res = self.run(*args, cwd=cwd)
        logs = []
        for m in re.finditer(r"See build log for details:\s*\n?\s*(\S+)", res.output):
            if m.group(1) not in logs:
                logs.append(m.group(1))
        ok = res.ok and not re.search(r"==> Error:", res.output)
        return InstallOutcome(ok, res, logs)

    def location(self, spec_or_hash):
        """Install prefix of an installed spec (``/hash`` works), or None."""
        res = self.run("location", "-i", spec_or_hash, timeout=300)
        path = res.stdout.strip().splitlines()[-1] if res.ok and res.stdout.strip() else ""
        return path if path and os.path.isdir(path) else None

    def test_run(self, spec_or_hash):
        """``spack test run``: the stand-alone tests of an installed spec."""
        return self.run("test", "run", spec_or_hash, timeout=900)

    def parse_log(self, path, context=3):
        """Error events of a build log with Spack's own log parser (run in a spack process).
        A log longer than MAX_PARSED_LOG is parsed by its two ends, each line cut to
        LINE_BYTES (Spack's parser reads every line whole, and each event comes with the
        lines around it: one endless line would take all memory there, and here)."""
        try:
            big = os.path.getsize(path) > MAX_PARSED_LOG
        except OSError:
            return []
        if not big:
            return self._parse_log(path, context)
        with tempfile.TemporaryDirectory(prefix="r3-log-") as tmp:
            excerpt = os.path.join(tmp, os.path.basename(path))
            text = read_excerpt(path, head=MAX_PARSED_LOG // 2, tail=MAX_PARSED_LOG // 2)
            with open(excerpt, "w", errors="replace") as f:  # (each line cut: events come with context)
                f.write("\n".join(line[:LINE_BYTES] for line in text.split("\n")))
            return self._parse_log(excerpt, context)

    def _parse_log(self, path, context):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_parse_log.py")
        res = self.run("python", script, path, str(context), timeout=300)
        if not res.ok:
            return []
        try:
            return json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return []

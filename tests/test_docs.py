"""The documentation stays true to the command line and to the repository.

- Every ``r3 ...`` and ``spack r3 ...`` line in a shell block of README.md, docs/*.md and
  bench/README.md parses with the real argument parser (``cli.setup_parser``; parsing
  only, nothing runs): a renamed or removed option, or a missing argument, fails here.
- Every option a synopsis or an inline command names (``r3 tune ... --budget N``) is
  an option of that subcommand.
- Every relative link in those pages resolves to a file, and a ``#fragment`` to one of
  its headings.
"""

import argparse
import contextlib
import glob
import io
import os
import re
import shlex

import pytest

from spack_r3 import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = sorted(
    [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "bench", "README.md")]
    + glob.glob(os.path.join(ROOT, "docs", "*.md"))
)
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def rel(path):
    return os.path.relpath(path, ROOT)


def read(path):
    with open(path) as f:
        return f.read()


def r3_argv(words):
    """The r3 arguments of a shell command's words (environment assignments and a
    leading ``spack`` dropped), or None when the command is not r3's."""
    while words and ENV.match(words[0]):
        words = words[1:]
    if words[:2] == ["spack", "r3"]:
        return words[2:]
    if words[:1] == ["r3"]:
        return words[1:]
    return None


def command_lines():
    for page in PAGES:
        for m in FENCE.finditer(read(page)):
            if m.group(1) not in ("sh", "bash", ""):
                continue
            for line in m.group(2).splitlines():
                if r3_argv(line.split()) is None:
                    continue  # not an r3 command (a diagram, another tool)
                argv = r3_argv(shlex.split(line, comments=True))
                if argv is not None:
                    yield pytest.param(argv, id="%s: %s" % (rel(page), line.split("#")[0].strip()))


def parser():
    return cli.setup_parser(argparse.ArgumentParser(prog="r3"))


@pytest.mark.parametrize("argv", list(command_lines()))
def test_documented_command_parses(argv):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser().parse_args(argv)
    except SystemExit:
        pytest.fail("r3 %s does not parse: %s" % (" ".join(argv), err.getvalue().strip().splitlines()[-1]))
    assert args.r3_command in argv


def test_the_readme_is_short_and_shows_tune():
    # The quick start shows the main job both ways, and the README stays a few screens.
    lines = [p.id for p in command_lines() if p.id.startswith("README.md")]
    assert any(": r3 tune" in i for i in lines) and any(": spack r3 tune" in i for i in lines), lines
    assert len(read(os.path.join(ROOT, "README.md")).encode()) <= 8500


def options_of():
    """{subcommand: its option strings}, from the real parser."""
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: set(p._option_string_actions) for name, p in sub.choices.items()}


def inline_commands():
    """(page, command, options named) of each inline ``r3 CMD ...`` / ``spack r3 CMD ...``."""
    for page in PAGES:
        text = FENCE.sub("", read(page))
        for span in INLINE.findall(text):
            words = span.split()
            while words and ENV.match(words[0]):
                words = words[1:]
            if words[:2] == ["spack", "r3"]:
                words = words[2:]
            elif words[:1] == ["r3"]:
                words = words[1:]
            else:
                continue
            if words:
                opts = {m.group(1) for m in (re.match(r"\[?(--[\w-]+)", w) for w in words) if m}
                yield rel(page), words[0], opts, span


def test_inline_commands_name_real_options():
    known = options_of()
    bad = []
    for page, command, opts, span in inline_commands():
        if command not in known:
            if not command.startswith(("-", "<")):  # `spack r3 -h`, `r3 <subcommand>`
                bad.append("%s: `%s`: no subcommand %r" % (page, span, command))
            continue
        bad += ["%s: `%s`: r3 %s has no %s" % (page, span, command, o) for o in sorted(opts - known[command])]
    assert not bad, "\n".join(bad)


def slug(heading):
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path):
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", FENCE.sub("", read(path)), re.M)}


def test_relative_links_resolve():
    bad = []
    for page in PAGES:
        for target in LINK.findall(FENCE.sub("", read(page))):
            if re.match(r"[a-z]+:", target):
                continue  # http(s):, mailto:
            path, _, fragment = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(full):
                bad.append("%s: %s: no such file" % (rel(page), target))
            elif fragment and (not full.endswith(".md") or fragment not in anchors(full)):
                bad.append("%s: %s: no heading #%s in %s" % (rel(page), target, fragment, rel(full)))
    assert not bad, "\n".join(bad)


def test_the_architecture_and_device_pages_stay_short():
    """design.md and device.md are read whole: the detail lives in the stage pages."""
    for page in ("design.md", "device.md"):
        assert os.path.getsize(os.path.join(ROOT, "docs", page)) < 15 * 1024, page

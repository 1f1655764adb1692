"""Repairs of a recipe whose stand-alone test failed: read what ``spack test run`` printed
(and the results file it names), find what the test got wrong, edit the test.

- a library, header or program the test looked for that the prefix has under another name
  (``libr3mk`` installed as ``libr3mk2``) -> the test looks for what is there;
- a C++ header compiled by a C link test (``snappy.h``: ``fatal error: 'string' file not
  found``) -> the test is C++, and the recipe depends on ``cxx``;
- a program run with an argument it does not take (it crashed, exited 126 or more, or said
  nothing) -> the next invocation of ``RUN_ARGS``, so that each attempt tries another one.
"""

import os
import re
from typing import List, Optional, Tuple

from .fixes import Finding, add_dependency, diagnose

# how a test runs an installed program: the generator runs it with the flag its source
# answers; where that fails, the repairs try these in order, each once. "" runs it with no
# argument and its input from /dev/null (a program that takes its first argument for a file
# crashes on any flag)
RUN_ARGS = ("", "--version", "--help", "-h", "-help")
NO_ARGUMENT = "no argument"  # how a test says it runs a program with ""

# a C++ header read by a C compiler: its standard headers, or its keywords
CXX_IN_C = (
    r"(fatal error: '?(?:string|vector|map|memory|cstddef|cstdint|cstdlib|cstring|cstdio|iostream|utility|"
    r"algorithm|functional|array|atomic|type_traits|limits|tuple|new|cmath)'?(?::| file not found)"
    r"|unknown type name '(?:namespace|class|template|using)')"
)

# what a failed stand-alone test (the generated test_*() methods) says; read from the output
# of `spack test run` and its results file only, never from a build log
TEST_PATTERNS = [
    (r"no lib([\w+.-]+) under the prefix", "test-library", "prefix"),
    (r"none of ([\w/.+-]+)\.\.\. under the prefix", "test-header", "prefix"),
    (r"(?:ProcessError: )?\S*/bin/([\w.+-]+): No such file or directory", "test-program", "prefix"),
    (CXX_IN_C, "test-language", "compiler"),
    (
        r"r3 run of ([\w.+-]+ \([^)]*\)): (?:exit status (?:-\d+|12[6-9]|1[3-9]\d|2\d\d|timed out)|no output)",
        "test-run",
        "prefix",
    ),
]


def diagnose_test(text) -> List[Finding]:
    """Findings in what a failed stand-alone test printed."""
    return diagnose(text, TEST_PATTERNS)


def installed_files(prefix, kind):
    """What an install put where a test looks: library stems (``libmxml4.so.2`` -> ``libmxml4``),
    header names, or program names, the nearest to the top first."""
    found = []
    dirs = {"library": ("lib", "lib64"), "header": ("include",), "program": ("bin",)}[kind]
    for d in dirs:
        top = os.path.join(prefix or "", d)
        for root, _dirs, files in sorted(os.walk(top)):
            for f in sorted(files):
                if kind == "library":
                    m = re.match(r"^(lib[\w+-]+?)(?:[.-]\d+)*\.(?:so|a|dylib)(?:\.\d+)*$", f)
                    if m:
                        found.append(m.group(1))
                elif kind == "header" and re.search(r"\.(h|hh|hpp|hxx)$", f):
                    found.append(f)
                elif kind == "program" and os.access(os.path.join(root, f), os.X_OK):
                    found.append(f)
            if kind == "program":
                break  # bin/ itself
    return list(dict.fromkeys(found))


def _nearest(names_, want):
    """``names_`` with those named like ``want`` first (``libmxml4`` for ``libmxml``)."""
    w = re.sub(r"^lib|\.\w+$", "", want.lower())
    return sorted(names_, key=lambda n: (not re.sub(r"^lib|\.\w+$", "", n.lower()).startswith(w), w not in n.lower()))


def fix_test(text, finding, prefix) -> Tuple[Optional[str], Optional[str]]:
    """A stand-alone test that looked for what the install names otherwise: the names the
    prefix has instead, (new text or None, what was done)."""
    if finding.kind == "test-library":
        have = installed_files(prefix, "library")
        if not have:
            return None, None
        lists = re.findall(r"find_libraries\(\[([^\]]*)\]", text)
        old = [n for lst in lists for n in re.findall(r"[\"']([^\"']+)[\"']", lst)]
        new_names = list(dict.fromkeys(old + _nearest(have, "lib" + finding.subject)))
        new = re.sub(
            r"find_libraries\(\[[^\]]*\]", "find_libraries([%s]" % ", ".join('"%s"' % n for n in new_names), text
        )
        return new, "the link test looks for %s, which the prefix has (%s)" % (
            ", ".join(n for n in new_names if n not in old),
            finding.evidence,
        )
    if finding.kind == "test-header":
        have = installed_files(prefix, "header")
        m = re.search(r"for name in \[([^\]]*)\]", text)
        if not have or not m:
            return None, None
        old = re.findall(r"[\"']([^\"']+)[\"']", m.group(1))
        want = old[0] if old else finding.subject
        new_names = list(dict.fromkeys(_nearest(have, want)))[:6]
        new = text[: m.start(1)] + ", ".join('"%s"' % n for n in new_names) + text[m.end(1) :]
        return new, "the link test includes %s, which the prefix has (%s)" % (new_names[0], finding.evidence)
    if finding.kind == "test-program":
        have = installed_files(prefix, "program")
        literal = 'join_path(self.prefix.bin, "%s")' % finding.subject
        if not have or literal not in text:
            return None, None
        other = _nearest(have, finding.subject)[0]
        new = text.replace(literal, 'join_path(self.prefix.bin, "%s")' % other)
        return new, "the test runs %s, which bin/ has, not %s (%s)" % (other, finding.subject, finding.evidence)
    if finding.kind == "test-language":
        return link_test_in_cxx(text, finding)
    if finding.kind == "test-run":
        return next_run_args(text, finding)
    return None, None


def link_test_in_cxx(text, finding) -> Tuple[Optional[str], Optional[str]]:
    """The link test written and compiled as C++ (its file, its compiler), and ``cxx`` a
    dependency of the recipe."""
    if 'r3_link_test.c"' not in text:
        return None, None
    new = text.replace('r3_link_test.c"', 'r3_link_test.cpp"').replace("a C program", "a C++ program")
    new = re.sub(
        r"Executable\(self\.compiler\.cc\)(?=\s*\n\s*\w+\(\s*\"-I\" \+ self\.prefix\.include)",
        "Executable(self.compiler.cxx)",
        new,
    )
    new = add_dependency(new, "cxx", ("build",)) or new
    return new, "the link test is C++: the header it includes is (%s)" % finding.evidence


def _run_args_literal(arg):
    return ('"%s", ' % arg) if arg else ""


def _shown(arg):
    return arg or NO_ARGUMENT


def next_run_args(text, finding) -> Tuple[Optional[str], Optional[str]]:
    """The test that ran ``finding.subject`` (``prog (--help)``) runs it the next way of
    ``RUN_ARGS`` it has not tried (its docstring keeps what it tried); None when it has
    tried them all."""
    m = re.match(r"([\w.+-]+) \(([^)]*)\)$", finding.subject)
    if not m:
        return None, None
    exe, shown = m.group(1), m.group(2)
    # the method that says it (its message names the program, or, where it runs each program
    # in bin/, its docstring the way): from its def to the next def
    said = re.search(
        r"r3 run of %s \(%s\)|\(%s(?:; tried [^)]*)?\): it loads"
        % (re.escape(exe), re.escape(shown), re.escape(shown)),
        text,
    )
    if not said:
        return None, None
    starts = [x.start() for x in re.finditer(r"(?m)^    def ", text)] + [len(text)]
    hit = said.start()
    begin = max((x for x in starts if x <= hit), default=None)
    if begin is None:
        return None, None
    end = min(x for x in starts if x > hit)
    method = text[begin:end]
    doc = re.search(r"\((%s)(?:; tried ([^)]*))?\): it loads" % re.escape(shown), method)
    tried = [shown] + (doc.group(2).split(", ") if doc and doc.group(2) else [])
    left = [x for x in RUN_ARGS if _shown(x) not in tried]
    if not left:
        return None, None
    nxt = left[0]
    current = "" if shown == NO_ARGUMENT else shown
    new_method = method.replace(
        "exe(%soutput=str" % _run_args_literal(current), "exe(%soutput=str" % _run_args_literal(nxt)
    )
    new_method = new_method.replace("(%s): exit status" % shown, "(%s): exit status" % _shown(nxt))
    new_method = new_method.replace("(%s): no output" % shown, "(%s): no output" % _shown(nxt))
    if doc:
        new_method = new_method.replace(doc.group(0), "(%s; tried %s): it loads" % (_shown(nxt), ", ".join(tried)))
    if new_method == method:
        return None, None
    return text[:begin] + new_method + text[end:], "the test runs %s %s instead: %s" % (
        exe,
        nxt or "with no argument",
        finding.evidence,
    )


def apply(text, findings, prefix) -> Tuple[Optional[str], List[str]]:
    """Every repair the test's findings call for; (new text or None, descriptions)."""
    done, current = [], text
    for f in findings:
        new, what = fix_test(current, f, prefix)
        if new and new != current:
            current, done = new, done + [what]
    return (current if done else None), done

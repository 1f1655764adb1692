"""Python projects: setup.py / pyproject.toml."""

import os
import re

from .facts import Analysis, Dependency, languages_from_files, read_file


def analyze_python(a: Analysis):
    text = read_file(os.path.join(a.root, "pyproject.toml"))
    m = re.search(r'(?m)^version\s*=\s*"([^"]+)"', text)
    if m:
        a.version = m.group(1)
    m = re.search(r"(?ms)^dependencies\s*=\s*\[(.*?)\]", text)
    if m:
        for req in re.findall(r'"([^"]+)"', m.group(1)):
            name = re.split(r"[<>=!~; \[]", req)[0]
            a.dependencies.append(Dependency(name, "python", "pyproject.toml: %s" % req, ["build", "run"]))
    m = re.search(r"(?ms)^\[build-system\].*?requires\s*=\s*\[(.*?)\]", text)
    a.build["build_requires"] = (
        [re.split(r"[<>=!~; \[]", r)[0] for r in re.findall(r'"([^"]+)"', m.group(1))] if m else ["setuptools"]
    )
    m = re.search(r'(?m)^license\s*=\s*(?:\{\s*text\s*=\s*)?"([^"]+)"', text)
    if m:
        a.license = m.group(1)
    a.languages = [x for x in languages_from_files(a.root)]

"""The text of the recipe stage -- model prompts, build-system templates -- read from ``recipes/``.

Where ``recipes/`` is found (the first that exists):

1. ``$R3_RECIPES_DIR`` when set (it must then be a directory: no silent fallback);
2. ``<repository root>/recipes``, next to the ``spack_r3`` package: a source checkout or an
   editable install (``pip install -e .``), where the files are read in place;
3. ``<prefix>/share/spack-r3/recipes``: a regular install, where ``setup.cfg``'s
   ``[options.data_files]`` put it (``<prefix>`` is the install scheme's data path,
   ``sys.prefix``, or the prefix the package itself is installed under).

A candidate counts only if it has ``templates/package.py.tmpl``.

Two kinds of file (``recipes/README.md`` tells how to edit them):

- ``<name>.md`` (the prompts): the whole file is one template;
- ``<name>.tmpl`` (``templates/*.py.tmpl``, ``prompts/diagnostics.tmpl``): named sections,
  each starting at a line ``#@ <section>`` and running to the next such line; lines before
  the first are comments for the reader.

A template's text has its trailing blank lines dropped (the code adds the line breaks it joins
with), and is rendered with :class:`string.Template`: ``$name`` or ``${name}`` is a placeholder,
``$$`` a literal ``$``. A missing directory, file, section or placeholder is an ``R3Error``.
"""

import os
import string
import sys
import sysconfig

from ..errors import R3Error

ENV_VAR = "R3_RECIPES_DIR"
SECTION_MARK = "#@"
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../spack_r3
MARKER = os.path.join("templates", "package.py.tmpl")  # a candidate without it is not ours
_cache = {}


def candidates():
    """Where ``recipes/`` is looked for, in order, after ``$R3_RECIPES_DIR``."""
    out = [os.path.join(os.path.dirname(_PACKAGE_DIR), "recipes")]
    # <prefix>/lib/pythonX.Y/site-packages/spack_r3 -> <prefix>
    installed_under = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(_PACKAGE_DIR))))
    for prefix in (sysconfig.get_path("data"), sys.prefix, installed_under):
        if prefix:
            out.append(os.path.join(prefix, "share", "spack-r3", "recipes"))
    return list(dict.fromkeys(out))


def recipes_dir():
    """The ``recipes/`` directory in use (see the module documentation)."""
    env = os.environ.get(ENV_VAR)
    if env:
        if not os.path.isdir(env):
            raise R3Error(
                "%s=%s is not a directory (it should hold the recipe stage's prompts/ and templates/)" % (ENV_VAR, env)
            )
        return os.path.abspath(env)
    for c in candidates():
        if os.path.isfile(os.path.join(c, MARKER)):
            return c
    raise R3Error(
        "the recipe stage's templates (recipes/) were not found; looked in %s; set %s to the "
        "recipes/ directory of a spack-r3 checkout" % (", ".join(candidates()), ENV_VAR)
    )


def _trim(lines):
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines)


def _parse(path):
    """{section: text} of a template file (section None: the whole file of a prompt)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (path, st.st_mtime_ns, st.st_size)
    if key not in _cache:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
        except (OSError, UnicodeDecodeError) as err:
            raise R3Error("cannot read recipe template %s: %s" % (path, err)) from None
        if not path.endswith(".tmpl"):
            sections = {None: _trim(lines)}
        else:
            sections, name, cur = {}, None, None
            for line in lines:
                if line.startswith(SECTION_MARK):
                    if name is not None:
                        sections[name] = _trim(cur)
                    name, cur = line[len(SECTION_MARK) :].strip(), []
                elif name is not None:
                    cur.append(line)
            if name is not None:
                sections[name] = _trim(cur)
        _cache[key] = sections
    return _cache[key]


def text(path, section=None):
    """The raw text of a template: ``path`` relative to ``recipes/``, e.g. ``prompts/system.md``
    or ``templates/cmake.py.tmpl`` with a ``section``."""
    root = recipes_dir()
    full = os.path.join(root, *path.split("/"))
    sections = _parse(full)
    if sections is None:
        how = (
            ("the directory %s names" % ENV_VAR)
            if os.environ.get(ENV_VAR)
            else ("set %s to use another recipes/ directory" % ENV_VAR)
        )
        raise R3Error("recipe template %s not found in %s (%s)" % (path, root, how))
    if section not in sections:
        if section is None:
            raise R3Error("recipe template %s has sections (%s): name one" % (full, ", ".join(sorted(sections))))
        raise R3Error(
            "recipe template %s has no section %r (it has: %s)"
            % (full, section, ", ".join(sorted(s for s in sections if s)) or "none")
        )
    return sections[section]


def render(path, section=None, **values):
    """A template with its ``$placeholders`` filled in from ``values``."""
    tmpl = text(path, section)
    try:
        return string.Template(tmpl).substitute(values)
    except KeyError as err:
        raise R3Error(
            "recipe template %s%s uses the placeholder $%s, which is not given here (given: %s)"
            % (path, "#" + section if section else "", err.args[0], ", ".join(sorted(values)) or "none")
        ) from None
    except ValueError as err:
        raise R3Error(
            "recipe template %s%s: %s (write $$ for a literal $)" % (path, "#" + section if section else "", err)
        ) from None


def lines(path, section=None, **values):
    """``render`` split into lines."""
    return render(path, section, **values).split("\n")

"""C++ function names as people read and type them.

Kernels are identified by their symbol, which for C++ is mangled
(``_ZN6Solver11applyStressERSt6vectorIdSaIdEEi``). Here the symbol is demangled
with the C++ runtime's own ``__cxa_demangle`` (through ctypes: no c++filt needed),
shortened for a table column, and matched against what a user typed: the symbol,
the demangled name (``Solver::applyStress(std::vector<double, std::allocator<double> >&, int)``
or its tidy form ``Solver::applyStress(std::vector<double>&, int)``) or the
qualified name alone (``Solver::applyStress``). C names pass through unchanged;
Fortran's are read as ``fortran`` reads them (``grid::smooth``, or ``smooth``).
"""

import ctypes
import functools
import re

from . import fortran

DISPLAY_WIDTH = 48  # a kernel column wider than this pushes the numbers off a terminal

# How sure a match is: callers keep only the best level, so that ``saxpy`` means the
# C function ``saxpy`` rather than also every C++ overload named ``saxpy``.
EXACT, DEMANGLED, QUALIFIED = 3, 2, 1

# Template arguments that only repeat a default: left out of what a table shows.
_DEFAULT_ARGS = (
    "std::allocator<",
    "std::char_traits<",
    "std::less<",
    "std::equal_to<",
    "std::hash<",
    "std::default_delete<",
)
_OPERATOR = r"(?<!\w)operator(?:[^\w\s]{1,3}|\(\)|\[\])"  # operator<, operator(), ...: not brackets
_OPERATOR_AT = re.compile(_OPERATOR)
_OPERATOR_END = re.compile(_OPERATOR + "$")


@functools.lru_cache(maxsize=None)
def _demangler():
    """``__cxa_demangle`` and ``free``, or None where no C++ runtime can be loaded."""
    for lib in ("libstdc++.so.6", "libc++abi.so.1", "libc++.so.1"):
        try:
            fn = ctypes.CDLL(lib).__cxa_demangle
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p  # a malloc'd buffer, freed below
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        free = ctypes.CDLL(None).free
        free.argtypes = [ctypes.c_void_p]
        return fn, free
    return None


@functools.lru_cache(maxsize=4096)
def demangle(symbol):
    """The demangled name of ``symbol``; ``symbol`` itself if it is not a mangled name
    (C functions) or cannot be demangled."""
    if symbol.startswith("_Q"):  # flang's: _QMgridPsmooth is grid::smooth
        return fortran.demangle(symbol) or symbol
    # __cxa_demangle also reads bare type codes ("i" is "int"): only _Z names are symbols.
    demangler = _demangler()
    if not symbol.startswith("_Z") or demangler is None:
        return symbol
    fn, free = demangler
    status = ctypes.c_int()
    buf = fn(symbol.encode(), None, None, ctypes.byref(status))
    if not buf:
        return symbol
    try:
        return ctypes.string_at(buf).decode(errors="replace") if status.value == 0 else symbol
    finally:
        free(buf)


def _matching_open(text, close):
    """Index of the ``(`` that the ``)`` at ``close`` closes, or -1."""
    depth = 0
    for i in range(close, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _split(name):
    """(qualified name, parameter list, what follows it) of a demangled function name.

    ``void ns::f<int>(int) const [clone .cold]`` -> (``ns::f<int>``, ``(int)``, `` const``).
    A name without a parameter list (a variable, a C name) is (name, "", "")."""
    base = re.sub(r"( \[clone [^\]]*\])+$", "", name)
    close = base.rfind(")")
    if close < 0 or not re.fullmatch(r"( const| volatile| &&| &| noexcept)*", base[close + 1 :]):
        return name, "", ""
    start = _matching_open(base, close)
    if start <= 0:
        return name, "", ""
    head = base[:start]
    # Function templates carry their return type first ("void f<int>(int)"): drop it.
    if head.endswith(">"):
        depth, i = 0, len(head) - 1
        while i >= 0:
            op = _OPERATOR_END.search(head, 0, i + 1)
            if op:
                i = op.start() - 1
                continue
            c = head[i]
            if c in ">)":
                depth += 1
            elif c in "<(":
                depth -= 1
            elif c == " " and depth == 0:
                if _OPERATOR_END.search(head, 0, i):  # "operator< <A>": not the return type's end
                    i -= 1
                    continue
                head = head[i + 1 :]
                break
            i -= 1
    return head, base[start : close + 1], base[close + 1 :]


def _drop_default_args(text):
    """``std::vector<double, std::allocator<double> >`` -> ``std::vector<double>``.

    Only a last template argument is a default one; ``f(int, std::allocator<char> const&)``
    keeps its parameter."""
    text = text.replace("std::__cxx11::", "std::")
    text = text.replace("std::basic_string<char, std::char_traits<char>, std::allocator<char> >", "std::string")
    changed = True
    while changed:  # basic_string<wchar_t, char_traits, allocator>: allocator first, then traits
        changed = False
        for arg in _DEFAULT_ARGS:
            at = text.find(", " + arg)
            while at >= 0:
                depth, end = 0, at + 2 + len(arg) - 1
                while end < len(text):
                    depth += {"<": 1, ">": -1}.get(text[end], 0)
                    if depth == 0:
                        break
                    end += 1
                if re.match(r"\s*>", text[end + 1 :]):
                    text = text[:at] + text[end + 1 :]
                    changed = True
                at = text.find(", " + arg, at + 1)
    return re.sub(r"(?<=[^>\s]) >", ">", text)


def tidy(symbol):
    """The demangled name without the template arguments that only repeat defaults."""
    full = demangle(symbol)
    return full if full == symbol else _drop_default_args(full)


def qualified(symbol):
    """The demangled name without return type and parameters: ``Solver::applyStress``."""
    return _split(demangle(symbol))[0]


def _elide_templates(name):
    """``a::B<long, list>::f<int>`` -> ``a::B<...>::f<...>``."""
    out, depth = [], 0
    i = 0
    while i < len(name):
        op = _OPERATOR_AT.match(name, i) if depth == 0 else None
        if op:
            out.append(op.group(0))
            i = op.end()
            continue
        c = name[i]
        if c == "<":
            if depth == 0:
                out.append("<...>")
            depth += 1
        elif c == ">":
            depth -= 1
        elif depth == 0:
            out.append(c)
        i += 1
    return "".join(out)


def display(symbol, width=DISPLAY_WIDTH):
    """What a table shows for ``symbol``: the tidy demangled name when it fits ``width``,
    else the qualified name with "(...)" for the parameters (and "<...>" for template
    arguments if still too long). C names are shown as they are."""
    name = tidy(symbol)
    if len(name) <= width or name == symbol:
        return name
    head, params, rest = _split(name)
    if not params:
        return name
    params = "(...)" if params != "()" else params
    short = head + params + rest
    if len(short) > width:
        short = _elide_templates(head) + params + rest
    return short


def _squash(text):
    return re.sub(r"\s+", "", text)


def match_level(ref, symbol):
    """How ``ref`` (what a user typed) names ``symbol``: EXACT, DEMANGLED, QUALIFIED or 0.

    Spaces do not matter (``std::vector<double>&`` = ``std::vector<double> &``)."""
    if ref == symbol:
        return EXACT
    if fortran.names_match(ref, symbol):  # Fortran names are case-insensitive
        return DEMANGLED if "::" in ref or symbol.endswith("_") else QUALIFIED
    full = demangle(symbol)
    if full == symbol:
        return 0  # a C name matches only itself
    want = _squash(ref)
    forms = [_split(full), _split(tidy(symbol))]
    # with or without a function template's return type ("void f<int>(int)", "f<int>(int)")
    if want in {_squash(full), _squash(tidy(symbol))} | {_squash("".join(f)) for f in forms}:
        return DEMANGLED
    if want in {_squash(f[0]) for f in forms}:
        return QUALIFIED
    return 0


def best_matches(ref, symbols):
    """(level, the symbols among ``symbols`` that ``ref`` names best); (0, []) if none."""
    levels = {s: match_level(ref, s) for s in set(symbols)}
    best = max(levels.values(), default=0)
    return best, sorted(s for s, level in levels.items() if best and level == best)

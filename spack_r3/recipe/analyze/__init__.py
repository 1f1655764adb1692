"""Analyze a source tree: build system, version, variants, dependencies, languages, license.

Pure file reading: nothing here builds or runs anything from the tree. Dependency names are
the project's own (``find_package(ZLIB)``, ``pkg_check_modules(... r3tvec)``, ``-lm``);
``names.resolve`` maps them to Spack package names afterwards. One module per build
system (``cmake``, ``meson``, ``autotools``, ``makefile``, ``python``), on what an analysis
finds (``facts``); ``tree`` picks the build and runs its reader.
"""

from .facts import SKIP_DIRS, Analysis, Dependency, RecipeCheck, RecipeVariant, read_file, variant_name, walk_tree
from .makefile import COMPILERS
from .tree import analyze

__all__ = [
    "COMPILERS",
    "SKIP_DIRS",
    "Analysis",
    "Dependency",
    "RecipeCheck",
    "RecipeVariant",
    "analyze",
    "read_file",
    "variant_name",
    "walk_tree",
]

"""Record, replay and tune the hot kernels of a package (spack-r3)."""

import os
import sys

description = "record, replay and tune the hot kernels of a package"
section = "developer"
level = "long"

try:
    import spack_r3.cli
except ImportError:  # registered through config:extensions without installing the project
    sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 5)))
    import spack_r3.cli


def setup_parser(subparser):
    spack_r3.cli.setup_parser(subparser)


def r3(parser, args):
    return spack_r3.cli.dispatch(args)

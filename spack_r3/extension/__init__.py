"""Where Spack finds the ``spack r3`` command extension.

Spack wants an extension root named ``spack-<name>`` holding ``<name>/cmd/<name>.py``.
Registration is either ``config:extensions: [<root>]`` or the ``spack.extensions``
entry point below (see setup.cfg).
"""

import os

EXTENSION_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spack-r3")


def extension_roots():
    return [EXTENSION_ROOT]

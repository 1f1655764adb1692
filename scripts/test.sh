#!/usr/bin/env bash
# The whole test suite (what .ci/run runs). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
export SPACK_PYTHON=${SPACK_PYTHON:-$PWD/.venv/bin/python}
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@" tests

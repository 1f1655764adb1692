#!/usr/bin/env bash
# The whole test suite (what .ci/run runs): installs what the tests need
# (scripts/setup.sh, idempotent), then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export SPACK_PYTHON=${SPACK_PYTHON:-$PWD/.venv/bin/python}
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@" tests

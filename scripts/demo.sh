#!/usr/bin/env bash
# The main job on the bundled demo: set up, record the heat stencil, list its
# kernels, replay the hottest one under the baseline and under a changed pipeline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ws=${R3_WORKSPACE:-$PWD/.r3-demo}
r3=".venv/bin/r3 --workspace $ws"
$r3 record --source repos/r3/sources/heat --run "./heat 512 300"
$r3 kernels
$r3 replay jacobi_step --repeat 20
$r3 replay jacobi_step --pipeline O3,unroll=0,vectorize=0 --repeat 20 --pairs 11

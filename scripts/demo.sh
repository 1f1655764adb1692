#!/usr/bin/env bash
# The main job on the bundled demos: set up, record the heat stencil, list its kernels,
# replay the hottest one under the baseline and under a changed pipeline; then tune the
# dense demo (record, search, confirmed winners, report and plot). 4m47s in all on 2
# cores shared with other work (2m48s of CPU); a demo, not a measurement: the budget is small.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ws=${R3_WORKSPACE:-$PWD/.r3-demo}
r3=".venv/bin/r3 --workspace $ws"
$r3 record --source repos/r3/sources/heat --run "./heat 512 300"
$r3 kernels
$r3 replay jacobi_step --repeat 20
$r3 replay jacobi_step --pipeline O3,unroll=0,vectorize=0 --repeat 20 --pairs 11
# The main job: search each hot kernel of the dense demo (pipelines, Polly, source
# rewrites by rules), confirm the winners, and write the report and its plot.
$r3 tune --source repos/r3/sources/dense --run "./dense 120 1" --budget 12 --min-share 0.05

"""GPU targets without a GPU: device IR for a named GPU, code generation per target and
pipeline, resources (registers, spills, shared memory) from the vendor's own tools, and
theoretical occupancy at a launch geometry. What the search asks of it is ``screen``:
reject a candidate that spills or cannot launch before any GPU time is spent.

- ``targets``: GPU target names (sm_80, gfx942, ...), their per-architecture limits, the
  Spack variant a target keys an emitted variant to
- ``occupancy``: launch geometry and theoretical occupancy from resources and limits
- ``deviceir``: a unit's device IR for one target, from its source and compile command
- ``codegen``: optimize with a pipeline, emit PTX (ptxas -v) or an AMDGPU code object
  (its metadata note), per kernel resources
- ``screen``: the per-target verdict of one candidate
- ``cuda``: the CUDA driver API (cuda-python): device memory at fixed addresses, launch,
  device events (needs a GPU; never run here)
- ``cudareplay``: a recorded CUDA launch replayed through ``cuda`` (needs a GPU), and
  screened statically on GPU targets (no GPU)
- ``relocate``: pointers to a device variable's recorded address moved to the replay
  module's copy before a launch, read back as recorded after it (numpy, no GPU)
- ``cudaworker``: the worker a replay server runs for cuda captures (each request in a
  forked child, through ``cudareplay``)
- ``geometry``: a CUDA launch's block and grid as search dimensions
- ``hook``: what r3 tune asks of this package (--gpu, a screen of each device kernel's candidates)
"""

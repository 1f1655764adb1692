"""Compile: a kernel's IR to the code that runs, the one road replay measures and every
build takes (the ``+r3`` build, the MEP, the device code generation): pipelines as
settings (``pipeline.py``), the module edits (``module.py``), specialization on recorded
arguments (``specialize.py``) and the stages that run them (``stages.py``). Nothing here
imports replay, search, emit or mep: they import this."""

"""The adapter to Spack: everything that talks to Spack lives in this package (running it:
``runner``, ``locate``; its repositories and configuration scopes: ``repos``, ``sandbox``,
``devpath``; the packages that wrap a recipe: ``wrap``; the launcher behind its compiler
wrapper: ``hook``). It imports nothing of the pipeline's stages; the flows that use it to
record, emit and check live in ``spack_r3.roundtrip``."""

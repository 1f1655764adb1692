"""Emit: confirmed winners -> a build plan (``plan``) and the launcher that builds it
(``apply``, ``r3-apply``). Writing the Spack package around a plan is ``spack_r3.roundtrip.emit``."""

"""Everything that talks to Spack lives in this package (and nowhere else)."""

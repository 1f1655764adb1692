"""The Spack round trip, built on the adapter (``spack_r3.spack``): a package's build
recorded through Spack (``record``), its tuned variant written into a Spack repo
(``emit``), the ``+r3`` install checked against ``~r3`` inside the application
(``check``), and what is tuned where, and what went stale (``status``)."""

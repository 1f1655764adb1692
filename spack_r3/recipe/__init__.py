"""The recipe box: retrieve or generate the Spack recipe of a package (after SpackIt).

analyze -> names -> retrieve -> generate -> validate -> refine (fixes), orchestrated by
``pipeline.make_recipe``.
"""

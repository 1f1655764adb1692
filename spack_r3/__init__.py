"""spack-r3: record, replay and remix the hot kernels of HPC applications.

Data flows one way: recipe -> record -> capture -> replay -> search -> emit.
"""

__version__ = "0.1.0"

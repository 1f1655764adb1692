"""Minimal Executable Programs: a captured kernel as a directory that builds and runs alone
(``r3 mep``). ``slice``: the kernel's source cut out of its unit; ``writer``: the directory
(slice or IR, driver, data, Makefile, README); ``driver.c``: the program around the kernel."""

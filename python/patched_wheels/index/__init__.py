"""A PEP 503 simple index over a directory of wheels, and the mirror that fills one."""

"""Shared infrastructure of every stage: atomic files, the persistent caches, bytecode, names, supervised children,
the cycle collector's pauses."""

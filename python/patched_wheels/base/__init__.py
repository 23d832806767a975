"""Shared infrastructure of every stage: atomic files, the persistent caches, the digest memo, bytecode, names, supervised children."""

"""Shared libraries: the one ELF reader, dynamic-section edits, the ELF cache, the library graph, its load order, the system's libraries."""

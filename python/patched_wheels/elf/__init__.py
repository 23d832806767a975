"""Shared libraries: the one ELF reader, dynamic-section edits, the ELF cache, the library graph and its listing, its load order, the system's libraries."""

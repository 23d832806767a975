"""Writing a patched wheel: diffs, versions, the rewrite pipeline, RPATH edits, the split, patch_wheel."""

"""The lock formats: their registry, and each one's reader and writer (requirements, uv.lock, pylock.toml), on the lock model."""

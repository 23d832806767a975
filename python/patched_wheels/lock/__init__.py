"""Locks: the model, markers, the plan of what changes, resolving pins to wheels, applying the plan."""

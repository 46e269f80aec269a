"""Doors: the ways agent code reaches the step pipeline (the run context, the sandbox's
typed filesystem door)."""

"""Strict mode: agent code that reaches for nondeterminism outside the doors fails loudly
(:mod:`.guard` installs the guards; :mod:`.source` attributes a call to its source)."""

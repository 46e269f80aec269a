"""The command-line surface. Each command lives in its own ``cmd_*.py`` module."""

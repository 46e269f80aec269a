"""The workload written once for each system, the way its users would write it.

Each ``<system>_app.py`` is ordinary code for that system. The crash and divergence tests copy
it into a scratch directory and import it from there under its bare module name, so that the
divergence test can edit one line of it (the second step's arguments: ``query=ask``) like a
developer would, and let each system find out, or not, when it recovers or replays a run.
"""

#: The one line the divergence test edits in every app, and what it becomes.
STEP2_ARGS = "query=ask"
STEP2_ARGS_CHANGED = 'query=ask + " (edited)"'

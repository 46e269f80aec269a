"""The runtime. Its parts, bottom to top (``docs/architecture.md`` has the table of what each
may import): the shared vocabulary (``errors``, ``outcomes``, ``records``), ``tools``,
``policy`` (and the sandbox), ``strict``, the step ``pipeline``, the ``doors`` over it,
``runs`` (the engine, recovery, the lifecycle), ``replay`` (replay, the gate, forks, drift),
and the :class:`Runtime` facade (``runtime``)."""

"""The step pipeline: one entry behind every door.

A door (``RunContext``, the sandbox's :class:`~tracelock.runtime.doors.files.Files`, a
future HTTP or SDK capture) makes a :class:`StepRequest` and hands it to
:meth:`Pipeline.run`; the step passes the seven phases, each a function in
:mod:`tracelock.runtime.pipeline.phases`:

RECEIVE   :func:`~.phases.receive` numbers the step; the request arrives canonicalized
          (its arguments' canonical bytes and hash are computed once, when it is made)
PARSE     :func:`~.phases.parse` (a proposal: :func:`~.phases.parse_proposal`)
VALIDATE  :func:`~.phases.validate`
AUTHORIZE :func:`~.phases.authorize`
EXECUTE   :func:`~.phases.execute`
RECORD    :func:`~.phases.record`
RESPOND   :func:`~.phases.respond`

Recording, replaying, resuming and forking are modes of the same pipeline, set by what
the :class:`Pipeline` is built with (see :class:`RunState`); a step the recording
answers is matched and answered in :mod:`tracelock.runtime.pipeline.recorded`.
"""

from tracelock.runtime.pipeline.pipeline import Pipeline
from tracelock.runtime.pipeline.request import StepRequest, Task, tool_request
from tracelock.runtime.pipeline.state import Environment, ParentPrefix, RunState

__all__ = ["Environment", "ParentPrefix", "Pipeline", "RunState", "StepRequest", "Task", "tool_request"]

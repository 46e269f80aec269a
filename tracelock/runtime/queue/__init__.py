"""The durable run queue: ``submit`` a run from any process, workers on any machine take it
under a lease that fences their appends (docs/queue.md)."""

from tracelock.runtime.queue.submit import QueueRunError, QueueTimeoutError, RunHandle, submit
from tracelock.runtime.queue.worker import Worker, WorkerReport, requeue_if_resumable

__all__ = ["QueueRunError", "QueueTimeoutError", "RunHandle", "Worker", "WorkerReport", "requeue_if_resumable", "submit"]

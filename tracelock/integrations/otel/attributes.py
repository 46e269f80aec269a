"""Span names and attribute names: the OpenTelemetry GenAI semantic conventions and
tracelock's own.

The GenAI names are kept here, not imported from ``opentelemetry-semantic-conventions``,
whose GenAI constants are deprecated (the conventions moved to their own repository).
"""

from __future__ import annotations

__all__ = [
    "GEN_AI_AGENT_NAME",
    "GEN_AI_INPUT_MESSAGES",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_OUTPUT_MESSAGES",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MAX_TOKENS",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_TOOL_CALL_ARGUMENTS",
    "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "OP_CHAT",
    "OP_EXECUTE_TOOL",
    "OP_INVOKE_AGENT",
    "PROVIDER",
    "TRACELOCK_CODE",
    "TRACELOCK_ERROR",
    "TRACELOCK_FINGERPRINT",
    "TRACELOCK_KIND",
    "TRACELOCK_MODE",
    "TRACELOCK_OUTCOME",
    "TRACELOCK_PHASE",
    "TRACELOCK_RUN_ID",
    "TRACELOCK_STATUS",
    "TRACELOCK_STEP",
]

# gen_ai.* (GenAI semantic conventions)
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
# Content: only with capture_content=True.
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"

OP_INVOKE_AGENT = "invoke_agent"
OP_CHAT = "chat"
OP_EXECUTE_TOOL = "execute_tool"
PROVIDER = "tracelock"

# tracelock.* (tracelock's own)
TRACELOCK_RUN_ID = "tracelock.run.id"
TRACELOCK_MODE = "tracelock.mode"
TRACELOCK_STEP = "tracelock.step"
TRACELOCK_KIND = "tracelock.kind"
TRACELOCK_PHASE = "tracelock.phase"
TRACELOCK_OUTCOME = "tracelock.outcome"
TRACELOCK_CODE = "tracelock.code"
TRACELOCK_STATUS = "tracelock.status"
TRACELOCK_FINGERPRINT = "tracelock.fingerprint"
TRACELOCK_ERROR = "tracelock.error"

"""The step codes the pipeline's phases end a step with (documented in ``docs/errors.md``)."""

from __future__ import annotations

from tracelock.runtime.outcomes import Outcome, register_code

V = Outcome.VALIDATION_ERROR
D = Outcome.DENIED
X = Outcome.EXECUTION_ERROR

TOOL_UNKNOWN = register_code("TOOL_UNKNOWN", V, "the requested tool is not registered")
ARGS_NOT_JSON = register_code("ARGS_NOT_JSON", V, "the arguments are not canonical JSON (NaN, non-string keys, unsupported types...)")
ARGS_SCHEMA = register_code("ARGS_SCHEMA_MISMATCH", V, "the arguments do not satisfy the tool's JSON Schema")
PROPOSAL_NOT_JSON = register_code("PROPOSAL_NOT_JSON", V, "the proposal text is not strict JSON")
PROPOSAL_NOT_OBJECT = register_code("PROPOSAL_NOT_OBJECT", V, "the proposal is not a JSON object")
PROPOSAL_UNKNOWN_FIELD = register_code("PROPOSAL_UNKNOWN_FIELD", V, "the proposal has a top-level member outside {schema_version, id, action, args, reasoning}")
PROPOSAL_MISSING_FIELD = register_code("PROPOSAL_MISSING_FIELD", V, "the proposal lacks schema_version, id, action or args (nothing is generated for it)")
PROPOSAL_BAD_FIELD = register_code("PROPOSAL_BAD_FIELD", V, "a proposal member has the wrong type or form")
PROPOSAL_VERSION = register_code("PROPOSAL_SCHEMA_VERSION", V, "the proposal's schema_version is not supported")
LLM_REQUEST_INVALID = register_code("LLM_REQUEST_INVALID", V, "the LLM request is malformed (model, prompt/messages, max_tokens)")
APPROVAL_REJECTED = register_code("APPROVAL_REJECTED", D, "a human rejected the step that required approval")
APPROVAL_EXPIRED = register_code("APPROVAL_EXPIRED", D, "the step's approval window (approvals.ttl_ms, or the tool's approval_ttl_ms) closed before an approval arrived")
TOOL_RAISED = register_code("TOOL_RAISED", X, "the tool raised an exception")
TOOL_TIMEOUT = register_code("TOOL_TIMEOUT", X, "the tool did not finish within its timeout")
RESULT_CONTRACT = register_code("RESULT_CONTRACT_VIOLATION", X, "the tool's result does not satisfy its output contract (result_schema, or the schema of its return annotation): a contract drift; the result is not passed to the agent")
RESULT_NOT_JSON = register_code("RESULT_NOT_JSON", X, "the tool returned a value that is not canonical JSON")
LLM_NOT_CONFIGURED = register_code("LLM_NOT_CONFIGURED", X, "the runtime has no LLM provider")
LLM_PROVIDER_ERROR = register_code("LLM_PROVIDER_ERROR", X, "the LLM provider raised an exception")
LLM_RESPONSE_INVALID = register_code("LLM_RESPONSE_INVALID", X, "the LLM provider's response is not a JSON object with a string 'content'")
OPERATOR_RESOLVED_FAILURE = register_code("OPERATOR_RESOLVED_FAILURE", X, "an operator recorded that the step failed")
LLM_USAGE_UNKNOWN = register_code("LLM_USAGE_UNKNOWN", X, "a token budget is set and the LLM response's usage is in neither known shape (prompt_tokens/completion_tokens, input_tokens/output_tokens)")
LLM_COST_UNKNOWN = register_code("LLM_COST_UNKNOWN", X, "a cost budget is set and the LLM response has no cost_micro_usd and the policy's llm.prices has no price for its model")
HTTP_REQUEST_INVALID = register_code("HTTP_REQUEST_INVALID", V, "a captured HTTP request is malformed (method, URL)")
HTTP_CONNECT_ERROR = register_code("HTTP_CONNECT_ERROR", X, "the HTTP request could not connect (refused, DNS, TLS)")
HTTP_TIMEOUT = register_code("HTTP_TIMEOUT", X, "the HTTP request timed out (connect, read, write or pool)")
HTTP_TRANSPORT_ERROR = register_code("HTTP_TRANSPORT_ERROR", X, "the HTTP exchange failed in another way (protocol error, the connection dropped)")

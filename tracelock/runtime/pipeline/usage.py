"""What an LLM step's response says it used: tokens and cost, for the policy's budgets.

The provider contract (``docs/integrations.md``): a response is a JSON object whose
``usage`` member is in one of two shapes,

- OpenAI chat completions: ``prompt_tokens`` and ``completion_tokens``;
- Anthropic messages and OpenAI responses: ``input_tokens`` and ``output_tokens``
  (Anthropic's ``cache_creation_input_tokens`` and ``cache_read_input_tokens`` are input
  tokens too);

and whose cost is its ``cost_micro_usd`` member, or else the policy's ``llm.prices`` for the
model applied to the tokens. A shape that is neither is *unknown*: it counts nothing, and a
step whose run has a budget that needs the figure fails instead (never a silent zero).
"""

from __future__ import annotations

from typing import Any

__all__ = ["tokens_of", "cost_of"]

_INPUT_EXTRA = ("cache_creation_input_tokens", "cache_read_input_tokens")


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def tokens_of(response: Any) -> tuple[int, int] | None:
    """``(input, output)`` tokens of a response, or None when its usage shape is unknown."""
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return None
    for input_key, output_key in (("input_tokens", "output_tokens"), ("prompt_tokens", "completion_tokens")):
        if input_key in usage or output_key in usage:
            tokens_in, tokens_out = _count(usage.get(input_key)), _count(usage.get(output_key))
            if tokens_in is None or tokens_out is None:
                return None
            if input_key == "input_tokens":
                for extra in _INPUT_EXTRA:
                    if extra in usage:
                        more = _count(usage[extra])
                        if more is None:
                            return None
                        tokens_in += more
            return tokens_in, tokens_out
    return None


def cost_of(response: Any, price: dict[str, int] | None) -> int | None:
    """The response's cost in micro-USD: its own ``cost_micro_usd``, else ``price``
    (micro-USD per million input and output tokens) applied to its tokens, rounded up;
    None when neither is known."""
    if isinstance(response, dict):
        own = _count(response.get("cost_micro_usd"))
        if own is not None:
            return own
    if price is None:
        return None
    tokens = tokens_of(response)
    if tokens is None:
        return None
    total = tokens[0] * price["input"] + tokens[1] * price["output"]
    return -(-total // 1_000_000)

"""LangChain tools as tracelock tools: the schema is the tool's own, the side-effect class
the user's (default irreversible), what cannot be journaled is refused at registration,
and a missing extra is a typed error naming it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.tools import InjectedToolCallId, StructuredTool, tool
from pydantic import BaseModel, Field

from tests.integrations.capture_helpers import runtime_at
from tracelock.integrations.langgraph import (
    DEFAULT_SIDE_EFFECT,
    LangGraphNotInstalledError,
    openai_clients,
    register_langchain_tools,
    tool_node,
    tools_from_langchain,
)
from tracelock.integrations.otel import OtelNotInstalledError, SpanObserver
from tracelock.runtime.tools.toolkit import Toolkit
from tracelock.runtime.tools.tools import ToolDefinitionError


class Address(BaseModel):
    city: str
    zip_code: str = Field(pattern=r"^[0-9]{5}$")


class ShipArgs(BaseModel):
    order_id: str = Field(description="The order to ship")
    to: Address
    express: bool = False


def _ship(order_id: str, to: Address, express: bool = False) -> dict[str, Any]:
    return {"order": order_id, "city": to.city, "express": express}


ship = StructuredTool.from_function(_ship, name="ship", description="Ship an order.\nMore text.", args_schema=ShipArgs)


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def test_the_schema_is_the_tools_own_and_validates_like_it() -> None:
    made = {made.name: made for made in tools_from_langchain([ship, weather], side_effects={"weather": "read_only"})}
    assert made["ship"].side_effect == DEFAULT_SIDE_EFFECT == "irreversible"
    assert made["weather"].side_effect == "read_only"
    assert made["ship"].description == "Ship an order."
    assert made["ship"].schema["required"] == ["order_id", "to"]
    assert made["ship"].validate({"order_id": "A-1", "to": {"city": "Lyon", "zip_code": "69001"}}) is None
    # The nested model (a $ref into $defs) and its constraints are checked too.
    assert made["ship"].validate({"order_id": "A-1", "to": {"city": "Lyon", "zip_code": "x"}}) is not None
    assert made["ship"].validate({"order_id": "A-1"}) is not None
    assert made["weather"].validate({"city": 3}) is not None


def test_the_function_runs_the_langchain_tool_and_returns_json() -> None:
    made = {made.name: made for made in tools_from_langchain([ship, weather])}
    assert made["weather"].func(city="Oslo") == "sunny in Oslo"
    assert made["ship"].func(order_id="A-1", to={"city": "Lyon", "zip_code": "69001"}) == {
        "order": "A-1",
        "city": "Lyon",
        "express": False,
    }


def test_plain_functions_pydantic_results_and_async_tools_are_accepted(tmp_path: Path) -> None:
    def parcel(order_id: str) -> Address:
        """Where a parcel goes."""
        return Address(city="Nantes", zip_code="44000")

    async def _later(order_id: str) -> str:
        return f"later {order_id}"

    later = StructuredTool.from_function(coroutine=_later, name="later", description="Async only.")
    made = {made.name: made for made in tools_from_langchain([parcel, later])}
    assert made["parcel"].func(order_id="A") == {"city": "Nantes", "zip_code": "44000"}
    assert made["later"].is_async

    runtime = runtime_at(tmp_path, {"version": 1, "tools": [{"name": "parcel"}, {"name": "later"}]})
    register_langchain_tools(runtime, [parcel, later], default="read_only")

    def agent(ctx: Any, input: Any) -> Any:
        return [ctx.call("parcel", order_id="A"), ctx.call("later", order_id="B")]

    result = runtime.run(agent, None)
    assert result.output == [{"city": "Nantes", "zip_code": "44000"}, "later B"], result.to_dict()
    runtime.close()


def test_registration_refuses_what_cannot_be_journaled_or_was_misspelt() -> None:
    @tool
    def reply(text: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Reply, knowing the tool call id."""
        return text

    with pytest.raises(ToolDefinitionError) as injected:
        tools_from_langchain([reply])
    assert injected.value.details["injected"] == ["call_id"]
    with pytest.raises(ToolDefinitionError) as typo:
        tools_from_langchain([weather], side_effects={"wether": "read_only"})
    assert typo.value.details["unknown"] == ["wether"]
    with pytest.raises(ToolDefinitionError):
        tools_from_langchain([weather], default="harmless")  # type: ignore[arg-type]
    kit = Toolkit()
    register_langchain_tools(kit, [weather])
    assert list(kit.tools) == ["weather"]


@pytest.mark.parametrize(
    ("blocked", "use", "extra"),
    [
        (("langchain_core", "langchain_core.tools"), lambda: tools_from_langchain([]), "langgraph"),
        (("langgraph", "langgraph.prebuilt"), lambda: tool_node([]), "langgraph"),
        (("openai",), openai_clients, "openai"),
    ],
    ids=["langchain_core", "langgraph", "openai"],
)
def test_a_missing_extra_is_a_typed_error_naming_it(monkeypatch: pytest.MonkeyPatch, blocked: tuple[str, ...], use: Any, extra: str) -> None:
    for module in blocked:
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(LangGraphNotInstalledError) as raised:
        use()
    assert raised.value.code == "LANGGRAPH_NOT_INSTALLED"
    assert raised.value.details["extra"] == extra
    assert f"pip install 'tracelock[{extra}]'" in raised.value.message


def test_the_otel_adapter_without_opentelemetry_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    with pytest.raises(OtelNotInstalledError) as raised:
        SpanObserver()
    assert raised.value.code == "OTEL_NOT_INSTALLED"
    assert "pip install 'tracelock[otel]'" in raised.value.message

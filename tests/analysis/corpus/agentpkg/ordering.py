"""Set iteration whose order does and does not reach the run."""

from typing import Any

TOOLS = frozenset({"search", "fetch", "summarise"})


def fan_out(ctx: Any, names: list[str]) -> list[Any]:
    pending = set(names)
    results = []
    for name in pending:  # expect: TL-ORDER-001
        results.append(ctx.call(name))
    for name in sorted(pending):
        results.append(ctx.call(name))
    for tool in TOOLS:  # expect: TL-ORDER-001
        ctx.call(tool)
    upper = [n.upper() for n in {"a", "b"}]  # expect: TL-ORDER-001
    listed = list({n.lower() for n in names})  # expect: TL-ORDER-001
    joined = ", ".join(pending | {"extra"})  # expect: TL-ORDER-001
    stable = ", ".join(sorted(set(names)))
    count = 0
    for _ in pending:
        count += 1
    total = len(pending) + sum(len(n) for n in pending)
    first = pending.pop()  # expect: TL-ORDER-001
    return [results, upper, listed, joined, stable, count, total, first]


def typed(tags: set[str]) -> list[str]:
    return [t.strip() for t in tags]  # expect: TL-ORDER-001

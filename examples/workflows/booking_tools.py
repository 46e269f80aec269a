"""The tools of the booking workflow (booking.yaml): a read-only search, an idempotent seat
hold and an irreversible payment. Stand-ins that answer from tables, so the example runs
anywhere; real ones would call an airline and a payment provider."""

from __future__ import annotations

from tracelock import Toolkit

kit = Toolkit()

_FLIGHTS = {
    ("LIS", "AMS"): {"flight": "TL-204", "price_cents": 18900},
    ("AMS", "LIS"): {"flight": "TL-205", "price_cents": 17400},
}


@kit.tool(side_effect="read_only", timeout=5.0)
def search_flights(origin: str, destination: str) -> dict[str, object]:
    found = _FLIGHTS.get((origin, destination))
    if found is None:
        raise LookupError(f"no flight from {origin} to {destination}")
    return dict(found)


@kit.tool(side_effect="idempotent", timeout=5.0)
def hold_seat(flight: str, traveller: str, idempotency_key: str) -> dict[str, str]:
    # A real provider keeps one hold per key, so a retried call holds the same seat.
    return {"hold_id": f"H-{flight}-{traveller.split()[0].upper()}", "flight": flight}


@kit.tool(side_effect="irreversible", timeout=None)
def pay(hold_id: str, amount_cents: int) -> dict[str, object]:
    return {"paid": amount_cents, "hold_id": hold_id, "status": "captured"}

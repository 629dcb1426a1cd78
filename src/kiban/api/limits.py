"""How much the API takes at once (see ``kiban.api.admission``): plain values, light to import
(``kiban up``'s options default to them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AdmissionLimits:
    """How much the API takes at once; ``kiban up`` sets the per-principal ones."""

    max_requests: int = 64
    max_requests_per_principal: int = 16
    max_waiting: int = 256
    max_waiting_per_principal: int = 64
    queue_wait_s: float = 2.0
    max_follows: int = 512
    max_follows_per_principal: int = 16
    max_token_lookups: int = 16
    """Store reads of tokens not cached, at once (a flood of made-up tokens waits here)."""
    max_body_bytes: int = 2 << 20
    """A body is read no further (413): twice the largest manifest, which a submission refuses
    with a 422 naming the limit."""
    retry_after_s: int = 1

    def __post_init__(self) -> None:
        for name in (
            "max_requests",
            "max_requests_per_principal",
            "max_follows",
            "max_follows_per_principal",
            "max_token_lookups",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '-')} must be at least 1")
        if self.queue_wait_s < 0 or self.max_waiting < 0 or self.max_waiting_per_principal < 0:
            raise ValueError("waits and lines must not be negative")

"""Prometheus metrics of one model server, in a registry of its own (no process-global state)."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["CONTENT_TYPE", "ServerMetrics"]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


class ServerMetrics:
    """Request latency by route, requests by status, tokens generated, throughput, batch sizes."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = {"model_name": model_name}
        self.request_seconds = Histogram(
            "kiban_model_request_duration_seconds",
            "Time from request to the last byte of the response, by route.",
            ["route"],
            registry=self.registry,
            buckets=LATENCY_BUCKETS,
        )
        self.requests = Counter(
            "kiban_model_requests",
            "Requests answered, by route and HTTP status.",
            ["route", "status"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "kiban_model_requests_in_flight",
            "Requests being handled now.",
            registry=self.registry,
        )
        self.generated_tokens = Counter(
            "kiban_model_generated_tokens",
            "Completion tokens generated.",
            list(labels),
            registry=self.registry,
        ).labels(**labels)
        self.prompt_tokens = Counter(
            "kiban_model_prompt_tokens",
            "Prompt and embedding input tokens processed.",
            list(labels),
            registry=self.registry,
        ).labels(**labels)
        self.tokens_per_second = Gauge(
            "kiban_model_tokens_per_second",
            "Completion tokens per second of the most recent generation pass.",
            list(labels),
            registry=self.registry,
        ).labels(**labels)
        self.batch_size = Histogram(
            "kiban_model_batch_size",
            "Requests run together in one forward pass.",
            registry=self.registry,
            buckets=BATCH_BUCKETS,
        )

    def observe_generation(self, tokens: int, seconds: float) -> None:
        """Count a generation pass's completion tokens and update the throughput gauge."""
        self.generated_tokens.inc(tokens)
        if seconds > 0:
            self.tokens_per_second.set(tokens / seconds)

    def render(self) -> bytes:
        """The text exposition format of every metric."""
        return generate_latest(self.registry)

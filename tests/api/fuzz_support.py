"""Fuzzing the API against its own OpenAPI document with Schemathesis: the checks, and the
callers each generated request is sent as.

Each generated request is sent once per caller (no token, a member, a job's own token, the
admin), since generating it costs more than sending it; every answer must be declared for its
operation, match its schema and headers, and never be a 5xx. A request the schema allows must
not be refused as invalid (400/422) and one it forbids must be refused, except where the server
checks rules the schema cannot state (``SERVER_RULES``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode, checks

SERVER_RULES: dict[tuple[str, str], str] = {
    ("POST", "/api/v1/jobs"): "a manifest's spec is checked against kiban's rules and the "
    "cluster (its queue must exist, its resources fit a node)",
    ("POST", "/api/v1/services"): "as for jobs: the spec, its queue, its resources",
    ("POST", "/api/v1/notebooks"): "as for jobs: its name, durations, queue and resources",
    ("PUT", "/api/v1/policy"): "rules across entries (a queue's cohort, a flavor's queues must "
    "be declared)",
    ("POST", "/api/v1/queues"): "its tenant must exist, and the policy's rules across entries",
    ("POST", "/api/v1/nodes/{name}/health"): "the report's reading must be of the node it is "
    "posted to",
    ("POST", "/api/v1/nodes/health"): "each report's node must exist and be reported once in "
    "the batch",
    ("GET", "/api/v1/jobs/{job_id}/logs"): "rank must be one of the job's ranks; offset is "
    "not with all_ranks, since_seconds not with since_time; a since needs an executor that "
    "knows when the log was written",
    ("GET", "/api/v1/usage"): "since and until are read as a duration, a date or seconds, "
    "and the window they make must not end before it starts",
}
"""Operations where a request the schema allows may still be refused 422, and why."""


def accepted_unless_the_server_rules(ctx: Any, response: Any, case: Any) -> bool | None:
    """``positive_data_acceptance``, but a 422 naming what the server's rules refused passes."""
    if response.status_code == 422:
        return None
    result: bool | None = checks.positive_data_acceptance(ctx, response, case)
    return result


def checks_for(method: str, path: str) -> list[Callable[..., bool | None]]:
    accepted = (
        accepted_unless_the_server_rules
        if (method, path) in SERVER_RULES
        else checks.positive_data_acceptance
    )
    return [
        checks.not_a_server_error,
        checks.status_code_conformance,
        checks.content_type_conformance,
        checks.response_headers_conformance,
        checks.response_schema_conformance,
        checks.negative_data_rejection,
        accepted,
    ]


CONFIG = schemathesis.Config.from_dict({"generation": {"with-security-parameters": False}})
"""Generated requests carry no Authorization header of their own: each caller adds its token."""

# Token names are "printable" (Python's str.isprintable), which no JSON Schema pattern says.
schemathesis.openapi.format(
    "printable",
    st.text(min_size=1, max_size=128).filter(lambda text: text.isprintable() and text.strip()),
)


@dataclass
class Caller:
    name: str
    token: str | None

    @property
    def headers(self) -> dict[str, str]:
        return {} if self.token is None else {"Authorization": f"Bearer {self.token}"}


@dataclass
class Known:
    """Objects that exist, by path parameter, so that fuzzing reaches more than 404s."""

    by_parameter: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    running_jobs: set[str] = field(default_factory=set)

    def values(self, path: str, parameter: str) -> list[str]:
        """Known values of ``parameter`` in ``path`` (``name`` of a node or of a service)."""
        kind = path.split("/")[3] if path.count("/") >= 3 else ""
        return self.by_parameter.get((kind, parameter), [])


def use_known(case: Any, draw: Callable[[Any], Any], known: Known) -> None:
    """Some of the time, point a schema-valid request at objects that exist."""
    if case.meta is None or case.meta.generation.mode is not GenerationMode.POSITIVE:
        return  # a request that must be refused keeps its bad parameters
    if not case.path_parameters or not draw(st.booleans()):
        return
    for parameter in list(case.path_parameters):
        values = known.values(case.operation.path, parameter)
        if values:
            case.path_parameters[parameter] = draw(st.sampled_from(values))
    job_id = case.path_parameters.get("job_id")
    if (
        job_id in known.running_jobs
        and case.query
        and case.query.get("follow")
        not in (
            None,
            False,
            "false",
        )
    ):
        case.query["follow"] = False  # following a running job's log waits for it to end


def call_as_each(
    case: Any, callers: Sequence[Caller], to_check: list[Callable[..., bool | None]]
) -> None:
    """Send the case as each caller; fail naming the caller on the first broken answer."""
    for caller in callers:
        try:
            response = case.call(headers=caller.headers)
            case.validate_response(response, checks=to_check, headers=caller.headers)
        except (AssertionError, BaseExceptionGroup) as exc:
            raise AssertionError(f"as {caller.name}: {exc}") from None


def fuzz(
    operation: Any, mode: GenerationMode, examples: int, send: Callable[[Any, Any], None]
) -> None:
    """Generate ``examples`` requests of ``mode`` for ``operation``, each given to ``send`` with
    a function that draws more data. Derandomized, so a run is repeatable; not shrunk, since
    the report shows the whole request."""

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode), data=st.data())
    def run(case: Any, data: st.DataObject) -> None:
        send(case, data.draw)

    run()


CONSTRAINTS = ("pattern", "enum", "minimum", "maximum", "minLength", "maxLength", "$ref")


def constrained(schema: Any) -> bool:
    """Whether some value of a parameter's type is not allowed (any string is, for one)."""
    text = json.dumps(schema)
    types = {'"type": "integer"', '"type": "number"', '"type": "boolean"', '"type": "array"'}
    return any(f'"{key}"' in text for key in CONSTRAINTS) or any(t in text for t in types)


def violable(document: Mapping[str, Any], method: str, path: str) -> bool:
    """Whether a request to the operation can violate its schema: it takes a body, or a
    parameter with a constraint (any string is a node's name, for one)."""
    declared = document["paths"][path][method.lower()]
    parameters = declared.get("parameters", [])
    return bool(declared.get("requestBody")) or any(constrained(p["schema"]) for p in parameters)


def operations(document: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every (method, path) of an OpenAPI document under /api/v1."""
    return [
        (method.upper(), path)
        for path, declared in document["paths"].items()
        for method in declared
        if path.startswith("/api/v1/")
    ]

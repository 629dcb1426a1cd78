"""Request bodies the routes read themselves, as the OpenAPI document describes them.

Manifests come as JSON or YAML text: the document describes a JSON manifest's envelope (the
kinds each route takes, the name) and leaves ``spec`` to the server, which checks it against its
rules and the cluster (the queue must exist, the resources must fit a node) and answers 422
naming each field. The policy is described in full from ``ClusterPolicy``: the keys it takes,
their types, the names' patterns; the rules across entries (a queue's cohort must be declared)
are the server's, also answered 422 naming the field.
"""

from __future__ import annotations

import copy
from typing import Any

from kiban.domain import kserve, mpijob, service, volcano
from kiban.domain.cluster import ClusterPolicy
from kiban.domain.jobspec import DNS_LABEL

JSON = "application/json"
YAML = "application/yaml"


def manifest_body(kinds: list[tuple[str, str]], what: str) -> dict[str, Any]:
    """``openapi_extra`` for a route that reads a manifest of one of ``kinds`` (apiVersion,
    kind) as JSON, or as YAML text."""
    envelope = {
        "type": "object",
        "description": f"{what}: `spec` is checked by the server (422 names each bad field)",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"type": "string", "enum": sorted({api for api, _ in kinds})},
            "kind": {"type": "string", "enum": sorted({kind for _, kind in kinds})},
            "metadata": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string", "pattern": DNS_LABEL.pattern}},
            },
            "spec": {"type": "object"},
        },
    }
    return {
        "requestBody": {
            "required": True,
            "content": {
                JSON: {"schema": envelope},
                YAML: {"schema": {"type": "string", "description": f"{what} as YAML"}},
            },
        }
    }


JOB_MANIFEST = manifest_body(
    [("kiban/v1", "Job"), (volcano.API_VERSION, volcano.KIND), (mpijob.API_VERSION, mpijob.KIND)],
    "a kiban/v1 Job, a Volcano Job or an MPI Operator MPIJob",
)
SERVICE_MANIFEST = manifest_body(
    [(service.API_VERSION, service.KIND), (kserve.API_VERSION, kserve.KIND)],
    "a kiban/v1 Service or a KServe InferenceService",
)


def _inline(schema: Any, definitions: dict[str, Any]) -> Any:
    """``schema`` with each ``$ref`` to ``#/$defs/...`` replaced by what it names."""
    if isinstance(schema, list):
        return [_inline(item, definitions) for item in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _inline(definitions[ref.removeprefix("#/$defs/")], definitions)
    return {key: _inline(value, definitions) for key, value in schema.items() if key != "$defs"}


GPU_AMOUNT = {
    "type": "object",
    "required": ["gpu"],
    "additionalProperties": False,
    "properties": {"gpu": {"type": "integer", "minimum": 0}},
}
AMOUNTS = {
    "description": "GPUs per flavor (`{h100: {gpu: 8}}`), or `{gpu: 8}` when the policy "
    "declares no flavors",
    "anyOf": [
        GPU_AMOUNT,
        {"type": "object", "additionalProperties": GPU_AMOUNT},
        {"type": "null"},
    ],
}
DURATION = {
    "description": "seconds, or a duration such as `90s`, `30m`, `12h`, `7d`",
    "anyOf": [{"type": "number"}, {"type": "string"}],
}


def policy_schema() -> dict[str, Any]:
    """The policy document's JSON schema: ``ClusterPolicy``'s, with what its validators check
    written out (names' patterns, amounts, durations written as text)."""
    raw = ClusterPolicy.model_json_schema(by_alias=True, mode="validation")
    definitions = copy.deepcopy(raw.get("$defs", {}))
    name = {"type": "string", "pattern": DNS_LABEL.pattern}
    for declaration in ("FlavorDecl", "CohortDecl", "QueueDecl", "PriorityClassDecl"):
        definitions[declaration]["properties"]["name"] = name
    queue = definitions["QueueDecl"]["properties"]
    queue["tenant"] = {**name, "default": "default"}
    for key in ("quota", "borrowingLimit", "lendingLimit"):
        queue[key] = AMOUNTS
    definitions["FairShareDecl"]["properties"]["halfLife"] = DURATION
    definitions["PriorityClassDecl"]["properties"]["minRuntime"] = {
        "anyOf": [DURATION, {"type": "null"}]
    }
    return dict(_inline(raw, definitions))


POLICY = {"requestBody": {"required": True, "content": {JSON: {"schema": policy_schema()}}}}
"""``openapi_extra`` of ``PUT /policy``."""

"""A real ``kiban up`` answers as its OpenAPI document says: Schemathesis, briefly, over HTTP
(``tests/api/test_fuzz_openapi.py`` fuzzes the app in-process at length).

``KIBAN_LIVE_FUZZ_EXAMPLES`` generated requests (default 2) per operation and kind (schema-valid,
schema-violating), each sent with no token, a member's and the admin's.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from e2e_support import KibanServer
from schemathesis import GenerationMode

sys.path.insert(0, str(Path(__file__).parent.parent / "api"))
from fuzz_support import (
    CONFIG,
    Caller,
    call_as_each,
    checks_for,
    fuzz,
    operations,
    violable,
)

pytestmark = pytest.mark.e2e

EXAMPLES = int(os.environ.get("KIBAN_LIVE_FUZZ_EXAMPLES", "2"))


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
def test_a_running_server_answers_as_documented(
    shared_kiban: KibanServer, mode: GenerationMode
) -> None:
    url = shared_kiban.url
    admin = shared_kiban.token
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}) as api:
        api.post("/api/v1/tenants", json={"name": "fuzz"})  # 201, or 409 for the second mode
        member = api.post("/api/v1/tenants/fuzz/tokens", json={"name": "fuzzer"}).json()["token"]
    callers = [Caller("no token", None), Caller("a member", member), Caller("the admin", admin)]
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", config=CONFIG)
    failures = []
    for method, path in operations(schema.raw_schema):
        if mode is GenerationMode.NEGATIVE and not violable(schema.raw_schema, method, path):
            continue  # nothing to violate
        checks = checks_for(method, path)

        def send(case: Any, _: Any, checks: Any = checks) -> None:
            call_as_each(case, callers, checks)

        try:
            fuzz(schema[path][method], mode, EXAMPLES, send)
        except AssertionError as exc:
            failures.append(f"{method} {path}: {exc}")
    assert not failures, "\n\n".join(failures)

"""``kiban budgets``: the table of budgets, extending one (admins), and the extensions' record,
run in-process against the app."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from cli_support import Run

from kiban.platform import Platform

POLICY_FILE = """\
queues:
  - {name: train, tenant: vision}
  - {name: asr, tenant: speech}
budgets:
  - {tenant: vision, gpuHours: 500, warnAt: [0.8, 0.95], action: hold}
  - {tenant: speech, queue: asr, gpuHours: 20, action: stop}
"""


def test_budgets_list_extend_and_the_record(
    kiban: Run, run_as: Callable[[str], Run], platform: Platform, tmp_path: Path
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY_FILE)
    assert kiban("policy", "apply", str(path)).code == 0

    listed = kiban("budgets")
    assert listed.code == 0, listed.err
    lines = listed.out.splitlines()
    assert lines[0].split()[:4] == ["BUDGET", "USED", "LIMIT", "USED"]
    assert lines[1].split()[:4] == ["vision", "0.0", "GPU-h", "500.0"]
    assert "speech/asr" in lines[2] and "stop" in lines[2]

    extended = kiban("budgets", "extend", "vision", "--gpu-hours", "100", "--note", "deadline")
    assert extended.code == 0, extended.err
    assert "budget vision extended by 100.0 GPU-h" in extended.err
    wrong = kiban("budgets", "extend", "vision", "--cost", "5")
    assert wrong.code != 0 and "cost" in wrong.err and "Traceback" not in wrong.err

    as_json = json.loads(kiban("budgets", "-o", "json").out)
    assert [(b["budget"], b["limit"], b["extended"]) for b in as_json] == [
        ("vision", 600.0, 100.0),
        ("speech/asr", 20.0, 0.0),
    ]
    record = kiban("budgets", "extensions")
    assert record.code == 0
    assert "vision" in record.out and "deadline" in record.out and "admin" in record.out

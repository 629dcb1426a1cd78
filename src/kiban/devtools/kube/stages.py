"""The KWOK Stage definitions kiban ships (``kwok-stages/*.yaml`` beside this module).

Recent KWOK releases ship no default stages; these make fake nodes Ready and give pods a life:
Running at once, then Succeeded after ``kiban.dev/sim-duration``, Failed with
``kiban.dev/sim-exit-code``, restarted as their restartPolicy says, and removed when deleted.
Each file's comment says what its stage does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SIM_DURATION_ANNOTATION = "kiban.dev/sim-duration"
SIM_EXIT_CODE_ANNOTATION = "kiban.dev/sim-exit-code"

_DIR = Path(__file__).with_name("kwok-stages")


def stage_files() -> list[Path]:
    """The stage files, sorted by name."""
    return sorted(_DIR.glob("*.yaml"))


def load_stages() -> list[dict[str, Any]]:
    """Every Stage document of every stage file."""
    documents: list[dict[str, Any]] = []
    for path in stage_files():
        documents.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return documents

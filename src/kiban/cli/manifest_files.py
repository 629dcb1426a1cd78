"""Manifests as commands read them: from a file, or from stdin (``-``); ``kiban submit`` sends
the text as it is, ``kiban serve`` reads it as YAML or JSON first."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from kiban.cli.failure import fail


def read_text(file: str) -> str:
    """A manifest's text, from a file or from stdin (``-``)."""
    if file == "-":
        return sys.stdin.read()
    try:
        return Path(file).read_text()
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror}")


def read_manifest(file: str) -> dict[str, Any]:
    """A manifest (a service's, for ``kiban serve``), read as YAML or JSON."""
    from kiban.domain.manifests import load_document

    return load_document(read_text(file))

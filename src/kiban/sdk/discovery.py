"""Where the SDK finds kiban: the server's URL and the caller's token.

From ``KIBAN_URL``/``KIBAN_TOKEN``, else from the kiban home (``KIBAN_HOME``, default
``~/.kiban``): ``kiban up`` writes ``url`` and ``token`` there. A variable set but empty
(``KIBAN_TOKEN=``) counts as unset.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_home", "discover", "env_value"]


def env_value(name: str) -> str | None:
    """An environment variable's value; None when it is unset or empty (``KIBAN_TOKEN=``
    in a shell means "no token here", not "an empty token")."""
    return os.environ.get(name) or None


def default_home() -> Path:
    return Path(env_value("KIBAN_HOME") or Path.home() / ".kiban")


def discover(home: Path | None = None) -> tuple[str, str | None]:
    """The server URL and token, from the environment or the kiban home."""
    home = home or default_home()
    url = env_value("KIBAN_URL")
    token = env_value("KIBAN_TOKEN")
    if url is None:
        url_file = home / "url"
        url = (url_file.read_text().strip() if url_file.exists() else "") or (
            "http://127.0.0.1:8470"
        )
    if token is None:
        token_file = home / "token"
        if token_file.exists():
            token = token_file.read_text().strip() or None
    return url, token

"""``kiban up``'s start-up (``kiban.server.serve``): Ctrl-C while it starts stops what was started,
says so in one line and exits 130; nothing is left running, locked or pointing at a dead port."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from kiban import server
from kiban.control.ownership import Ownership
from kiban.server import INTERRUPTED_EXIT, STARTUP_INTERRUPTED, ServerOptions, serve


def interrupt(*_: Any, **__: Any) -> Any:
    raise KeyboardInterrupt


@pytest.mark.parametrize("where", ["start_platform", "create_app"])
def test_ctrl_c_while_starting_stops_everything_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    home = tmp_path / "home"
    before = {t.name for t in threading.enumerate()}
    if where == "create_app":  # after the store, the executor and the router were started
        monkeypatch.setattr(server, "create_app", interrupt)
    else:
        real = server.build_platform

        def built_then_interrupted(**kwargs: Any) -> Any:
            real(**kwargs).close()
            raise KeyboardInterrupt

        monkeypatch.setattr(server, "build_platform", built_then_interrupted)
    with pytest.raises(SystemExit) as stopped:
        serve(ServerOptions(home=home, port=0, router_port=0, nodes=1))
    assert stopped.value.code == INTERRUPTED_EXIT
    assert capsys.readouterr().err.strip().splitlines()[-1] == STARTUP_INTERRUPTED
    assert not (home / "url").exists()  # no url file pointing at a port nobody serves
    left = {t.name for t in threading.enumerate() if t.is_alive()} - before
    assert not {name for name in left if name.startswith("kiban")}, left
    Ownership.claim_home(home).release()  # the home is free again

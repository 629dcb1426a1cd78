"""``kiban.cli.quick``: the garbage collector paused while modules load, and an end without the
interpreter's teardown only where nothing needs it (no other thread running, output flushed,
an exit code that is a number)."""

from __future__ import annotations

import atexit
import gc
import io
import os
import sys
import threading
from collections.abc import Iterator

import pytest

from kiban.cli import quick


class Ended(Exception):
    """Raised by the stand-in for ``os._exit``."""

    def __init__(self, code: int) -> None:
        self.code = code


@pytest.fixture
def ended(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What happened at the end, in order: the exit handlers run, ``os._exit(code)``."""
    steps: list[str] = []

    def exit_at_once(code: int) -> None:
        steps.append(f"os._exit({code})")
        raise Ended(code)

    monkeypatch.setattr(os, "_exit", exit_at_once)
    monkeypatch.setattr(atexit, "_run_exitfuncs", lambda: steps.append("atexit"))
    yield steps


@pytest.fixture
def collecting() -> Iterator[None]:
    """The collector enabled for the test, and left as it was before it afterwards."""
    was = gc.isenabled()
    gc.enable()
    yield
    if was:  # a test may have paused it: later tests get the collector as it was before
        gc.enable()
    else:
        gc.disable()


def test_loading_pauses_the_collector_and_restores_it(collecting: None) -> None:
    with quick.loading():
        assert not gc.isenabled()
        with quick.loading():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block still loads
    assert gc.isenabled()


def test_loading_restores_the_collector_after_an_error(collecting: None) -> None:
    with pytest.raises(KeyboardInterrupt), quick.loading():
        raise KeyboardInterrupt
    assert gc.isenabled()


def test_loading_leaves_a_collector_paused_by_someone_else_paused(collecting: None) -> None:
    gc.disable()
    with quick.loading():
        pass
    assert not gc.isenabled()


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (3, 3), (130, 130)])
def test_at_once_runs_exit_handlers_then_exits_with_the_code(
    ended: list[str], code: int | None, status: int
) -> None:
    with pytest.raises(Ended):
        quick.end(code, at_once=True)
    assert ended == ["atexit", f"os._exit({status})"]


def test_at_once_flushes_buffered_output_first(
    ended: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = io.BytesIO()
    stdout = io.TextIOWrapper(io.BufferedWriter(sink), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", stdout)
    stdout.write("the answer\n")
    assert sink.getvalue() == b""  # still buffered
    with pytest.raises(Ended):
        quick.end(0, at_once=True)
    assert sink.getvalue() == b"the answer\n"


def test_not_at_once_exits_as_python_does(ended: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        quick.end(2, at_once=False)
    assert exc.value.code == 2 and ended == []


def test_a_message_for_sys_exit_goes_through_sys_exit(ended: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        quick.end("error: no such job", at_once=True)
    assert exc.value.code == "error: no such job" and ended == []


def test_a_thread_still_running_keeps_the_normal_exit(ended: list[str]) -> None:
    release = threading.Event()
    worker = threading.Thread(target=release.wait)
    worker.start()
    try:
        with pytest.raises(SystemExit) as exc:
            quick.end(0, at_once=True)
    finally:
        release.set()
        worker.join()
    assert exc.value.code == 0 and ended == []


def test_a_daemon_thread_does_not(ended: list[str]) -> None:
    release = threading.Event()
    worker = threading.Thread(target=release.wait, daemon=True)
    worker.start()
    try:
        with pytest.raises(Ended):
            quick.end(0, at_once=True)
    finally:
        release.set()
        worker.join()


class ClosedPipe(io.StringIO):
    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_output_that_cannot_be_flushed_keeps_the_normal_exit(
    ended: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    with pytest.raises(SystemExit) as exc:
        quick.end(0, at_once=True)
    assert exc.value.code == 0 and ended == []


def test_a_warm_up_imports_in_its_own_thread_and_is_waited_for(
    monkeypatch: pytest.MonkeyPatch, collecting: None
) -> None:
    for name in ("tabnanny", "kiban_no_such_module"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    loaded_by: dict[str, str] = {}
    importing = __import__

    def recording(name: str, *args: object, **kwargs: object) -> object:
        if name in ("tabnanny", "kiban_no_such_module"):
            loaded_by.setdefault(name, threading.current_thread().name)
        return importing(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("builtins.__import__", recording)
    quick.warm_up(("kiban_no_such_module", "tabnanny"))  # the first fails: it stops, quietly
    quick.warm_up(("tabnanny",))
    quick.warmed()
    assert loaded_by == {"kiban_no_such_module": "kiban-warm-up", "tabnanny": "kiban-warm-up"}
    assert "tabnanny" in sys.modules
    assert not [t for t in threading.enumerate() if t.name == "kiban-warm-up"]
    assert gc.isenabled()

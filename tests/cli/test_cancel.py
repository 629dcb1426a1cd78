"""``kiban cancel``: several jobs at once, or the jobs filters choose (asking first when they
choose more than one); in-process against the app (conftest.py)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from cli_support import Run

from kiban.cli import selection
from kiban.platform import Platform


def state_of(kiban: Run, job_id: str) -> str:
    return str(json.loads(kiban("describe", job_id, "-o", "json").out)["state"])


def submit(who: Run, name: str, *options: str) -> str:
    done = who("run", "--name", name, *options, "--", "train")
    assert done.code == 0, done.err
    return done.out.strip()


def test_several_ids_at_once(kiban: Run) -> None:
    a, b, c = (submit(kiban, n) for n in ("a", "b", "c"))
    done = kiban("cancel", a, c)
    assert (done.code, done.out) == (0, ""), done.err
    assert f"job {a}: Cancelled" in done.err and f"job {c}: Cancelled" in done.err
    assert [state_of(kiban, j) for j in (a, b, c)] == ["Cancelled", "Pending", "Cancelled"]


def test_one_unknown_id_does_not_stop_the_others(kiban: Run) -> None:
    a = submit(kiban, "a")
    done = kiban("cancel", "no-such-job", a)
    assert done.code == 1
    assert "job no-such-job not found" in done.err and f"job {a}: Cancelled" in done.err


def test_filters_that_choose_several_want_yes_without_a_terminal(
    kiban: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(selection.sys.stdin, "isatty", lambda: False)
    jobs = [submit(kiban, "sweep") for _ in range(3)]
    other = submit(kiban, "other")
    done = kiban("cancel", "--name", "sweep")
    assert done.code == 1
    assert "3 jobs match --name sweep" in done.err and "add --yes" in done.err
    assert {state_of(kiban, j) for j in jobs} == {"Pending"}  # nothing cancelled
    done = kiban("cancel", "--name", "sweep", "--yes")
    assert done.code == 0, done.err
    assert {state_of(kiban, j) for j in jobs} == {"Cancelled"}
    assert state_of(kiban, other) == "Pending"


def test_on_a_terminal_it_asks(kiban: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(selection.sys.stdin, "isatty", lambda: True)
    answers = iter([False, True])
    monkeypatch.setattr(selection.typer, "confirm", lambda *a, **k: next(answers))
    jobs = [submit(kiban, "sweep") for _ in range(2)]
    assert kiban("cancel", "--name", "sweep").code == 1  # "no"
    assert {state_of(kiban, j) for j in jobs} == {"Pending"}
    assert kiban("cancel", "--name", "sweep").code == 0  # "yes"
    assert {state_of(kiban, j) for j in jobs} == {"Cancelled"}


def test_one_match_needs_no_confirmation(kiban: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(selection.sys.stdin, "isatty", lambda: False)
    job = submit(kiban, "single")
    assert kiban("cancel", "--name", "single").code == 0
    assert state_of(kiban, job) == "Cancelled"
    done = kiban("cancel", "--name", "single")  # ended jobs are not chosen again
    assert done.code == 0 and "no job matches --name single" in done.err


def test_state_and_queue_filters(kiban: Run, platform: Platform) -> None:
    running = submit(kiban, "big", "--gpus", "2")
    platform.loop.run_once()
    assert state_of(kiban, running) == "Running"
    waiting = submit(kiban, "later", "--gpus", "2")
    # "running" in any case; the job that waits is left alone
    done = kiban("cancel", "--state", "RUNNING", "--queue", "default")
    assert done.code == 0, done.err
    assert state_of(kiban, waiting) == "Pending"
    assert state_of(kiban, running) in ("Stopping", "Cancelled")
    done = kiban("cancel", "--state", "succeeded")
    assert done.code == 1 and "has ended already" in done.err


def test_mine_is_what_my_token_submitted(
    kiban: Run, run_as: Callable[[str], Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(selection.sys.stdin, "isatty", lambda: False)
    assert kiban("admin", "create-tenant", "vision").code == 0
    assert kiban("admin", "create-queue", "vision", "--tenant", "vision").code == 0
    alice = run_as(kiban("admin", "create-token", "vision", "alice").out.strip())
    bob = run_as(kiban("admin", "create-token", "vision", "bob").out.strip())
    hers = [submit(alice, "a1"), submit(alice, "a2")]
    his = submit(bob, "b1")
    done = bob("cancel", "--mine")
    assert done.code == 0, done.err
    assert state_of(kiban, his) == "Cancelled"
    assert {state_of(kiban, j) for j in hers} == {"Pending"}
    assert alice("cancel", "--mine", "--yes").code == 0
    assert {state_of(kiban, j) for j in hers} == {"Cancelled"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "which jobs?"),
        (["some-job", "--mine"], "not both"),
    ],
)
def test_ids_or_filters(kiban: Run, args: list[str], message: str) -> None:
    done = kiban("cancel", *args)
    assert done.code == 1 and message in done.err

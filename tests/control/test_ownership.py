"""One control plane per home: the home's lock names its holder, dies with it (kill -9, even
while its replicas live on), and nothing in the home is touched before it is held."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from kiban.control.ownership import LOCK_FILE, Ownership, OwnershipError, ended_here


@pytest.fixture
def owned(tmp_path: Path) -> Iterator[Ownership]:
    ownership = Ownership.claim_home(tmp_path / "home")
    yield ownership
    ownership.release()


def test_a_second_claim_of_a_home_is_refused_naming_the_holder(owned: Ownership) -> None:
    owned.announce("http://127.0.0.1:8470")
    with pytest.raises(OwnershipError) as refused:
        Ownership.claim_home(owned.home)
    message = str(refused.value)
    assert f"home {owned.home} is in use by another kiban control plane" in message
    assert f"pid {os.getpid()} at http://127.0.0.1:8470" in message
    assert "stop that one first" in message


def test_a_holder_still_starting_is_named_so(owned: Ownership) -> None:
    with pytest.raises(OwnershipError, match=rf"pid {os.getpid()}, still starting"):
        Ownership.claim_home(owned.home)


def test_a_released_home_is_free(owned: Ownership) -> None:
    owned.release()
    Ownership.claim_home(owned.home).release()


def test_claiming_a_home_writes_nothing_but_the_lock(tmp_path: Path) -> None:
    home = tmp_path / "new-home"
    ownership = Ownership.claim_home(home)
    try:
        assert sorted(p.name for p in home.iterdir()) == [LOCK_FILE]
    finally:
        ownership.release()


HOLDER = textwrap.dedent(
    """
    import subprocess, sys, time
    from pathlib import Path
    from kiban.control.ownership import Ownership

    ownership = Ownership.claim_home(Path(sys.argv[1]))
    ownership.announce("http://127.0.0.1:1")
    # a replica: a child that outlives its parent, given every descriptor it may inherit
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             close_fds=False, start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(600)
    """
)


def test_the_lock_dies_with_its_holder_even_while_its_replicas_live(tmp_path: Path) -> None:
    home = tmp_path / "home"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(home)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    replica = psutil.Process(int(holder.stdout.readline()))
    try:
        with pytest.raises(OwnershipError, match=rf"pid {holder.pid} at http://127.0.0.1:1"):
            Ownership.claim_home(home)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        assert replica.is_running()
        Ownership.claim_home(home).release()  # no stale lock: no wait, no clean-up
    finally:
        holder.kill()
        replica.kill()
        holder.wait(timeout=30)


def test_a_sqlite_store_outside_the_home_is_locked_beside_its_file(tmp_path: Path) -> None:
    store = tmp_path / "shared" / "kiban.db"
    store.parent.mkdir()
    url = f"sqlite:///{store}"
    first = Ownership.claim_home(tmp_path / "a")
    first.claim_store(url, on_lost=lambda _: None)
    second = Ownership.claim_home(tmp_path / "b")
    try:
        with pytest.raises(OwnershipError, match=f"the store {store} is in use by another kiban"):
            second.claim_store(url, on_lost=lambda _: None)
        first.release()
        second.claim_store(url, on_lost=lambda _: None)
        assert (tmp_path / "shared" / "kiban.db.lock").exists()
    finally:
        first.release()
        second.release()


def test_the_default_store_in_the_home_needs_no_lock_of_its_own(owned: Ownership) -> None:
    owned.claim_store(f"sqlite:///{owned.home / 'kiban.db'}", on_lost=lambda _: None)
    owned.claim_store(None, on_lost=lambda _: None)
    assert sorted(p.name for p in owned.home.iterdir()) == [LOCK_FILE]


def test_a_database_session_of_a_process_that_ended_here_is_known_as_such() -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait(timeout=30)
    host = socket.gethostname()
    assert ended_here(f"kiban {ended.pid}@{host} http://127.0.0.1:1")
    assert not ended_here(f"kiban {os.getpid()}@{host} http://127.0.0.1:1")  # alive
    assert not ended_here(f"kiban {ended.pid}@another-{host}")  # not this machine's to judge
    assert not ended_here("psql")  # not a control plane

"""Which system user a tenant's local jobs run as (kiban as root): names within Linux's limit,
users kiban did not make never taken, the directories that keep other users out named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kiban.executors.local.isolation import blocking_directories
from kiban.executors.local.shim import Invocation, parse
from kiban.executors.local.users import (
    MAX_USER_NAME,
    USER_NAME,
    Account,
    TenantUser,
    TenantUserError,
    TenantUsers,
    candidate_names,
    mark,
)


@pytest.mark.parametrize(
    ("tenant", "first"),
    [
        ("vision", "kiban-vision"),
        ("a", "kiban-a"),
        ("x" * 26, "kiban-" + "x" * 26),  # 32 characters: fits
        ("9lives", "kiban-9lives"),
    ],
)
def test_a_tenant_that_fits_is_kiban_dash_tenant(tenant: str, first: str) -> None:
    names = candidate_names(tenant)
    assert names[0] == first
    assert len(names) == 2 and names[1] != first  # the hashed name, if the first is taken


@pytest.mark.parametrize("tenant", ["x" * 27, "a-long-tenant-name-of-a-research-lab", "z" * 63])
def test_a_long_tenant_gets_its_start_and_a_hash_within_32_characters(tenant: str) -> None:
    (name,) = candidate_names(tenant)
    assert len(name) <= MAX_USER_NAME and USER_NAME.fullmatch(name)
    assert name.startswith("kiban-" + tenant[:8])
    # two tenants that differ only past the cut get different users
    assert candidate_names(tenant + "b") != candidate_names(tenant + "c")


class FakeAccounts:
    """A user database: accounts by name, and the useradd calls made."""

    def __init__(self, accounts: dict[str, Account], *, fail_create: bool = False) -> None:
        self.accounts = dict(accounts)
        self.created: list[tuple[str, str]] = []
        self.fail_create = fail_create
        self._next_uid = 990

    def lookup(self, name: str) -> Account | None:
        return self.accounts.get(name)

    def create(self, name: str, comment: str) -> None:
        self.created.append((name, comment))
        if self.fail_create:
            raise TenantUserError(f"useradd {name} failed: permission denied")
        self._next_uid -= 1
        self.accounts[name] = Account(self._next_uid, self._next_uid, comment)


HASHED_VISION = candidate_names("vision")[1]
CASES = [
    # (id, accounts before, tenant's user name, users created)
    ("made-now", {}, "kiban-vision", ["kiban-vision"]),
    ("made-before", {"kiban-vision": Account(500, 500, mark("vision"))}, "kiban-vision", []),
    (
        "name-held-by-someone-else",
        {"kiban-vision": Account(1000, 1000, "Vision Lab admin")},
        HASHED_VISION,
        [HASHED_VISION],
    ),
    (
        "name-held-by-root",
        {"kiban-vision": Account(0, 0, mark("vision"))},
        HASHED_VISION,
        [HASHED_VISION],
    ),
]


@pytest.mark.parametrize(
    ("accounts", "expected", "created"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_the_tenants_user_is_found_or_made_and_never_another(
    accounts: dict[str, Account], expected: str, created: list[str]
) -> None:
    database = FakeAccounts(accounts)
    users = TenantUsers(database.lookup, database.create)
    user = users.user_for("vision")
    assert user.name == expected and user.uid != 0
    assert [name for name, _ in database.created] == created
    assert all(comment == "kiban tenant vision" for _, comment in database.created)
    assert users.user_for("vision") is user  # remembered: looked up once
    assert len(database.created) == len(created)


def test_every_name_held_by_others_is_a_clear_error() -> None:
    foreign = Account(1000, 1000, "someone")
    database = FakeAccounts({name: foreign for name in candidate_names("vision")})
    with pytest.raises(TenantUserError, match="were not made by kiban for it"):
        TenantUsers(database.lookup, database.create).user_for("vision")
    assert database.created == []


def test_a_user_made_meanwhile_by_another_kiban_is_taken() -> None:
    database = FakeAccounts({}, fail_create=True)
    original = database.create

    def create_racing(name: str, comment: str) -> None:
        database.accounts[name] = Account(777, 777, comment)  # the other kiban's useradd won
        original(name, comment)

    users = TenantUsers(database.lookup, create_racing)
    assert users.user_for("vision") == TenantUser("kiban-vision", 777, 777)


def test_useradd_failing_is_a_clear_error() -> None:
    database = FakeAccounts({}, fail_create=True)
    with pytest.raises(TenantUserError, match="useradd kiban-vision failed: permission denied"):
        TenantUsers(database.lookup, database.create).user_for("vision")


@pytest.mark.parametrize("tenant", ["", "a:b", "a\nb"])
def test_a_tenant_name_no_user_can_carry_is_refused(tenant: str) -> None:
    database = FakeAccounts({})
    with pytest.raises(TenantUserError, match="cannot name a system user"):
        TenantUsers(database.lookup, database.create).user_for(tenant)


def test_the_directories_that_keep_others_out_are_named(tmp_path: Path) -> None:
    outer, inner = tmp_path / "outer", tmp_path / "outer" / "inner"
    inner.mkdir(parents=True)
    program = inner / "python"
    program.write_text("")
    os.chmod(tmp_path, 0o755)
    os.chmod(outer, 0o700)
    os.chmod(inner, 0o755)
    link = tmp_path / "link"
    link.symlink_to(program)

    def blocking(path: Path) -> list[Path]:  # those above tmp_path are pytest's
        return [d for d in blocking_directories(path) if d.is_relative_to(tmp_path)]

    assert blocking(program) == [outer]
    assert blocking(link) == [outer]  # through the link: where it leads counts
    os.chmod(inner, 0o750)
    assert blocking(inner) == [outer, inner]  # a directory itself counts
    os.chmod(outer, 0o711)
    assert blocking(program) == [inner]


@pytest.mark.parametrize(
    ("argv", "asked"),
    [
        (["/x.exit", "--", "true"], Invocation("/x.exit", ["true"])),
        (
            ["/x.exit", "--user", "990:985", "--env-file", "/e.json", "--", "a", "b"],
            Invocation("/x.exit", ["a", "b"], (990, 985), "/e.json"),
        ),
        (["/x.exit", "--user", "990:985", "--", "a"], None),  # never in the shim's env
        (["/x.exit", "--env-file", "/e.json", "--", "a"], None),
        (["/x.exit", "--user", "990", "--env-file", "/e", "--", "a"], None),
        (["/x.exit", "--user", "-1:5", "--env-file", "/e", "--", "a"], None),
        (["/x.exit", "--shell", "sh", "--", "a"], None),
        (["/x.exit", "--user", "1:2", "--env-file", "/e", "--"], None),
        (["/x.exit"], None),
    ],
)
def test_the_shim_runs_its_command_as_the_user_it_is_given(
    argv: list[str], asked: Invocation | None
) -> None:
    assert parse(argv) == asked

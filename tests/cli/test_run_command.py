"""``kiban run``: what is kiban's and what is the command's, the job's name, its spread over
nodes, its queue, and the environment it gets (``--env``, ``--export``).

The document the CLI builds is checked through a client that records it (the server refuses
``maxReplicasPerNode`` until the scheduler understands it); the rest runs in-process against
the app (conftest.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from cli_support import Done, Run, flat, run_cli

from kiban.cli.jobdoc import job_name_for, run_document
from kiban.platform import Platform
from kiban.sdk import client as sdk_client


class RecordingClient:
    """Takes submissions without a server, and keeps what was sent."""

    sent: list[dict[str, Any]] = []

    def __enter__(self) -> RecordingClient:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def submit(self, manifest: dict[str, Any] | str, **_: object) -> dict[str, Any]:
        assert isinstance(manifest, dict)
        self.sent.append(manifest)
        return {"id": "job-abcdef", "queue": manifest["spec"].get("queue", "default")}


@pytest.fixture
def recorded(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[list[dict[str, Any]], Run]:
    """``(sent, kiban)``: the documents ``kiban run`` sent, and a way to run the CLI."""
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(RecordingClient, "sent", sent)
    monkeypatch.setattr(sdk_client, "Client", RecordingClient)
    for name in ("KIBAN_QUEUE", "HF_TOKEN", "KIBAN_TOKEN"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str) -> Done:
        return run_cli(monkeypatch, capsys, *args)

    return sent, run


def task(document: dict[str, Any]) -> dict[str, Any]:
    tasks: list[dict[str, Any]] = document["spec"]["tasks"]
    return tasks[0]


# -- what is kiban's and what is the command's ---------------------------------------------
@pytest.mark.parametrize(
    ("args", "unknown", "nearest"),
    [
        (["--gpu", "1", "--", "python3", "-c", "print(1)"], "--gpu", "--gpus"),
        (["--nmae", "x", "--", "true"], "--nmae", "--name"),
        (["--queu", "q", "python3", "train.py"], "--queu", "--queue"),
    ],
)
def test_a_misspelled_option_is_refused_and_nothing_is_submitted(
    recorded: tuple[list[dict[str, Any]], Run], args: list[str], unknown: str, nearest: str
) -> None:
    # It was taken for the command: a job named "gpu" ran `--gpu 1 python3 -c print(1)`.
    sent, kiban = recorded
    done = kiban("run", *args)
    assert done.code == 2, done
    assert f"no such option {unknown}; did you mean {nearest}?" in flat(done.err)
    assert "nothing was submitted" in flat(done.err)
    assert (done.out, sent) == ("", [])


def test_an_option_nothing_resembles_says_where_options_go(
    recorded: tuple[list[dict[str, Any]], Run],
) -> None:
    sent, kiban = recorded
    done = kiban("run", "--zzzzzz", "--", "true")
    assert done.code == 2
    assert "no such option --zzzzzz" in flat(done.err)
    assert "the command follows --" in flat(done.err)
    assert sent == []


@pytest.mark.parametrize(
    ("args", "command"),
    [
        (["--gpus", "1", "--", "python3", "-c", "print(1)"], ["python3", "-c", "print(1)"]),
        # without --, the command starts at the first word that is not an option of kiban's
        (["--gpus", "1", "python3", "train.py", "--lr", "3"], ["python3", "train.py", "--lr", "3"]),
        (["python3", "train.py", "--gpus", "8"], ["python3", "train.py", "--gpus", "8"]),
        (["--", "--odd-program", "x"], ["--odd-program", "x"]),
        (["sh", "-c", "echo a -- b"], ["sh", "-c", "echo a -- b"]),
    ],
)
def test_the_command_is_everything_from_its_first_word(
    recorded: tuple[list[dict[str, Any]], Run], args: list[str], command: list[str]
) -> None:
    sent, kiban = recorded
    done = kiban("run", *args)
    assert (done.code, done.out) == (0, "job-abcdef\n"), done
    assert task(sent[0])["command"] == command


def test_run_without_a_command_is_a_usage_error(
    recorded: tuple[list[dict[str, Any]], Run],
) -> None:
    sent, kiban = recorded
    done = kiban("run", "--gpus", "1")
    assert done.code == 2 and "Missing argument" in flat(done.err)
    assert sent == []


# -- the job's name ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("command", "name"),
    [
        (["python", "train.py"], "train"),
        (["python3", "-c", "print(1)"], "python"),  # was "c"
        (["python3", "-m", "pkg.mod"], "pkg-mod"),  # was "m"
        (["python", "-u", "scripts/eval_all.py", "--x"], "eval-all"),
        (["python3.11", "-W", "ignore", "-X", "dev", "run.py"], "run"),
        (["/usr/bin/python3", "-um", "torch.distributed.run", "t.py"], "torch-distributed-run"),
        (["python", "-uc", "import x"], "python"),
        (["python", "-Xdev", "-mhttp.server"], "http-server"),
        (["python"], "python"),
        (["python", "-"], "python"),
        (["torchrun", "--nproc-per-node", "8", "train.py"], "torchrun"),
        (["sh", "-c", "echo hi"], "sh"),
        (["./Run_Me.sh"], "run-me-sh"),
        (["___"], "run"),
        ([], "run"),
    ],
)
def test_job_name_for(command: list[str], name: str) -> None:
    assert job_name_for(command) == name


def test_a_job_is_named_after_its_module(recorded: tuple[list[dict[str, Any]], Run]) -> None:
    sent, kiban = recorded
    assert kiban("run", "--", "python3", "-m", "pkg.train").code == 0
    assert sent[0]["metadata"]["name"] == "pkg-train"


# -- spread over nodes ---------------------------------------------------------------------
def test_nodes_means_one_replica_per_node(recorded: tuple[list[dict[str, Any]], Run]) -> None:
    # --nodes 3 --gpus 0 put all three ranks on node-0: now no two may share a node.
    sent, kiban = recorded
    assert kiban("run", "--nodes", "3", "--gpus", "0", "--", "true").code == 0
    assert task(sent[0])["replicas"] == 3
    assert task(sent[0])["maxReplicasPerNode"] == 1
    assert kiban("run", "--", "true").code == 0
    assert "maxReplicasPerNode" not in task(sent[1])  # one replica: nothing to spread


def test_run_help_says_what_nodes_does(kiban: Run) -> None:
    text = flat(kiban("run", "--help").out)
    assert "one per node" in text and "maxReplicasPerNode: 1" in text


def test_nodes_must_be_at_least_one(recorded: tuple[list[dict[str, Any]], Run]) -> None:
    sent, kiban = recorded
    done = kiban("run", "--nodes", "0", "--", "true")
    assert done.code == 2 and "--nodes" in flat(done.err)
    assert sent == []


# -- the queue -------------------------------------------------------------------------------
def test_the_queue_comes_from_the_option_else_is_left_to_the_server(
    recorded: tuple[list[dict[str, Any]], Run],
) -> None:
    sent, kiban = recorded
    assert kiban("run", "--", "true").code == 0
    assert "queue" not in sent[0]["spec"]  # the server chooses the member's default queue
    assert kiban("run", "--queue", "vision", "--", "true").code == 0
    assert sent[1]["spec"]["queue"] == "vision"


def test_a_member_needs_no_queue_option(run_as: Any, kiban: Run, platform: Platform) -> None:
    assert kiban("admin", "create-tenant", "vision").code == 0
    assert kiban("admin", "create-queue", "vision-gpu", "--tenant", "vision").code == 0
    alice = run_as(kiban("admin", "create-token", "vision", "alice").out.strip())
    done = alice("run", "--", "true")
    assert done.code == 0, done.err
    assert "submitted to queue vision-gpu" in done.err


def test_kiban_queue_fills_a_job_that_names_none(
    kiban: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert kiban("admin", "create-queue", "batch", "--tenant", "default").code == 0
    monkeypatch.setenv("KIBAN_QUEUE", "batch")
    done = kiban("run", "--", "true")
    assert done.code == 0, done.err
    assert "submitted to queue batch" in done.err
    assert "submitted to queue default" in kiban("run", "--queue", "default", "--", "true").err


# -- the environment -----------------------------------------------------------------------
def test_env_and_export(
    recorded: tuple[list[dict[str, Any]], Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent, kiban = recorded
    monkeypatch.setenv("KIBAN_TOKEN", "member-secret")
    monkeypatch.setenv("HF_TOKEN", "hf-secret")
    monkeypatch.setenv("WANDB_MODE", "offline")
    done = kiban("run", "--env", "A=1", "-e", "B=x=y", "--", "true")
    assert done.code == 0, done.err
    assert task(sent[0])["env"] == {"A": "1", "B": "x=y"}  # the default exports nothing

    done = kiban("run", "--export", "ALL", "--env", "WANDB_MODE=online", "--", "true")
    assert done.code == 0, done.err
    env = task(sent[1])["env"]
    assert env["WANDB_MODE"] == "online"  # --env wins
    assert "KIBAN_TOKEN" not in env and "HF_TOKEN" not in env
    assert "left out HF_TOKEN, KIBAN_TOKEN" in done.err  # said, not silently dropped

    assert kiban("run", "--export", "HF_TOKEN,X=1", "--", "true").code == 0
    assert task(sent[2])["env"] == {"HF_TOKEN": "hf-secret", "X": "1"}  # named: sent
    assert kiban("run", "--", "true").code == 0
    assert "env" not in task(sent[3])


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--env", "NOEQUALS"], ("--env", "expected KEY=VALUE")),
        (["--env", "1BAD=x"], ("--env", "not a valid environment variable name")),
        (["--env", "RANK=3"], ("--env", "RANK is set by kiban")),
        (["--export", "KIBAN_TOKEN"], ("--export", "KIBAN_TOKEN is set by kiban")),
        (["--export", "NOT_SET_ANYWHERE_X"], ("--export", "is not set in this shell")),
        (["--export", "NONE,A"], ("--export", "NONE exports nothing")),
        (["--export", "A,ALL"], ("--export", "ALL comes first")),
    ],
)
def test_bad_environment_options_are_one_line(
    recorded: tuple[list[dict[str, Any]], Run], args: list[str], needles: tuple[str, ...]
) -> None:
    sent, kiban = recorded
    done = kiban("run", *args, "--", "true")
    assert done.code == 1, done
    assert all(n in done.err for n in needles), done.err
    assert sent == []


def test_run_document_shape() -> None:
    document = run_document(
        ["python", "train.py"],
        name=None,
        queue=None,
        nodes=2,
        gpus=4,
        cpus=2.0,
        memory="8Gi",
        priority="high",
        launcher="torchrun",
        max_runtime="2h",
        env={"A": "1"},
    )
    assert document == {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "launcher": "torchrun",
            "tasks": [
                {
                    "name": "worker",
                    "replicas": 2,
                    "resources": {"gpu": 4, "cpu": 2.0, "memory": "8Gi"},
                    "command": ["python", "train.py"],
                    "env": {"A": "1"},
                    "maxReplicasPerNode": 1,
                }
            ],
            "priorityClass": "high",
            "maxRuntime": "2h",
        },
    }

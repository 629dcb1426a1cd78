"""The CLI as a user's shell sees it: stdout for data, stderr for messages, exit codes."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import pytest
import yaml
from e2e_support import BIN_DIR, KibanServer, cli_env, job_manifest, run_cli

pytestmark = pytest.mark.e2e

JOB_ID = re.compile(r"^[a-z0-9][-a-z0-9]*$")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def assert_one_error_line(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 1, nothing on stdout, and exactly one ``error:`` line on stderr naming ``needles``."""
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    (line,) = lines
    assert line.startswith("error: "), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


# -- kiban run / submit / wait -------------------------------------------------------------------
def test_run_prints_the_job_id_alone_on_stdout(kiban: KibanServer) -> None:
    done = kiban.cli("run", "--", "echo", "hello")
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("\n") and done.stdout.count("\n") == 1, repr(done.stdout)
    job_id = done.stdout.strip()
    assert JOB_ID.match(job_id), job_id
    assert job_id.startswith("echo-")
    assert f"job {job_id} submitted" in done.stderr  # messages go to stderr
    assert kiban.job(job_id)["id"] == job_id


def test_job_id_in_a_shell_variable(kiban: KibanServer) -> None:
    """What the README promises: ``JOB=$(kiban run ...)``, then wait and read its log."""
    script = (
        'set -e; JOB=$(kiban run --name greet -- echo "hi from $0"); kiban wait "$JOB"; '
        'kiban logs "$JOB"; echo "JOB=$JOB"'
    )
    done = subprocess.run(
        ["bash", "-c", script, "kiban-e2e"],
        env=kiban.env,
        cwd=kiban.workdir,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "hi from kiban-e2e" in done.stdout
    match = re.search(r"^JOB=(greet-[a-z0-9]+)$", done.stdout, flags=re.MULTILINE)
    assert match, done.stdout
    assert kiban.job(match.group(1))["state"] == "Succeeded"


def test_submit_prints_the_job_id_alone_on_stdout(kiban: KibanServer) -> None:
    path = kiban.workdir / "hello.yaml"
    path.write_text(yaml.safe_dump(job_manifest("hello", ["echo", "hello"])))
    done = kiban.cli("submit", path)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    assert done.stdout == job_id + "\n"
    assert job_id.startswith("hello-")
    # and from stdin
    done = kiban.cli("submit", "-", input=path.read_text())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("hello-")


def test_wait_exit_codes(kiban: KibanServer) -> None:
    ok = kiban.run_job("true")
    bad = kiban.run_job("sh", "-c", "exit 5")
    slow = kiban.submit(job_manifest("slow", ["sleep", "600"], terminationGracePeriod="1s"))

    done = kiban.cli("wait", ok, "--timeout", "120")
    assert done.returncode == 0, done.stderr
    assert "Succeeded" in done.stderr and done.stdout == ""

    done = kiban.cli("wait", bad, "--timeout", "120")
    assert done.returncode == 1, done.stderr
    assert "Failed" in done.stderr and "code 5" in done.stderr

    kiban.wait_for_state(slow, "Running")
    done = kiban.cli("wait", slow, "--timeout", "1")
    assert done.returncode == 2, done.stderr
    assert "timed out" in done.stderr and "Traceback" not in done.stderr

    assert kiban.cli("cancel", slow).returncode == 0
    done = kiban.cli("wait", slow, "--timeout", "120")
    assert done.returncode == 1
    assert "Cancelled" in done.stderr


def test_wait_for_an_unknown_job(shared_kiban: KibanServer) -> None:
    assert_one_error_line(shared_kiban.cli("wait", "no-such-job-abcdef"), "not found")


# -- errors are one readable line ------------------------------------------------------------------
BAD_MANIFESTS = {
    "invalid-yaml": ("apiVersion: kiban/v1\nkind: [Job\n", ("not valid YAML", "line")),
    "unknown-field": (
        yaml.safe_dump(
            {
                "apiVersion": "kiban/v1",
                "kind": "Job",
                "metadata": {"name": "typo"},
                "spec": {"tasks": [{"command": ["echo"], "resourcez": {"gpu": 1}}]},
            }
        ),
        ("spec.tasks[0].resourcez", "unknown field"),
    ),
    "too-many-gpus": (
        yaml.safe_dump(job_manifest("greedy", ["echo"], gpu=9)),
        ("spec.tasks[0].resources.gpu", "9 GPUs", "largest node has 2"),
    ),
    "more-replicas-than-the-cluster-holds": (
        yaml.safe_dump(job_manifest("huge", ["echo"], replicas=10000, gpu=1)),
        ("spec.tasks[0].replicas", "can never start", "the 3 nodes could hold 6 even when idle"),
    ),
    "one-per-node-on-too-few-nodes": (
        yaml.safe_dump(job_manifest("wide", ["echo"], replicas=4, task={"maxReplicasPerNode": 1})),
        ("spec.tasks[0].maxReplicasPerNode", "needs 4 nodes", "only 3 such nodes exist"),
    ),
    "not-a-mapping": ("- just\n- a list\n", ("mapping",)),
    "unknown-launcher": (
        yaml.safe_dump(job_manifest("mpi", ["echo"], launcher="mpich")),
        ("spec.launcher",),
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_MANIFESTS))
def test_submit_of_a_bad_manifest_is_one_error_line(shared_kiban: KibanServer, case: str) -> None:
    text, needles = BAD_MANIFESTS[case]
    path = shared_kiban.workdir / f"{case}.yaml"
    path.write_text(text)
    assert_one_error_line(shared_kiban.cli("submit", path), *needles)
    assert shared_kiban.client.jobs() == []  # nothing was stored


def test_submit_of_a_missing_file(shared_kiban: KibanServer) -> None:
    assert_one_error_line(shared_kiban.cli("submit", "nowhere.yaml"), "cannot read", "nowhere.yaml")


def test_a_refused_token_is_a_clear_error(shared_kiban: KibanServer) -> None:
    line = assert_one_error_line(shared_kiban.cli("ls", env={"KIBAN_TOKEN": "bogus"}), "token")
    assert "KIBAN_TOKEN" in line


def test_a_missing_token_is_a_clear_error(shared_kiban: KibanServer, tmp_path: Path) -> None:
    elsewhere = tmp_path / "empty-home"
    elsewhere.mkdir()
    line = assert_one_error_line(
        shared_kiban.cli("ls", env={"KIBAN_URL": shared_kiban.url, "KIBAN_HOME": str(elsewhere)}),
        "token",
    )
    assert str(elsewhere / "token") in line


def test_no_server_is_a_clear_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "url").write_text(f"http://127.0.0.1:{free_port()}\n")
    (home / "token").write_text("whatever\n")
    for args in (["ls"], ["run", "--", "true"], ["logs", "-f", "some-job"], ["nodes"]):
        done = run_cli(args, env=cli_env(home), cwd=tmp_path, timeout=60)
        assert_one_error_line(done, "cannot reach kiban", "kiban up")


def test_unknown_job_is_a_clear_error(shared_kiban: KibanServer) -> None:
    for args in (["describe", "no-such-job"], ["logs", "no-such-job"], ["cancel", "no-such-job"]):
        assert_one_error_line(shared_kiban.cli(*args), "no-such-job", "not found")


# -- looking -------------------------------------------------------------------------------------
def test_json_output_of_ls_describe_queues_nodes(kiban: KibanServer) -> None:
    job_id = kiban.run_job("echo", "listed", options=["--name", "listed"])
    kiban.wait_for_state(job_id, "Succeeded")

    jobs = kiban.json("ls")
    assert [j["id"] for j in jobs] == [job_id]
    assert {"id", "name", "queue", "state", "tenant", "gpus", "replicaCount"} <= set(jobs[0])
    assert jobs[0]["state"] == "Succeeded"

    job = kiban.json("describe", job_id)
    assert {"id", "state", "spec", "replicas", "events", "attempt", "message"} <= set(job)
    assert job["spec"]["spec"]["tasks"][0]["command"] == ["echo", "listed"]
    assert [r["exitCode"] for r in job["replicas"]] == [0]
    assert job["events"][0]["reason"] == "Submitted"
    assert job["events"][-1]["reason"] == "Succeeded"

    queues = kiban.json("queues")
    assert [q["name"] for q in queues] == ["default"]
    assert {"name", "tenant", "gpuQuota", "gpusInUse", "pending", "running"} <= set(queues[0])

    nodes = kiban.json("nodes")
    assert sorted(n["name"] for n in nodes) == ["node-0", "node-1", "node-2"]
    for node in nodes:
        assert {"name", "gpus", "gpusInUse", "healthy", "cordoned", "labels"} <= set(node)
        assert node["gpus"] == 2 and node["healthy"] is True

    # the tables print too, and name what the JSON named
    assert job_id in kiban.ok("ls")
    assert "node-2" in kiban.ok("nodes")
    assert "default" in kiban.ok("queues")
    assert "Succeeded" in kiban.ok("describe", job_id)
    assert yaml.safe_load(kiban.ok("ls", "-o", "yaml")) == jobs
    bad = kiban.cli("ls", "-o", "xml")  # a usage error, as Typer reports them: exit 2
    assert bad.returncode == 2 and bad.stdout == "" and "'--output'" in bad.stderr


def test_describe_prints_user_text_literally(kiban: KibanServer) -> None:
    """Commands and messages are the user's text, not Rich markup (``[/x]`` must not crash)."""
    job_id = kiban.run_job("echo", "[/bold] [red]not red[/red]", options=["--name", "markup"])
    kiban.wait_for_state(job_id, "Succeeded")
    done = kiban.cli("describe", job_id)
    assert done.returncode == 0, done.stderr
    assert "[/bold] [red]not red[/red]" in done.stdout


def test_logs_follow_returns_when_the_job_ends(kiban: KibanServer) -> None:
    job_id = kiban.run_job(
        "sh", "-c", "for i in 1 2 3 4 5; do echo line $i; sleep 0.3; done; echo last line"
    )
    done = kiban.cli("logs", "-f", job_id, timeout=120)
    assert done.returncode == 0, done.stderr
    # stdout is the job's output alone; where it ran is said on stderr
    assert done.stdout.splitlines() == [f"line {i}" for i in range(1, 6)] + ["last line"]
    assert f"=== kiban: job {job_id}, attempt 1: worker[0] rank 0 on node-" in done.stderr
    assert kiban.job(job_id)["state"] == "Succeeded"


def test_logs_of_each_rank(kiban: KibanServer) -> None:
    job_id = kiban.run_job("sh", "-c", 'echo "I am rank $RANK"', options=["--nodes", "3"])
    kiban.wait_for_state(job_id, "Succeeded")
    for rank in range(3):
        out = kiban.ok("logs", job_id, "--rank", str(rank))
        assert f"I am rank {rank}" in out
    assert_one_error_line(kiban.cli("logs", job_id, "--rank", "3"), "rank", "0 to 2")


# -- kiban up --------------------------------------------------------------------------------------
def test_up_refuses_an_unknown_config_key(tmp_path: Path) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(
        yaml.safe_dump({"nodes": [{"name": "a", "gpus": 2}], "queuez": [{"name": "x"}]})
    )
    home = tmp_path / "home"
    done = run_cli(
        ["up", "--home", home, "--port", "0", "--config", config],
        env=cli_env(home),
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "queuez" in done.stderr and "unknown field" in done.stderr, done.stderr
    assert not (home / "url").exists()  # it never came up


def test_up_refuses_a_bad_node_in_the_config(tmp_path: Path) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump({"nodes": [{"name": "a", "gpus": -1}]}))
    done = run_cli(
        ["up", "--home", tmp_path / "home", "--port", "0", "--config", config],
        env=cli_env(tmp_path / "home"),
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "nodes[0].gpus" in done.stderr, done.stderr


def test_up_refuses_a_policy_its_nodes_do_not_match(tmp_path: Path) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "nodes": [{"name": "a", "gpus": 2, "labels": {"gpu.product": "A100"}}],
                "flavors": [{"name": "h100", "nodeLabels": {"gpu.product": "H100"}}],
            }
        )
    )
    home = tmp_path / "home"
    done = run_cli(
        ["up", "--home", home, "--port", "0", "--config", config],
        env=cli_env(home),
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "flavor h100 (gpu.product=H100) matches none of the 1 nodes (a)" in done.stderr
    assert not (home / "url").exists()


def test_up_on_a_busy_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run_cli(
            ["up", "--home", tmp_path / "home", "--port", str(port), "--nodes", "1"],
            env=cli_env(tmp_path / "home"),
            cwd=tmp_path,
            timeout=60,
        )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr, done.stderr


def test_the_cli_is_the_venv_console_script() -> None:
    assert (BIN_DIR / "kiban").exists()
    done = run_cli(["--help"], env=cli_env(Path("/nonexistent")), timeout=60)
    assert done.returncode == 0
    for command in ("up", "run", "submit", "wait", "logs", "describe", "cancel"):
        assert command in done.stdout


def test_sigterm_stops_the_platform_cleanly(kiban: KibanServer) -> None:
    kiban.stop()
    assert kiban.proc is not None and kiban.proc.returncode is not None
    assert "kiban stopped" in kiban.server_log.read_text()

"""The simulator schedules a cluster file's scavenger queues as the live loop does (the core's
scavenger ground reads the queue's flag from both)."""

from __future__ import annotations

from kiban.domain.cluster import parse_cluster_config
from kiban.sim.cluster import from_config


def test_a_cluster_files_scavenger_queue_is_one_in_the_simulator() -> None:
    config = parse_cluster_config(
        {
            "nodes": [{"name": "a", "gpus": 8}],
            "queues": [{"name": "spare", "scavenger": True}, {"name": "work"}],
        }
    )
    queues = {q.name: q for q in from_config(config).queues}
    assert (queues["spare"].scavenger, queues["work"].scavenger) == (True, False)

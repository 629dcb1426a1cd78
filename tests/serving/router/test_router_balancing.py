"""Which replica gets a request: canary split, least outstanding, readiness, queueing."""

from __future__ import annotations

import random
import time
from collections import Counter

import httpx
import pytest
from router_support import FakeReplica, in_background, raw_connection, ready, route

from kiban.serving.router.server import RouterServer
from kiban.serving.router.table import Endpoint, RoutingTable
from kiban.testing import eventually


def waiting_requests(router: RouterServer) -> int:
    """Requests of the test's route waiting for a free replica."""
    return router.metrics.waiting("team", "svc", "v1")


def test_canary_split_follows_the_percents_and_names_each_revision(
    replicas: list[FakeReplica],
) -> None:
    table = RoutingTable()
    stable, canary = replicas[0], replicas[1]
    table.set(
        route(
            ready(stable, "v1"),
            ready(canary, "v2"),
            traffic={"v1": 80, "v2": 20},
        )
    )
    with RouterServer(table, rng=random.Random(7)) as server, httpx.Client() as client:
        served = Counter()
        for _ in range(400):
            answer = client.get(f"{server.url_for('team', 'svc')}/v2/echo")
            revision = answer.headers["x-kiban-revision"]
            assert answer.json()["replica"] == {"v1": "r0", "v2": "r1"}[revision]
            served[revision] += 1
    # 80 expected of 400; a binomial's standard deviation is 8
    assert 50 <= served["v2"] <= 110
    assert served["v1"] + served["v2"] == 400


def test_least_outstanding_avoids_the_busy_replica(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    a, b = replicas[0], replicas[1]
    table.set(route(ready(a), ready(b)))
    url = f"{router.url_for('team', 'svc')}/v2/echo"
    slow, _ = in_background(lambda: httpx.get(f"{url}?ms=1000", timeout=10))
    eventually(lambda: a.in_flight + b.in_flight == 1, what="one request in flight", interval=0.005)
    busy = "r0" if a.in_flight else "r1"
    with httpx.Client() as client:
        names = [client.get(url).json()["replica"] for _ in range(6)]
    assert busy not in names
    slow.join()


def test_ties_go_round_robin(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(*(ready(r) for r in replicas)))
    with httpx.Client() as client:
        for _ in range(9):
            client.get(f"{router.url_for('team', 'svc')}/v2/echo")
    assert [r.requests for r in replicas] == [3, 3, 3]


def test_only_ready_endpoints_get_requests(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(ready(replicas[0]), Endpoint("v1", replicas[1].address, False)))
    with httpx.Client() as client:
        for _ in range(6):
            assert client.get(f"{router.url_for('team', 'svc')}/v2/echo").status_code == 200
    assert (replicas[0].requests, replicas[1].requests) == (6, 0)


def test_a_full_replica_queues_and_a_full_queue_answers_503(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    replica = replicas[0]
    table.set(route(ready(replica), max_concurrency_per_endpoint=1, queue_limit=1))
    url = f"{router.url_for('team', 'svc')}/v2/echo"
    first, first_out = in_background(lambda: httpx.get(f"{url}?ms=2000", timeout=10))
    eventually(lambda: replica.in_flight == 1, what="the request at its replica", interval=0.005)
    second, second_out = in_background(lambda: httpx.get(url, timeout=10))
    eventually(lambda: waiting_requests(router) == 1, what="one request waiting", interval=0.005)
    third = httpx.get(url, timeout=10)
    assert third.status_code == 503 and third.json()["error"]["type"] == "full"
    first.join()
    second.join()
    assert first_out[0].status_code == 200 and second_out[0].status_code == 200
    assert replica.max_in_flight == 1
    assert replica.requests == 2


def test_a_client_that_leaves_while_waiting_gives_up_its_place(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    """Its place in the queue (and in the revision's concurrency, which the autoscaler reads)
    is freed at once: a queue of one takes the next request instead of answering it 503."""
    replica = replicas[0]
    table.set(route(ready(replica), max_concurrency_per_endpoint=1, queue_limit=1))
    url = f"{router.url_for('team', 'svc')}/v2/echo"
    busy, busy_out = in_background(lambda: httpx.get(f"{url}?ms=1500", timeout=10))
    eventually(lambda: replica.in_flight == 1, what="the request at its replica", interval=0.005)
    with raw_connection(router.port) as sock:
        sock.sendall(b"GET /s/team/svc/v2/echo HTTP/1.1\r\nhost: x\r\n\r\n")
        eventually(
            lambda: waiting_requests(router) == 1, what="one request waiting", interval=0.005
        )
    eventually(lambda: waiting_requests(router) == 0, what="no request waiting", interval=0.005)
    assert router.metrics.snapshot("team", "svc").queued == 0
    assert httpx.get(url, timeout=10).status_code == 200  # waited its turn: not "full"
    busy.join()
    assert busy_out[0].status_code == 200
    assert replica.requests == 2  # the one that left never reached the replica
    snap = router.metrics.snapshot("team", "svc")
    assert (snap.in_flight, snap.queued) == (0, 0)


def test_requests_waiting_for_a_revision_that_leaves_the_route_get_404(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(Endpoint("v1", replicas[0].address, False)))  # not ready: requests wait
    url = f"{router.url_for('team', 'svc')}/v2/echo"
    waiting, out = in_background(lambda: httpx.get(url, timeout=10))
    eventually(lambda: waiting_requests(router) == 1, what="one request waiting", interval=0.005)
    table.set(route(ready(replicas[1], "v2")))  # v1 rolled back: it left the split
    waiting.join()
    assert out[0].status_code == 404 and "revision v1 is gone" in out[0].json()["error"]["message"]
    assert replicas[0].requests == 0 and replicas[1].requests == 0


def test_a_large_body_sent_while_waiting_is_held_and_then_forwarded_whole(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    """Past 1 MiB held for a waiting request the router stops reading the client; once a
    replica is ready it reads again and the replica gets every byte, in order."""
    replica = replicas[0]
    table.set(route(Endpoint("v1", replica.address, False)))
    body = b"".join(b"%015d\n" % n for n in range(3 << 16))  # 3 MiB, every line different
    url = f"{router.url_for('team', 'svc')}/v2/echo"
    sending, out = in_background(lambda: httpx.post(url, content=body, timeout=20))
    eventually(lambda: waiting_requests(router) == 1, what="one request waiting", interval=0.005)
    time.sleep(0.3)  # the client sends what it can meanwhile
    table.set(route(ready(replica)))
    sending.join()
    assert out[0].status_code == 200
    assert replica.requests == 1 and replica.bodies[-1] == body.decode()


def test_waiting_longer_than_the_activation_timeout_is_503(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    table.set(route(Endpoint("v1", replicas[0].address, False), activation_timeout_s=0.3))
    started = time.perf_counter()
    answer = httpx.get(f"{router.url_for('team', 'svc')}/v2/echo", timeout=10)
    assert answer.status_code == 503 and answer.json()["error"]["type"] == "unavailable"
    assert 0.25 < time.perf_counter() - started < 2
    assert router.metrics.waiting("team", "svc", "v1") == 0


@pytest.mark.parametrize("activation_timeout_s", [5.0, 0.3])
def test_a_waiting_request_past_the_routes_timeout_is_504(
    router: RouterServer,
    table: RoutingTable,
    replicas: list[FakeReplica],
    activation_timeout_s: float,
) -> None:
    """The route's timeout counts while waiting too, and wins a tie with the wait's."""
    unready = Endpoint("v1", replicas[0].address, False)
    table.set(route(unready, timeout_s=0.3, activation_timeout_s=activation_timeout_s))
    started = time.perf_counter()
    answer = httpx.get(f"{router.url_for('team', 'svc')}/v2/echo", timeout=10)
    assert answer.status_code == 504 and answer.json()["error"]["type"] == "timeout"
    assert 0.25 < time.perf_counter() - started < 2
    assert router.metrics.waiting("team", "svc", "v1") == 0


def test_a_request_waits_for_a_replica_to_become_ready(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    """Scale from zero: the waiting request counts as concurrency, then is served."""
    replica = replicas[0]
    table.set(route(Endpoint("v1", replica.address, False)))
    waiting, out = in_background(
        lambda: httpx.get(f"{router.url_for('team', 'svc')}/v2/echo", timeout=10)
    )
    eventually(lambda: waiting_requests(router) == 1, what="one request waiting", interval=0.005)

    def seen() -> bool:  # the autoscaler sees it
        samples = router.metrics.concurrency_samples("team", "svc", "v1")
        return bool(samples) and samples[-1].concurrency > 0

    eventually(seen, what="the current second's concurrency to count the request", interval=0.005)
    assert replica.requests == 0
    table.set(route(ready(replica)))  # the control plane: the replica is ready
    waiting.join()
    assert out[0].status_code == 200 and out[0].json()["replica"] == "r0"
    assert router.metrics.waiting("team", "svc", "v1") == 0
    assert router.metrics.snapshot("team", "svc").in_flight == 0


def test_waiting_requests_are_served_in_arrival_order(
    router: RouterServer, table: RoutingTable, replicas: list[FakeReplica]
) -> None:
    replica = replicas[0]
    table.set(route(Endpoint("v1", replica.address, False), max_concurrency_per_endpoint=1))
    url = f"{router.url_for('team', 'svc')}/v2/echo"
    threads = []
    outs = []
    for n in range(4):
        thread, out = in_background(lambda n=n: httpx.post(url, content=str(n), timeout=10))
        threads.append(thread)
        outs.append(out)
        eventually(
            lambda n=n: waiting_requests(router) == n + 1,
            what=f"{n + 1} requests waiting",
            interval=0.005,
        )
    table.set(route(ready(replica), max_concurrency_per_endpoint=1))
    for thread in threads:
        thread.join()
    assert all(o[0].status_code == 200 for o in outs)
    assert replica.bodies == ["0", "1", "2", "3"]
    assert replica.max_in_flight == 1

"""The node agent's own HTTP server: ``GET /metrics``, ``POST /check[?node=]``, ``GET /healthz``.

It serves no tenant data and takes no token; it listens on 127.0.0.1 unless told otherwise
(``--listen``). ``/check`` runs a pass now and reports it to the control plane as usual.
"""

from __future__ import annotations

import asyncio
import socket
import threading

import uvicorn
from fastapi import FastAPI, HTTPException, Query
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from kiban.health.agent import NodeAgent
from kiban.health.agent_metrics import agent_registry


def create_agent_app(agent: NodeAgent) -> FastAPI:
    app = FastAPI(title="kiban node agent", docs_url=None, redoc_url=None, openapi_url=None)
    registry = agent_registry(agent)

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    def healthz() -> dict[str, object]:
        return {"ok": True, "nodes": agent.nodes, "address": agent.address}

    @app.post("/check")
    async def check(node: str | None = Query(default=None)) -> Response:
        if node is None:
            if len(agent.nodes) > 1:
                names = ", ".join(agent.nodes)
                raise HTTPException(422, f"this agent serves several nodes: name one ({names})")
            node = agent.nodes[0]
        if node not in agent.state:
            raise HTTPException(404, f"node {node!r} is not served by this agent")
        report = await run_in_threadpool(agent.check, node)
        return Response(report.model_dump_json(by_alias=True), media_type="application/json")

    return app


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:0`` for IPv6); raises ValueError saying what is wrong."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen must be HOST:PORT, e.g. 127.0.0.1:0, not {listen!r}")
    return host.strip("[]"), int(port)


class AgentServer:
    """Uvicorn serving the agent's app in a daemon thread on a socket bound up front (so port
    0 picks a free port whose number is known before serving)."""

    def __init__(self, agent: NodeAgent, host: str, port: int) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(128)
        bound_port = self.sock.getsockname()[1]
        self.address = (
            f"[{host}]:{bound_port}" if family == socket.AF_INET6 else f"{host}:{bound_port}"
        )
        agent.address = self.address
        config = uvicorn.Config(
            create_agent_app(agent), log_level="warning", access_log=False, lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._serve, name="kiban-agent-http", daemon=True)

    def _serve(self) -> None:
        asyncio.run(self.server.serve(sockets=[self.sock]))

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)
        self.sock.close()

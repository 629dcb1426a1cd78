"""``kiban model-server`` (``python -m kiban.serving.runtime``): serve one model until stopped.

Exit codes: 0 after a clean stop, 2 for a bad command line, 3 when the model
fails to load (after printing ``KIBAN_LOAD_FAILED: <message>`` on stderr,
the one line kiban's control plane reads to mark the revision failed).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
import sys

LOAD_FAILED_EXIT = 3
LOAD_FAILED_PREFIX = "KIBAN_LOAD_FAILED: "


def main(argv: list[str] | None = None) -> int:
    """Parse options, start the HTTP server, load the model in the background, serve."""
    from kiban.serving.runtime.options import parse_options

    options = parse_options(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    log = logging.getLogger("kiban.serving.runtime")
    if options.ignored:
        log.warning("ignoring arguments this server does not use: %s", " ".join(options.ignored))

    import uvicorn

    from kiban.serving.runtime.app import create_app

    failures: list[str] = []

    def on_load_failure(message: str) -> None:
        failures.append(message)
        print(LOAD_FAILED_PREFIX + message, file=sys.stderr, flush=True)
        server.should_exit = True

    app = create_app(options, on_load_failure=on_load_failure)
    uds = options.uds
    unix: socket.socket | None = None
    if uds is not None:
        try:
            unix = unix_socket(uds)
        except OSError as exc:  # the port alone still serves (the executor then uses it)
            log.warning("cannot listen on the Unix socket %s (%s); on the port only", uds, exc)
            uds = None

    class Server(uvicorn.Server):
        """Removes its Unix socket when it stops."""

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            # here, not after run(): uvicorn ends the process by the signal that stopped it
            await super().shutdown(sockets)
            if uds is not None:
                with contextlib.suppress(OSError):
                    os.unlink(uds)

    config = uvicorn.Config(app, host=options.host, port=options.port, log_level="info")
    server = Server(config)
    log.info("model server for %s on http://%s:%d", options.model_name, options.host, options.port)
    if unix is None:
        server.run()
    else:
        log.info("and on the Unix socket %s", uds)
        server.run(sockets=[config.bind_socket(), unix])
    if failures:
        return LOAD_FAILED_EXIT
    return 0 if server.started else 1


def unix_socket(path: str) -> socket.socket:
    """A bound Unix socket at ``path`` that only this user can connect to; a socket left there
    by an earlier server is replaced (any other kind of file is an error)."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.stat(path).st_mode):
            os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o600)
    except OSError:
        sock.close()
        raise
    return sock


if __name__ == "__main__":
    sys.exit(main())

"""The test run's entry point: the router's request path runs compiled where a build of its
sources exists (``make setup`` builds it), as under ``kiban up``; activated here, before any
test module imports the router (``kiban.serving.router.native``)."""

from kiban.serving.router import native

native.activate()

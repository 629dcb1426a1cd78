"""The serving router: one port for every service, canary splits, queueing, pass-through streams.

The control plane keeps a ``RoutingTable`` (``table``) up to date; ``RouterServer`` (``server``)
serves requests from it; ``TrafficMetrics`` (``traffic``) counts what it served, for the
autoscaler and ``kiban describe``. The modules on each request's path run compiled when a build
of them exists and the process's entry point called ``native.activate()`` before importing
them; importing this package imports nothing and changes nothing.
"""

"""What the control plane tells Prometheus: its ``/metrics`` (scheduler, queues, quotas, fair
share, nodes and their health), the targets of ``http_sd_configs``, and idle GPUs.

Metrics are read from the store at each scrape (``cluster_state``: one read transaction), not
kept in counters scattered through the code, so they agree with each other and survive a
restart. The only figures kept in the process are those the store never sees: the scheduling
cycle's duration (``scheduling_cycles``) and how long each job's GPUs have been idle
(``idle_tracker``). The scheduler and the domain do not import this package.
"""

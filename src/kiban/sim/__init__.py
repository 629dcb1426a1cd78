"""Trace replay: the pure scheduler core driven in simulated time over real cluster traces.

``kiban sim`` reads a trace (:mod:`.traces`), a cluster (:mod:`.cluster`), turns rows into jobs
(:mod:`.workload`), replays them under each policy (:mod:`.policies`) with the discrete-event
simulator (:mod:`.engine`, on the in-memory cluster of :mod:`.state`), and reports
(:mod:`.metrics`, :mod:`.plots`); :mod:`.run` ties these together.
"""

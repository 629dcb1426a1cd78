"""Benchmarks: ``kiban bench ...``."""

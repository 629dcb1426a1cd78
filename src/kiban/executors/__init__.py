"""Executors: where admitted jobs run. Each sits behind the small interface in ``base``."""

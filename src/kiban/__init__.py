"""kiban: a multi-tenant GPU platform for training and serving models."""

__version__ = "0.1.0"

"""Where the agent's readings come from: NVML, or a directory of JSON files (the seam that
tests and ``kiban bench health`` use to inject faults)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from kiban.health.nvml import NvmlReader
from kiban.health.readings import NodeReading


class ReadingSource(Protocol):
    """Reads one node's GPUs now."""

    def read(self, node: str) -> NodeReading: ...

    def close(self) -> None: ...


class DirectoryReadings:
    """``DIR/<node>.json``, a ``NodeReading``, read afresh each pass (rewrite it to inject a
    fault). A missing or broken file is a reading without NVML saying what is wrong, so every
    check is Unknown rather than healthy."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def read(self, node: str) -> NodeReading:
        path = self.directory / f"{node}.json"
        try:
            text = path.read_text()
        except OSError as exc:
            return self._unavailable(node, f"no reading: cannot read {path}: {exc.strerror}")
        try:
            reading = NodeReading.model_validate_json(text)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            return self._unavailable(node, f"{path}: {where}: {first['msg']}")
        return reading.model_copy(update={"node": node})

    @staticmethod
    def _unavailable(node: str, why: str) -> NodeReading:
        return NodeReading(node=node, taken_at=0.0, nvml_available=False, error=why)

    def close(self) -> None:
        pass


class NvmlReadings:
    """The GPUs of this machine through NVML; ``gpus`` maps a node to its physical GPU indices
    (the local executor's virtual nodes share this machine's GPUs); unmapped nodes get all."""

    def __init__(
        self, gpus: Mapping[str, Sequence[int]] | None = None, reader: NvmlReader | None = None
    ) -> None:
        self.gpus = dict(gpus or {})
        self.reader = reader or NvmlReader()

    def read(self, node: str) -> NodeReading:
        return self.reader.read(node, self.gpus.get(node))

    def close(self) -> None:
        self.reader.close()

"""``kiban.store.schema`` gathers every models module: the metadata Alembic compares with the
migrations holds every table declared anywhere in the store."""

from __future__ import annotations

from pathlib import Path

import kiban.store
from kiban.store import schema
from kiban.store.models import Base


def test_every_models_module_of_the_store_is_gathered() -> None:
    folder = Path(kiban.store.__file__).parent
    found = sorted(f"kiban.store.{p.stem}" for p in folder.glob("models*.py"))
    assert sorted(m.__name__ for m in schema.MODULES) == found


def test_the_metadata_holds_each_table_its_modules_declare() -> None:
    declared = {
        value.__table__.name
        for module in schema.MODULES
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, Base) and value is not Base
        if value.__module__ == module.__name__
    }
    assert declared == set(schema.metadata.tables)
    assert {"jobs", "nodes", "services", "usage_records", "audit_log"} <= declared

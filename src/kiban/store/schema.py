"""Every table of the store in one ``MetaData``: imports each ``models_*`` module, so that
Alembic's autogenerate and the migration tests compare all of them, not only those the modules
imported so far happen to declare. A new models module is added here."""

from __future__ import annotations

from sqlalchemy import MetaData

from kiban.store import models, models_accounting, models_audit, models_nodes, models_serving

MODULES = (models, models_accounting, models_audit, models_nodes, models_serving)
"""The modules that declare tables, all on ``models.Base``."""

metadata: MetaData = models.Base.metadata
"""Every table of the store (each module above has registered its own on import)."""

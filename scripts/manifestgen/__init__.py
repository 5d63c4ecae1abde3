"""Shared code of the manifest writers scripts/gen-models.py (synthetic
models) and scripts/import-reef.py (models measured by the REEF authors):
idempotent groups (`groups`) and stable output with --check (`output`).
The format is docs/models.md; the loader is daemon/model/src/manifest.rs."""

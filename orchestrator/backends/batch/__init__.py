"""The Cloud Batch backend: a run is one Batch job of one task (docs/batch.md)."""

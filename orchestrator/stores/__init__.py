"""Where payloads and results live: a directory (local) or a GCS bucket (gcs)."""

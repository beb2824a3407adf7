"""Where a run's startup script executes: this machine (local) or a GCE VM (gce)."""

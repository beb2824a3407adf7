"""The Compute Engine backend. Import `orchestrator.backends.gce.backend` for GceBackend;
this package imports nothing heavy, so `bench --help` never loads the cloud SDK."""

"""Use cases, one module each; backend-agnostic (they talk to Backend and Store)."""

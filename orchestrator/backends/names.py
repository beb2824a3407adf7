"""Every backend bench knows, by name: the one place a backend is registered.

A backend is one folder (or module) of orchestrator/backends/ whose class implements the
Backend protocol (base.py); one line below makes it a `--backend` choice. This module
imports nothing, so settings (config.py) can check a backend's name without reaching up
into the backends; registry.py imports a class when it is first asked for.
"""

# name -> "module:class", in the order `--backend` lists them.
BACKENDS = {
    "local": "orchestrator.backends.local:LocalBackend",
    "gce": "orchestrator.backends.gce.backend:GceBackend",
    "batch": "orchestrator.backends.batch.backend:BatchBackend",
}

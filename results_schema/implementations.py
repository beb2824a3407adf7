"""The implementations bench itself provides, named without torch: the controller checks a
plan against them and refuses a kernel that would take one of their names;
benches/registry.py builds its entries from the same names (a test holds them equal)."""

from __future__ import annotations

import re

from results_schema.peers import PEER_NAMES

# SDPA plus a known extra fraction of its work: the harness's calibration (sdpa-extraN).
CALIBRATION_FRACTIONS = (16, 32, 64, 128)
# SDPA pinned to one of its backends.
SDPA_BACKENDS = ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "sdpa-math")
IMPLEMENTATIONS = (
    "sdpa",
    "reference",
    *(f"sdpa-extra{n}" for n in CALIBRATION_FRACTIONS),
    *SDPA_BACKENDS,
    *PEER_NAMES,  # public libraries (results_schema/peers.py), timed with --peers
)
# Implementations that refuse a CPU device.
CUDA_ONLY = ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient", *PEER_NAMES)
# The calibration's names for any fraction: one added later must not meet a user's kernel.
CALIBRATION_NAME = re.compile(r"sdpa-extra\d+")

# The A/A control: the plan's `control` implementation timed again under this identity.
CONTROL_SUFFIX = "@aa"
# A kernel tree's A/B baseline revision (`bench launch --baseline REF`): '<name>@baseline'.
BASELINE_SUFFIX = "@baseline"


def builtin_name_refusal(name: str) -> str | None:
    """Why a kernel may not be declared under `name`, if it may not: it is a built-in
    implementation's (or a calibration's), and rows, reports and the registry would take
    one for the other (whatever its case: `SDPA` beside `sdpa` is no better)."""
    if name.lower() in IMPLEMENTATIONS or CALIBRATION_NAME.fullmatch(name.lower()):
        return (
            f"{name!r} is a built-in implementation's name: rows and reports would not tell "
            "the kernel from it; name the kernel otherwise"
        )
    return None

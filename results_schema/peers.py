"""Public attention libraries bench can time beside SDPA (`bench launch --peers NAME,...`),
known without torch: the controller validates names and computes what the target installs
from here; the payload's adapters (benches/peers.py) name the same pins in their messages.

Each peer is pinned: `pins` are exact requirements, in order of preference. Most peers have
one. xformers builds each release against one torch release (0.0.32.post2 requires torch
2.8.0, 0.0.33.post2 torch 2.9.1, 0.0.34 torch 2.10.0; 0.0.35, on torch's stable ABI, torch
>= 2.10), so the target installs the first of its pins that fits the torch it already has,
and never changes that torch (docs/peers.md).

GPU support is each project's documented statement (docs/peers.md gives the sources); where
a GPU is outside it, the peer's rows say "unsupported on sm_XY", decided before any call.

A peer may install without its dependencies (`pip_options`): cuDNN's frontend declares
NVIDIA's CuTe DSL stack for its own Python kernels, which bench leaves out (it times the
cuDNN library those rows name, and the DSL's pin would fight FA4's); its graph API needs only
the cuDNN that torch already ships.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peer:
    name: str  # as plans, --peers and result rows name it
    distribution: str  # the package-index name
    module: str  # what the adapter imports
    pins: tuple[str, ...]  # exact requirements, preferred first
    min_capability: tuple[int, int]  # the oldest GPU its documentation supports
    gpus: str  # that documentation's words, for messages
    dtypes: tuple[str, ...]  # the dtypes its attention takes
    pip_options: tuple[str, ...] = ()  # what the target's pip install adds to each pin

    @property
    def pinned(self) -> str:
        """The preferred pin: what a user installs to time it locally."""
        return self.pins[0]


PEERS = {
    peer.name: peer
    for peer in (
        Peer(
            name="xformers",
            distribution="xformers",
            module="xformers.ops",
            pins=(
                "xformers==0.0.35",
                "xformers==0.0.34",
                "xformers==0.0.33.post2",
                "xformers==0.0.32.post2",
            ),
            min_capability=(7, 5),
            gpus="built for sm_75, sm_80 (+PTX) and sm_90a",
            dtypes=("float16", "bfloat16", "float32"),
        ),
        Peer(
            name="fa4",
            distribution="flash-attn-4",
            module="flash_attn.cute",
            pins=("flash-attn-4==4.0.0b36",),
            min_capability=(9, 0),
            gpus="Hopper and Blackwell GPUs",
            dtypes=("float16", "bfloat16"),
        ),
        Peer(
            name="flashinfer",
            distribution="flashinfer-python",
            module="flashinfer",
            pins=("flashinfer-python==0.7.2.post1",),
            min_capability=(7, 5),
            gpus="SM75 (Turing) and later",
            dtypes=("float16", "bfloat16"),
        ),
        Peer(
            name="cudnn-fe",
            distribution="nvidia-cudnn-frontend",
            module="cudnn",
            pins=("nvidia-cudnn-frontend==1.32.0",),
            min_capability=(8, 0),
            gpus="SM80 (Ampere) or newer",  # FP8: SM90 (benches/peers.py)
            dtypes=("float16", "bfloat16", "float8_e4m3fn"),
            pip_options=("--no-deps",),
        ),
    )
}
PEER_NAMES = tuple(PEERS)

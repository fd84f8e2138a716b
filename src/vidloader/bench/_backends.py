"""The backends ``vidloader bench run`` knows, by name: known without importing any of them, so
that building the command line imports neither torch nor a peer's library."""

from __future__ import annotations

import importlib

#: Name on the command line -> (module of this package, adapter class), in report order.
PEERS = {
    "vidloader": ("_peers", "VidloaderPeer"),
    "vidloader-nvdec": ("_peers", "VidloaderNvdecPeer"),
    "vidloader-nvdec-p12": ("_peers", "VidloaderNvdecProcessesPeer"),
    "vidloader-combo": ("_peers", "VidloaderComboPeer"),
    "naive": ("_peers", "NaivePeer"),
    "decord": ("_peers_cpu", "DecordPeer"),
    "opencv": ("_peers_cpu", "OpenCvPeer"),
    "torchcodec": ("_peers_cpu", "TorchcodecPeer"),
    "torchcodec-tuned": ("_peers_cpu", "TorchcodecTunedPeer"),
    "torchcodec-approx": ("_peers_cpu", "TorchcodecApproxPeer"),
    "pynvc-simple": ("_peers_gpu", "PynvcSimplePeer"),
    "pynvc-threads": ("_peers_gpu", "PynvcThreadsPeer"),
    "spdl": ("_peers_gpu", "SpdlPeer"),
    "pyav-nvdec": ("_peers_gpu", "PyavNvdecPeer"),
    "torchcodec-cuda": ("_peers_gpu", "TorchcodecCudaPeer"),
    "dali": ("_peers_dali", "DaliPeer"),
}

#: Names that expand to several backends on the command line.
BACKEND_ALIASES = {
    "cpu": ["vidloader", "naive", "decord", "opencv", "torchcodec", "torchcodec-tuned"],
    "gpu": ["vidloader", "vidloader-nvdec", "pynvc-simple", "pynvc-threads", "torchcodec-cuda",
            "spdl", "pyav-nvdec", "dali"],
}


def backend_names() -> list[str]:
    """Every backend name the bench knows."""
    return list(PEERS)


def resolve_backends(names: str) -> list[str]:
    """Backend names from a comma-separated list of names or aliases (``all`` for every one).

    Raises:
        ValueError: an unknown name.
    """
    out: list[str] = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        for real in BACKEND_ALIASES.get(name, list(PEERS) if name == "all" else [name]):
            if real not in PEERS:
                raise ValueError(f"unknown backend {real!r}; choose from "
                                 f"{', '.join([*PEERS, *BACKEND_ALIASES, 'all'])}")
            if real not in out:
                out.append(real)
    return out


def make_peer(name: str):
    """A fresh adapter (a :class:`~vidloader.bench._peers.Peer`) for backend ``name``."""
    module, cls = PEERS[name]
    return getattr(importlib.import_module(f"{__package__}.{module}"), cls)()

"""Shared pytest configuration: the ``cuda`` marker skips where no usable GPU/NVDEC is."""

from __future__ import annotations

import os

import pytest


def _cuda_usable() -> bool:
    try:
        import torch

        if not torch.cuda.is_available():
            return False
        import PyNvVideoCodec  # noqa: F401
    except Exception:
        return False
    return True


def pytest_collection_modifyitems(config, items):
    if _cuda_usable() or os.environ.get("VIDLOADER_FAIL_WITHOUT_CUDA"):
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with PyNvVideoCodec (cuda marker)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def media(tmp_path_factory):
    """The NVDEC/NV12 test videos (``tests/_nvdec_media.py``), generated once per session."""
    from ._nvdec_media import make_media

    return make_media(tmp_path_factory)

"""A bounded pool of decoder threads that keeps a GPU's NVDEC engines busy.

PyNvVideoCodec releases the GIL while it parses and decodes, so several threads, each with
its own :class:`DecoderSlot` (decoders on their own CUDA stream) and its own demuxer cache,
decode different GOPs at once. Each thread clones the frames it keeps before its next decode
call (surfaces are recycled) and records a CUDA event; the consumer waits on that event.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ...constants import MAX_DECODERS_PER_GPU
from ...errors import ConfigError
from ._annexb import ContainerCache
from ._decoder import DecoderSlot


class DecoderPool:
    """``num_decoders`` threads, each owning a decoder slot and a container cache.

    Args:
        make_slot: builds a :class:`DecoderSlot` (called once in each thread).
        num_decoders: threads, ``1 ..`` :data:`MAX_DECODERS_PER_GPU`.
    """

    def __init__(self, make_slot: Callable[[], DecoderSlot], num_decoders: int) -> None:
        if not 1 <= int(num_decoders) <= MAX_DECODERS_PER_GPU:
            raise ConfigError(f"num_decoders must be in 1..{MAX_DECODERS_PER_GPU}, got {num_decoders}")
        self.num_decoders = int(num_decoders)
        self._make_slot = make_slot
        self._local = threading.local()
        self._slots: list[tuple[DecoderSlot, ContainerCache]] = []
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(self.num_decoders, thread_name_prefix="vidloader-nvdec")

    def _resources(self) -> tuple[DecoderSlot, ContainerCache]:
        res = getattr(self._local, "res", None)
        if res is None:
            res = self._local.res = (self._make_slot(), ContainerCache())
            with self._lock:
                self._slots.append(res)
        return res

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn(slot, containers, *args)`` on a pool thread."""
        return self._threads.submit(lambda: fn(*self._resources(), *args))

    @property
    def slots(self) -> list[DecoderSlot]:
        return [s for s, _ in self._slots]

    def close(self) -> None:
        self._threads.shutdown(wait=True, cancel_futures=True)
        for slot, containers in self._slots:
            slot.close()
            containers.close()
        self._slots.clear()

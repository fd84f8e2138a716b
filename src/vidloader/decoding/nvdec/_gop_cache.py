"""Byte-bounded LRU caches for the NVDEC path: compressed GOPs and decoded frames.

:class:`GopPacketCache` keeps demuxed GOPs (``(path, keyframe) -> PacketBundle`` of one GOP),
as the accvlab separation example does, so a GOP that consecutive batches keep landing in is
demuxed (and, in separation mode, sent between processes) once. :class:`FrameCache` keeps
decoded NV12 frames on the GPU, ``(path, frame) -> tensor``, so a request for a frame of a GOP
decoded a moment ago costs no decode at all. Both are thread-safe (the decoder pool's threads
share them) and never hold more than ``max_bytes``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from ._bundle import PacketBundle


def _nbytes(value: Any) -> int:
    if hasattr(value, "nbytes"):
        return int(value.nbytes)
    return int(value.numel() * value.element_size())  # torch.Tensor


class _ByteLRU:
    """An LRU mapping bounded by the total ``nbytes`` of its values."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max(0, int(max_bytes))
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _get(self, key: Hashable) -> Any | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]

    def _put(self, key: Hashable, value: Any) -> bool:
        size = _nbytes(value)
        if size > self.max_bytes:
            return False  # larger than the whole cache: storing it would evict everything
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, evicted) = self._items.popitem(last=False)
                self._bytes -= evicted
        return True

    @property
    def nbytes(self) -> int:
        """Bytes held now (always ``<= max_bytes``)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0


class GopPacketCache(_ByteLRU):
    """Demuxed GOPs, ``(path, keyframe) -> PacketBundle`` holding that one GOP.

    An entry serves a request when it covers the last wanted frame (``bundle.gop_last[0]``).

    Args:
        max_bytes: bound on the bundles' total :attr:`PacketBundle.nbytes`; 0 disables caching.
    """

    def get(self, path: str, keyframe: int, last: int) -> PacketBundle | None:
        """The cached GOP if it makes frames up to ``last`` decodable, else ``None``."""
        bundle = self._get((path, int(keyframe)))
        if bundle is not None and int(bundle.gop_last[0]) < last:
            with self._lock:
                self.hits -= 1
                self.misses += 1
            return None
        return bundle

    def put(self, bundle: PacketBundle) -> None:
        """Store every GOP of ``bundle`` (as compact copies), keeping the longer of two."""
        if self.max_bytes == 0:
            return
        for g in range(bundle.num_gops):
            key = (bundle.path, int(bundle.gop_keyframes[g]))
            with self._lock:
                old = self._items.get(key)
            if old is not None and int(old[0].gop_last[0]) >= int(bundle.gop_last[g]):
                continue
            # A compact copy unless the bundle is one GOP owning its bytes: a view would keep
            # its whole buffer alive (e.g. a demux part's shared-memory tensor).
            owned = bundle.num_gops == 1 and bundle.payload.base is None
            self._put(key, bundle if owned else bundle.gop(g))


class FrameCache(_ByteLRU):
    """Decoded frames, ``(path, frame_index) -> NV12 tensor`` (on the GPU for NVDEC).

    Tensors are stored as given: pass a private copy (``clone()``), never a view of a decoder
    surface, which the next decode overwrites.

    Args:
        max_bytes: bound on the frames' total bytes; 0 disables caching.
    """

    def get(self, path: str, frame: int):
        return self._get((path, int(frame)))

    def put(self, path: str, frame: int, tensor) -> bool:
        return self._put((path, int(frame)), tensor)

    def has_all(self, path: str, frames) -> bool:
        """Whether every frame of ``frames`` is cached (no LRU update, no hit counted)."""
        return all((path, int(f)) in self._items for f in frames)

"""What the peer adapters share: grouping a batch plan per video, resizing, cropping, and a
map-style dataset of whole batches for ``torch.utils.data.DataLoader``.

Peers decode each video's wanted frames in one sorted call (what their documentation
recommends: ``get_batch`` on sorted indices for decord, ``get_frames_at`` for torchcodec), then
scatter the frames back into the batch's rows.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator

import numpy as np
import torch

from ..sampling import BatchPlan
from ._workloads import Geometry

#: Open decoders a peer keeps per worker process (reopening a file costs a probe); enough for
#: every camera file of a multi-camera batch (8 clips x 6 cameras).
OPEN_FILES_PER_WORKER = 64


def group_by_video(bp: BatchPlan) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """For every video of a batch: ``(video, unique sorted frames, rows, source)``.

    ``rows`` are flat row positions (``sample * T + t``) and ``source[k]`` the position in the
    unique frames of the frame that row ``rows[k]`` wants.
    """
    t = bp.frame_indices.shape[1]
    videos = np.repeat(np.asarray(bp.video_indices, np.int64), t)
    frames = np.asarray(bp.frame_indices, np.int64).ravel()
    for v in np.unique(videos):
        rows = np.flatnonzero(videos == v)
        unique, source = np.unique(frames[rows], return_inverse=True)
        yield int(v), unique, rows, source


def output_shape(bp: BatchPlan, index, geometry: Geometry) -> tuple[int, ...]:
    """Shape of a delivered batch (the geometry of the batch's first video)."""
    rec = index[int(bp.video_indices[0])]
    h, w = geometry.output(rec.height, rec.width)
    t = bp.frame_indices.shape[1]
    return (bp.batch_size, t, h, w, 3) if bp.is_clip else (bp.batch_size, h, w, 3)


def assemble(bp: BatchPlan, index, geometry: Geometry,
             decode: Callable[[object, np.ndarray], np.ndarray | torch.Tensor]) -> torch.Tensor:
    """Decode a batch with ``decode(record, sorted_frames) -> [n, H, W, 3]`` per video.

    Returns:
        uint8 tensor shaped :func:`output_shape` (on the device ``decode`` returns).
    """
    shape = output_shape(bp, index, geometry)
    out = None
    for v, frames, rows, source in group_by_video(bp):
        got = decode(index[v], frames)
        if not isinstance(got, torch.Tensor):
            got = torch.from_numpy(np.ascontiguousarray(got))
        if out is None:
            out = torch.empty((bp.batch_size * bp.frame_indices.shape[1], *shape[-3:]),
                              dtype=torch.uint8, device=got.device)
        out[torch.from_numpy(rows).to(got.device)] = got[torch.from_numpy(source).to(got.device)]
    return out.view(shape)


def center_crop(x, crop: tuple[int, int] | None):
    """Centre crop of the last-but-one two axes (``[..., H, W, C]``, numpy or torch)."""
    if crop is None:
        return x
    h, w = x.shape[-3], x.shape[-2]
    top, left = (h - crop[0]) // 2, (w - crop[1]) // 2
    return x[..., top : top + crop[0], left : left + crop[1], :]


def resize_torch(x: torch.Tensor, geometry: Geometry) -> torch.Tensor:
    """Resize (bilinear, antialiased) and crop ``[n, H, W, 3]`` uint8 frames, as a torchvision
    ``Resize`` after decoding would (what the exercise's loader does)."""
    h, w = x.shape[-3], x.shape[-2]
    rh, rw = geometry.resized(h, w)
    if (rh, rw) != (h, w):
        y = x.permute(0, 3, 1, 2).float()
        y = torch.nn.functional.interpolate(y, size=(rh, rw), mode="bilinear", antialias=True,
                                            align_corners=False)
        x = y.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
    return center_crop(x, geometry.crop).contiguous()


class FileCache:
    """A small LRU of open decoders keyed by path; ``close(obj)`` runs on eviction."""

    def __init__(self, close: Callable[[object], None] | None = None,
                 capacity: int = OPEN_FILES_PER_WORKER) -> None:
        self.closer, self.capacity = close, capacity
        self.items: OrderedDict[str, object] = OrderedDict()

    def get(self, path: str, open_file: Callable[[], object]):
        """The decoder of ``path``, opened with ``open_file()`` on a miss."""
        if path in self.items:
            self.items.move_to_end(path)
            return self.items[path]
        obj = self.items[path] = open_file()
        while len(self.items) > self.capacity:
            _, old = self.items.popitem(last=False)
            if self.closer:
                self.closer(old)
        return obj


class PlanDataset(torch.utils.data.Dataset):
    """Item ``b`` is batch ``b`` of the plan, decoded whole by ``reader`` (one DataLoader
    worker per batch, like a ``batch_sampler``). The reader is built lazily, inside the worker.

    Args:
        plans (list[BatchPlan]): the batches.
        index: the :class:`~vidloader.VideoIndex` the plans refer to.
        geometry (Geometry): resize and crop.
        make_reader (Callable): picklable factory ``(geometry) -> reader``; a reader has
            ``decode(record, sorted_frames) -> [n, H, W, 3]``.
    """

    def __init__(self, plans: list[BatchPlan], index, geometry: Geometry, make_reader) -> None:
        self.plans, self.index, self.geometry = plans, index, geometry
        self.make_reader = make_reader
        self._reader = None

    def __len__(self) -> int:
        return len(self.plans)

    def __getitem__(self, b: int) -> torch.Tensor:
        if self._reader is None:
            self._reader = self.make_reader(self.geometry)
        return assemble(self.plans[b], self.index, self.geometry, self._reader.decode)


def data_loader(dataset, *, workers: int, batch_size: int | None = None,
                pin_memory: bool = False) -> torch.utils.data.DataLoader:
    """A DataLoader as the peers' users run one: ``spawn`` workers, default prefetch."""
    extra = {"multiprocessing_context": "spawn", "prefetch_factor": 2} if workers else {}
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=False,
                                       num_workers=workers, pin_memory=pin_memory, **extra)

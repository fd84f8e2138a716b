"""A finished batch, out of its staging slot: the user's dict of tensors, and the counters."""

from __future__ import annotations

import numpy as np
import torch

from ..decoding import BATCH_FIXES, NVDEC_FIXES, DecodeStats, gpu_memory_guard
from ..processing import finalize
from ._config import LoaderConfig
from ._contract import BatchPool
from ._scheduler import FinishedBatch
from ._transfer import Transfer

#: What the collector allocates, for a :class:`~vidloader.errors.GpuMemoryError`.
_BATCH_COPY = ("the batch handed to you: its copy out of the staging slot and its finalisation "
               "(dtype, normalisation, layout)")


class LoaderStats(dict):
    """``loader.stats``: batches, samples, skipped samples and files (each file once), the rows each executor
    filled (``rows_by_executor``), the files decoded on the CPU instead of NVDEC
    (``cpu_fallback_files``: path -> why) and the GPU staging buffers' counters
    (``gpu_staging``: ``buffers``, ``in_use``, ``peak_in_use``, ``overflows``; empty but with
    NVDEC in separation mode or the combo). A dict, so it prints and serialises as one."""

    def __init__(self) -> None:
        super().__init__(batches=0, samples=0, skipped_samples=0, skipped_files=[],
                         rows_by_executor={}, cpu_fallback_files={}, gpu_staging={})


class Collector:
    """Copies a finished batch out of its slot (one copy per output, to the user's device),
    finalises each output (dtype, layout, normalisation) and counts it."""

    def __init__(self, config: LoaderConfig) -> None:
        self.config = config
        self.transfer = Transfer(config.device, config.pin_memory)
        self.ranges = config.ranges
        self.stats = LoaderStats()
        self.decode_stats = DecodeStats()
        #: The GPU batches are made on, and what frees memory there (named if it runs out).
        self._gpu = config.device if config.device is not None or not config.uses_nvdec else config.gpu
        self._fixes = NVDEC_FIXES if config.uses_nvdec else BATCH_FIXES

    def __call__(self, done: FinishedBatch, pool: BatchPool) -> dict | None:
        """The batch's dict, or ``None`` when every row of it was skipped.

        Raises:
            GpuMemoryError: the GPU had no room for the batch's copy out of its slot or for
                its finalisation (dtype, normalisation) there.
        """
        with (self.ranges("vidloader.collect", done.plan.batch_index),
              gpu_memory_guard(_BATCH_COPY, self._gpu, fixes=self._fixes)):
            return self._collect(done, pool)

    def _collect(self, done: FinishedBatch, pool: BatchPool) -> dict | None:
        bp, valid, per = done.plan, done.valid, self.config.rows_per_sample
        if per > 1:  # a sample with one bad camera file is dropped whole
            valid = np.repeat(valid.reshape(-1, per).all(axis=1), per)
        self._account(done, valid)
        if not valid.any():
            return None
        rows = None if valid.all() else torch.from_numpy(np.flatnonzero(valid))
        batch = {}
        for name, proc in self.config.outputs.items():
            with self.ranges("vidloader.copy", name):
                staged = self._staged(done, pool, name, rows)
            with self.ranges("vidloader.finalize", name):
                batch[name] = finalize(staged, proc, is_clip=bp.is_clip)
        keep = slice(None) if rows is None else rows.numpy()
        frames = bp.frame_indices if bp.is_clip else bp.frame_indices[:, 0]
        batch["video_index"] = torch.from_numpy(bp.video_indices[keep].copy())
        batch["frame_index"] = torch.from_numpy(frames[keep].copy())
        if bp.labels is not None:
            batch["label"] = torch.from_numpy(bp.labels[keep].copy())
        if per > 1:
            batch = {k: t.unflatten(0, (-1, per)) for k, t in batch.items()}
        return batch

    def _staged(self, done: FinishedBatch, pool: BatchPool, name: str, rows) -> torch.Tensor:
        """Output ``name`` of the batch, copied out of its slot: one copy, or, when several
        executors filled it into different memories, one per segment, joined in row order."""
        executors = done.executors
        if len(executors) <= 1:
            buf = pool.staged(done.slot_id, next(iter(executors), ""))[name]
            return self.transfer(buf[: done.plan.batch_size], rows)
        parts = [self.transfer(pool.staged(done.slot_id, ex)[name][a:z]) for a, z, ex in done.segments]
        joined = torch.cat(parts)
        return joined if rows is None else joined[rows.to(joined.device)]

    def _account(self, done: FinishedBatch, valid: np.ndarray) -> None:
        stats, per = self.stats, self.config.rows_per_sample
        stats["batches"] += 1
        stats["samples"] += int(valid.sum()) // per  # rows are cameras × samples
        stats["skipped_samples"] += int((~valid).sum()) // per
        # A file fails once per unit that needs it: name it once.
        stats["skipped_files"].extend(dict.fromkeys(
            p for p, _ in done.errors if p not in stats["skipped_files"]))
        stats["cpu_fallback_files"].update(done.fallbacks)
        for name, rows in done.rows_by_executor.items():
            stats["rows_by_executor"][name] = stats["rows_by_executor"].get(name, 0) + rows
        if done.stats is not None:
            self.decode_stats.add(DecodeStats(**done.stats))

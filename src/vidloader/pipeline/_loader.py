"""``VideoLoader``: batches of decoded, processed frames or clips, as fast as the machine allows."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Literal

import numpy as np
import torch

from ..constants import (
    DEFAULT_DECODER_THREADS,
    DEFAULT_LOOKAHEAD_BATCHES,
    DEFAULT_NVDEC_DECODERS,
    DEFAULT_PREFETCH_PER_WORKER,
    MAX_DECODERS_PER_GPU,
)
from ..decoding import DecodeStats, get_executor
from ..errors import ConfigError, WorkerError
from ..index import VideoIndex
from ..processing import Process, as_outputs, finalize, geometry
from ..sampling import RandomFrames, Sampler, detect_rank_world, resolve_labels
from ._assemble import BatchAssembler
from ._pool import InlinePool, ProcessPool, SeparationPool
from ._transfer import Transfer
from ._units import (
    Part,
    block_units,
    has_block_units,
    max_unit_batches,
    split_by_video,
    whole_batch_units,
)
from ._worker import WorkerConfig

log = logging.getLogger(__name__)
_LIVE_LOADERS: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _shutdown_all() -> None:  # interpreter exit: no worker may outlive the program
    for loader in list(_LIVE_LOADERS):
        loader.shutdown()


class VideoLoader:
    """An iterable of batches of video frames or clips, decoded by worker processes.

    Each batch is a dict of tensors: one entry per output (``"frames"`` by default, shaped
    ``B×H×W×C`` for single frames or ``B×T×H×W×C`` for clips in the default layout), plus
    ``video_index`` and ``frame_index`` (int64) and ``label`` when labels are given.

    Args:
        index (VideoIndex): the videos (see :func:`vidloader.build_index`).
        sampler (Sampler): which frames or clips; default :class:`RandomFrames` (uniform over
            frames, each once per epoch).
        batch_size (int): samples per batch (with :class:`~vidloader.MultiCameraClips`, rigs:
            each fills one row per camera, and outputs are ``[B, cameras, ...]``).
        size ((int, int) | None): shortcut for ``processing=Process(size=size)``.
        processing (Process | dict[str, Process] | None): what to produce; a dict produces
            several named outputs from the same decoded frames.
        labels: a sequence aligned with the index's videos, a dict path→label, or a callable
            on the path.
        backend ("cpu" | "nvdec"): decoding backend. ``"nvdec"`` decodes on the GPU given by
            ``device`` (default ``cuda:$LOCAL_RANK``) in this process; frames never leave it.
        num_workers (int | None): CPU processes (``spawn``). With ``"cpu"`` they decode; with
            ``"nvdec"`` they only demux (separation mode) and this process decodes. 0 does
            everything in the calling process. Default: the number of CPU cores.
        prefetch (int): bounded prefetch: the loader holds ``lookahead × (num_workers +
            prefetch − 1)`` staging slots of one batch each, in shared memory.
        lookahead (int | None): consecutive batches a worker plans and decodes together, so
            that a GOP several of them need is decoded once. Default: the sampler's
            ``preferred_lookahead`` if it has one, else 4.
        pin_memory (bool): return CPU batches in pinned memory (faster ``.cuda()``).
        device (str | torch.device | None): move each batch there (one non-blocking copy);
            dtype conversion and normalisation then run on that device.
        on_error ("raise" | "skip"): a bad video raises :class:`WorkerError` naming it, or is
            skipped (its samples dropped from the batch), logged and counted in ``stats``.
        drop_last (bool): drop the last, short batch of an epoch.
        rank, world_size (int | None): distributed shard; default from ``RANK``/``WORLD_SIZE``
            or ``torch.distributed``.
        persistent_workers (bool): keep workers between epochs.
        decoder_threads (int): FFmpeg threads per decode (``"cpu"``).
        nvdec_decoders (int): NVDEC decoders on threads, to keep the engines busy (``"nvdec"``).
        nvdec_options (Mapping | None): further :class:`~vidloader.decoding.NvdecExecutor`
            options (``frame_cache_bytes``, ``packet_cache_bytes``, ``skip_nonref``).

    .. note:: The stream of batches is a pure function of (sampler seed, epoch, rank): the same
       whatever ``num_workers``. :meth:`state_dict` taken mid-epoch and loaded into a fresh
       loader continues the identical stream.
    """

    def __init__(
        self,
        index: VideoIndex,
        *,
        sampler: Sampler | None = None,
        batch_size: int = 128,
        size: tuple[int, int] | int | None = None,
        processing: Process | Mapping[str, Process] | None = None,
        labels: Sequence[int] | Mapping[str, int] | Callable[[str], int] | None = None,
        backend: Literal["cpu", "nvdec"] = "cpu",
        num_workers: int | None = None,
        prefetch: int = DEFAULT_PREFETCH_PER_WORKER,
        lookahead: int | None = None,
        pin_memory: bool = False,
        device: str | torch.device | None = None,
        on_error: Literal["raise", "skip"] = "raise",
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        persistent_workers: bool = False,
        decoder_threads: int = DEFAULT_DECODER_THREADS,
        nvdec_decoders: int = DEFAULT_NVDEC_DECODERS,
        nvdec_options: Mapping[str, object] | None = None,
    ) -> None:
        if len(index) == 0:
            raise ConfigError("the index holds no readable videos" + _rejected_hint(index))
        if batch_size < 1 or prefetch < 1:
            raise ConfigError(f"batch_size and prefetch must be >= 1, got {batch_size}, {prefetch}")
        if on_error not in ("raise", "skip"):
            raise ConfigError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        self.index = index
        self.sampler = sampler if sampler is not None else RandomFrames()
        self.batch_size, self.drop_last = batch_size, drop_last
        # A multi-camera sampler fills one row per camera, and every output gets a camera axis
        # (Sampler.rows_per_sample; a sampler not derived from Sampler fills one row).
        self._rows_per_sample = int(getattr(self.sampler, "rows_per_sample", 1))
        self.outputs = as_outputs(processing, size=size)
        self.labels = resolve_labels(index, labels)
        self.backend, self.on_error = backend, on_error
        self.num_workers = (os.cpu_count() or 1) if num_workers is None else num_workers
        self.prefetch, self.persistent_workers = prefetch, persistent_workers
        self._lookahead_arg = lookahead
        if lookahead is not None and lookahead < 1:
            raise ConfigError(f"lookahead must be >= 1, got {lookahead}")
        if backend not in ("cpu", "nvdec"):
            raise ConfigError(f"backend must be 'cpu' or 'nvdec', got {backend!r}")
        self.executor_options = (
            {"thread_count": decoder_threads} if backend == "cpu"
            else {**_nvdec_options(index, device, nvdec_decoders), **(nvdec_options or {})}
        )
        detected = detect_rank_world()
        self.rank = detected[0] if rank is None else rank
        self.world_size = detected[1] if world_size is None else world_size
        self._transfer = Transfer(device, pin_memory)
        self._plan_cache: tuple | None = None  # (epoch, plan): one epoch's plan, reused
        self._epoch = 0
        self._seq_len = self._sequence_length()
        self._shapes = self._staging_shapes()
        self._next_batch = 0
        self._pool = None
        self._outstanding = 0
        self._next_worker = 0  # round-robin over the workers, unit by unit
        self.stats = {"batches": 0, "samples": 0, "skipped_samples": 0, "skipped_files": []}
        self.decode_stats = DecodeStats()
        _LIVE_LOADERS.add(self)

    # -- set-up -------------------------------------------------------------------------

    def _sequence_length(self) -> int:
        if len(self) == 0:
            raise ConfigError(
                f"rank {self.rank} of {self.world_size} gets no batch of {self.batch_size} "
                f"from {self.sampler.num_samples(self.index)} samples; lower batch_size or "
                "set drop_last=False"
            )
        return self._epoch_plan(0).batch(0).sequence_length

    def _staging_shapes(self) -> dict[str, tuple]:
        shapes = {}
        for name, proc in self.outputs.items():
            sizes = set()
            for rec in _distinct_sizes(self.index):
                sizes.add(geometry(proc, rec.height, rec.width, rotation=rec.rotation, path=rec.path).out_hw)
            if len(sizes) > 1:
                raise ConfigError(
                    f"output {name!r}: videos have different sizes {sorted(sizes)[:4]}, so "
                    "frames cannot share a batch; give size=(height, width)"
                )
            (h, w), t = sizes.pop(), proc.frames_out(self._seq_len)
            shapes[name] = (self.batch_size * self._rows_per_sample, t, h, w, 3)
        return shapes

    @property
    def lookahead(self) -> int:
        """Batches per unit of work: the argument, else the most batches one block of a
        GOP-local plan touches (each block is one unit), else the default."""
        if self._lookahead_arg is not None:
            return int(self._lookahead_arg)
        if self.uses_block_units:
            return max_unit_batches(self._epoch_plan(self._epoch))
        return DEFAULT_LOOKAHEAD_BATCHES

    @property
    def staging_slots(self) -> int:
        """Batches the loader can hold at once (decoded ahead or being decoded): its staging
        slots, ``lookahead`` times the units in flight."""
        return self.lookahead * self._units_in_flight()

    @property
    def uses_block_units(self) -> bool:
        """Whether work is handed out one GOP-local block at a time (see ``lookahead``)."""
        return self._lookahead_arg is None and has_block_units(self._epoch_plan(self._epoch))

    def _units_in_flight(self) -> int:
        """Units the staging slots hold at once. Whole-batch units: one per worker plus the
        prefetch. Block units are large, and need no slot per worker: on CPU workers a
        block is shared by all of them (see :meth:`_dispatch`), so ``prefetch + 1``; on the
        GPU up to ``SeparationPool.max_units_decoding`` decode at once, plus the prefetch."""
        if self.uses_block_units:
            decoding = SeparationPool.MAX_UNITS_DECODING if self.backend == "nvdec" else 1
            return self.prefetch + decoding
        return max(1, self.num_workers) + self.prefetch - 1

    def _epoch_plan(self, epoch: int):
        cached = self._plan_cache
        if cached is None or cached[0] != epoch:
            plan = self.sampler.plan_epoch(
                self.index, epoch=epoch, batch_size=self.batch_size, rank=self.rank,
                world_size=self.world_size, drop_last=self.drop_last,
            )
            self._plan_cache = cached = (epoch, plan)
        return cached[1]

    def _make_pool(self):
        num_slots = self.staging_slots
        if self.backend == "nvdec":
            return self._make_nvdec_pool(num_slots)
        if self.num_workers == 0:
            executor = get_executor(self.backend, **self.executor_options)
            assembler = BatchAssembler(self.index, self.outputs, executor, on_error=self.on_error)
            return InlinePool(assembler, self._shapes, self.lookahead)
        config = WorkerConfig(
            self.index, self.outputs, self.backend, self.executor_options, self.on_error
        )
        return ProcessPool(config, self._shapes, num_slots, self.num_workers)

    def _make_nvdec_pool(self, num_slots: int):
        # Demux workers start first (spawn): CUDA is initialised here only afterwards, and
        # never in a worker.
        gpu = torch.device("cuda", self.executor_options["device"])
        if self.num_workers == 0:
            executor = get_executor("nvdec", **self.executor_options)
            assembler = BatchAssembler(self.index, self.outputs, executor, on_error=self.on_error)
            return InlinePool(assembler, self._shapes, self.lookahead, device=gpu)
        assembler = BatchAssembler(self.index, self.outputs, _LazyExecutor(self.executor_options), on_error=self.on_error)
        return SeparationPool(assembler, self._shapes, num_slots, self.num_workers, gpu)

    # -- iteration ----------------------------------------------------------------------

    def __len__(self) -> int:
        """Batches per epoch for this rank (the same every epoch)."""
        return len(self._epoch_plan(self._epoch))

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        epoch, start = self._epoch, self._next_batch
        plan = self._epoch_plan(epoch)
        if self._pool is None:
            self._pool = self._make_pool()
        try:
            yield from self._run(plan, epoch, start)
        except GeneratorExit:  # the consumer broke out of its loop
            self._drain_or_close()
            raise
        except BaseException:
            self._close_pool()
            raise
        if not self.persistent_workers:
            self._close_pool()
        self._epoch, self._next_batch = epoch + 1, 0

    def _drain_or_close(self) -> None:
        """After a ``break``: keep persistent workers (once their in-flight batches are
        received and dropped, so the next epoch starts clean), else stop them."""
        if not self.persistent_workers or self._pool is None:
            self._close_pool()
            return
        try:
            while self._outstanding > 0:
                self._pool.get()
                self._outstanding -= 1
        except BaseException:
            self._close_pool()
            raise

    def _run(self, plan, epoch: int, start: int) -> Iterator[dict]:
        pool, n = self._pool, len(plan)
        free = list(range(len(pool.slots)))[::-1]
        open_batches: dict[int, _OpenBatch] = {}  # dispatched, not yet yielded
        units = self._units(plan, start)
        unit, self._outstanding = next(units, None), 0
        for b in range(start, n):
            # Hand out units while slots are free. A unit needs a slot for each batch it
            # touches that has none yet (a batch straddling two blocks shares its slot).
            while unit is not None and len(free) >= sum(p.batch not in open_batches for p in unit):
                self._dispatch(plan, unit, open_batches, free)
                unit = next(units, None)
            while not open_batches[b].complete:
                msg = pool.get()
                if msg[0] == "error":
                    raise WorkerError(
                        f"decoding batch {msg[1]} failed: {msg[3]}", path=msg[5], remote_traceback=msg[4]
                    )
                self._outstanding -= 1
                open_batches[msg[1]].receive(msg)
            done = open_batches.pop(b)
            batch = self._collect(done.plan, done.slot, done.valid, done.errors, done.stats)
            free.append(done.slot)
            self._next_batch = b + 1
            if batch is not None:
                yield batch

    def _units(self, plan, start: int) -> Iterator[list[Part]]:
        if self.uses_block_units:  # (of this epoch's plan: `plan`)
            return block_units(plan, start)
        return whole_batch_units(start, len(plan), self.lookahead)

    def _dispatch(self, plan, unit: list[Part], open_batches: dict, free: list) -> None:
        """Send one unit: to one worker, or, for a block on CPU workers, cut by video over
        all of them (they decode disjoint GOPs of the block into the same slots at once)."""
        for part in unit:
            if part.batch not in open_batches:
                open_batches[part.batch] = _OpenBatch(free.pop(), self._plan_with_labels(plan, part.batch))
        plans = {b: ob.plan for b, ob in open_batches.items()}
        split = isinstance(self._pool, ProcessPool) and self.uses_block_units
        for share in split_by_video(unit, plans, self._pool.num_workers) if split else [unit]:
            slot_ids, sub_plans, row_starts = [], [], []
            for part in share:
                full = open_batches[part.batch]
                a, z = part.rows(full.plan.batch_size)
                full.expect(a, z)
                slot_ids.append(full.slot)
                sub_plans.append(full.plan if (a, z) == (0, full.plan.batch_size) else full.plan.rows(a, z))
                row_starts.append(a)
            self._pool.submit(self._next_worker, slot_ids, sub_plans, row_starts)
            self._next_worker = (self._next_worker + 1) % self._pool.num_workers
            self._outstanding += len(share)

    def _plan_with_labels(self, plan, b: int):
        bp = plan.batch(b)
        return bp if self.labels is None else bp.with_labels(self.labels[bp.video_indices])

    def _collect(self, bp, slot_id: int, valid: np.ndarray, errors, delta) -> dict | None:
        if self._rows_per_sample > 1:  # a sample with one bad camera file is dropped whole
            valid = np.repeat(valid.reshape(-1, self._rows_per_sample).all(axis=1), self._rows_per_sample)
        self._account(bp, valid, errors, delta)
        if not valid.any():
            return None
        rows = None if valid.all() else torch.from_numpy(np.flatnonzero(valid))
        slot = self._pool.slots[slot_id]
        batch = {}
        for name, proc in self.outputs.items():
            staged = self._transfer(slot[name][: bp.batch_size], rows)
            batch[name] = finalize(staged, proc, is_clip=bp.is_clip)
        keep = slice(None) if rows is None else rows.numpy()
        frames = bp.frame_indices if bp.is_clip else bp.frame_indices[:, 0]
        batch["video_index"] = torch.from_numpy(bp.video_indices[keep].copy())
        batch["frame_index"] = torch.from_numpy(frames[keep].copy())
        if bp.labels is not None:
            batch["label"] = torch.from_numpy(bp.labels[keep].copy())
        if self._rows_per_sample > 1:
            batch = {k: t.unflatten(0, (-1, self._rows_per_sample)) for k, t in batch.items()}
        return batch

    def _account(self, bp, valid, errors, delta) -> None:
        self.stats["batches"] += 1
        self.stats["samples"] += int(valid.sum()) // self._rows_per_sample  # rows are cameras × samples
        self.stats["skipped_samples"] += int((~valid).sum()) // self._rows_per_sample
        self.stats["skipped_files"].extend(path for path, _ in errors)
        self.decode_stats.add(DecodeStats(**delta))

    # -- epochs and resume -------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Start the next iteration at the beginning of ``epoch`` (as DistributedSampler)."""
        self._epoch, self._next_batch = int(epoch), 0

    def state_dict(self) -> dict:
        """Where the stream stands: loading it into a fresh loader continues identically."""
        return {
            "epoch": self._epoch,
            "next_batch": self._next_batch,
            "sampler": self.sampler.config(),
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "rank": self.rank,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`state_dict`; refuses a state from a different configuration."""
        mine = self.state_dict()
        for key in ("sampler", "batch_size", "drop_last", "rank", "world_size"):
            if state.get(key) != mine[key]:
                raise ConfigError(
                    f"cannot resume: state has {key}={state.get(key)!r} but this loader has "
                    f"{mine[key]!r}; build the loader with the same settings"
                )
        self._epoch, self._next_batch = int(state["epoch"]), int(state["next_batch"])

    # -- shutdown ----------------------------------------------------------------------

    def _close_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown()

    def shutdown(self) -> None:
        """Stop all workers and free shared memory. Safe to call more than once."""
        self._close_pool()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.shutdown()

    def __repr__(self) -> str:
        return (
            f"VideoLoader({len(self.index)} videos, {type(self.sampler).__name__}, "
            f"batch_size={self.batch_size}, outputs={list(self.outputs)}, "
            f"backend={self.backend!r}, num_workers={self.num_workers})"
        )


def _nvdec_options(index: VideoIndex, device, decoders: int) -> dict:
    """NVDEC executor options: the GPU, and decoder size limits that fit every video (so one
    decoder per codec is reconfigured, never recreated)."""
    if not 1 <= int(decoders) <= MAX_DECODERS_PER_GPU:  # here, not on first use in the GPU process
        raise ConfigError(f"nvdec_decoders must be in 1..{MAX_DECODERS_PER_GPU} (decoder threads "
                          f"per GPU), got {decoders}")
    if device is not None and torch.device(device).type == "cuda":
        gpu = torch.device(device).index or 0
    else:
        gpu = int(os.environ.get("LOCAL_RANK", "0"))
    return {
        "device": gpu,
        "max_width": max(r.width for r in index),
        "max_height": max(r.height for r in index),
        "num_decoders": decoders,
    }


class _LazyExecutor:
    """Creates the NVDEC executor on first use, i.e. after the demux workers were spawned,
    so CUDA is never initialised before a process start."""

    def __init__(self, options: dict) -> None:
        self._options, self._executor = options, None

    def _get(self):
        if self._executor is None:
            self._executor = get_executor("nvdec", **self._options)
        return self._executor

    @property
    def stats(self):
        return self._get().stats

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._get(), name)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()


def _distinct_sizes(index: VideoIndex):
    seen = {}
    for rec in index:
        seen.setdefault((rec.height, rec.width, rec.rotation), rec)  # rotation: see autorotate
    return list(seen.values())


def _rejected_hint(index: VideoIndex) -> str:
    if not index.rejected:
        return ""
    first = index.rejected[0]
    return f" ({len(index.rejected)} rejected, e.g. {first.path}: {first.reason})"


class _OpenBatch:
    """A dispatched batch: its slot and plan, and the row ranges reported so far (a batch
    can be filled by several units, each reporting its rows)."""

    def __init__(self, slot: int, plan) -> None:
        self.slot, self.plan = slot, plan
        self.valid = np.zeros(plan.batch_size, dtype=bool)
        self.errors: list = []
        self.stats: dict | None = None
        self.rows_expected = self.rows_received = 0

    def expect(self, start: int, stop: int) -> None:
        self.rows_expected += stop - start

    @property
    def complete(self) -> bool:
        return self.rows_expected == self.plan.batch_size and self.rows_received == self.rows_expected

    def receive(self, msg) -> None:
        _, _, _, valid, errors, stats, start = msg
        self.valid[start:start + len(valid)] = valid
        self.rows_received += len(valid)
        self.errors.extend(errors)
        self.stats = dict(stats) if self.stats is None else {k: v + stats[k] for k, v in self.stats.items()}

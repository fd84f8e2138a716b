"""``ImageLoader``: image datasets through the video loader's samplers, scheduler, worker
processes, resume and shutdown.

It subclasses :class:`~._loader.VideoLoader` for the epoch loop, ``set_epoch``,
``state_dict`` / ``load_state_dict`` and shutdown, which depend only on the sampler, the
scheduler and a pool; it replaces the set-up (options, pools) and the collector.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

import numpy as np
import torch

from ..constants import DEFAULT_PREFETCH_PER_WORKER
from ..errors import ConfigError
from ..images._batched import to_device
from ..images._dataset import ImageDataset
from ..images._spec import ImageProcess
from ..processing import finalize
from ..sampling import RandomFrames, Sampler, detect_rank_world
from ._contract import BatchPool
from ._loader import _LIVE_LOADERS, VideoLoader
from ._scheduler import FinishedBatch, Scheduler
from ._transfer import Transfer

Decoder = Literal["auto", "memory", "pillow", "nvimgcodec"]
Output = Literal["dict", "dali"]
DECODERS: tuple[str, ...] = ("auto", "memory", "pillow", "nvimgcodec")
OUTPUTS: tuple[str, ...] = ("dict", "dali")
#: Threads reading files for a batch decoder given bytes (nvImageCodec opens its files
#: itself). Few: on the H100 machine Python's reads of 70 KB JPEGs went 15.8k files/s on one
#: thread and 9-13k on 2-8 (the GIL), and the loader was fastest with 1-2
#: (``benchmarks/results/gpu/session9-3/jpeg_stages.log``).
DEFAULT_READER_THREADS = 2
#: Samples an in-memory dataset on a GPU augments in one pass (a unit of ``4096 //
#: batch_size`` batches): a pass costs a few dozen launches and a few hundred µs of host
#: work whatever its size, which per batch of 256 capped a CIFAR epoch at ~140k images/s.
#: On the CPU a batch at a time is faster (its intermediates stay in cache).
MEMORY_UNIT_SAMPLES = 4096
#: Worker processes of ``decoder="nvimgcodec"``, each decoding and augmenting whole batches
#: on the GPU (:mod:`._image_gpu_workers`). On the H200 (session18-5, one call, 224² random
#: resized crop + flip + normalize, batch 256): 0 (in this process) / 2 / 3 / 4 / 6 / 8
#: workers gave 8,058 / 10,369 / 9,885 / 10,646 / 10,785 / 10,560 images/s, the GPU holding
#: 3.1 / 6.7 / 8.8 / 10.9 / 15.4 / 19.8 GiB: past two, memory grows and the pace does not.
#: Since nvJPEG's hardware decoder is called directly (session 28), the decode in this
#: process lets go of the GIL for each batch, and the in-process pool (0) is the default: on
#: the H200 it ran ahead of two workers in 4 of 5 alternated pairs (20,198 / 20,510 /
#: 21,419 / 21,844 / 22,577 against 18,693 / 18,568 / 21,652 / 19,832 / 18,981 images/s,
#: ``session28-1``, ``-5``), and beside a training step's host work (10 ms of small torch ops
#: a batch) 16,731 / 16,862 against 14,444 / 15,168 (DALI 15,380 / 15,945; ``session28-9``),
#: with half the GPU memory (+3.6 against +6.8 GiB) and utilisation (44-54% against 72-88%:
#: two processes' CUDA contexts take turns on the GPU). Beside a pure-Python loop in the
#: training process (the worst case) the workers kept more: 17,524 against 12,937.
GPU_IMAGE_WORKERS = 0


@dataclasses.dataclass(frozen=True)
class ImageLoaderConfig:
    """The image loader's options, resolved once; read by pools, workers and the collector.

    ``backend`` is the decoder that fills slots (``"memory"``, ``"pillow"``,
    ``"nvimgcodec"``, or ``"batch"`` for a user's batch decoder); ``out_hw`` the staged image size; ``lookahead`` batches per unit (1, or
    :data:`MEMORY_UNIT_SAMPLES` worth for an in-memory dataset).
    """

    dataset: ImageDataset
    proc: ImageProcess
    out_hw: tuple[int, int]
    backend: str
    batch_size: int
    on_error: str
    num_workers: int
    prefetch: int
    persistent_workers: bool
    device: torch.device | None
    pin_memory: bool
    output: str
    reader_threads: int = DEFAULT_READER_THREADS
    lookahead: int = 1

    @property
    def skips_bad_files(self) -> bool:
        return self.on_error == "skip"

    @property
    def outputs(self) -> dict:
        return {"images": self.proc}


class ImageCollector:
    """A finished slot → ``{"images", "label", "sample_index"}`` (or DALI's
    ``[{"data", "label"}]``): one copy out, ``finalize`` on the batch's device, counters."""

    def __init__(self, config: ImageLoaderConfig) -> None:
        self.config = config
        self.transfer = Transfer(config.device, config.pin_memory)
        self.stats = {"batches": 0, "samples": 0, "skipped_samples": 0, "skipped_files": [],
                      "rows_by_executor": {}}
        self.decode_stats = None  # no GOPs, seeks or packets: see stats["rows_by_executor"]

    def __call__(self, done: FinishedBatch, pool: BatchPool):
        bp, valid = done.plan, done.valid
        self._account(done)
        if not valid.any():
            return None
        rows = None if valid.all() else torch.from_numpy(np.flatnonzero(valid))
        staged = pool.slots[done.slot_id]["images"][: bp.batch_size]
        images = self.transfer(staged, rows)
        if not getattr(pool, "stages_final", False):  # the GPU pool normalises as it resizes
            images = finalize(images, self.config.proc, is_clip=False)
        keep = slice(None) if rows is None else rows.numpy()
        labels = torch.from_numpy(bp.labels[keep].copy())
        if self.config.output == "dali":  # DALIGenericIterator: one dict per pipeline
            return [{"data": images, "label": labels.view(-1, 1).to(images.device)}]
        return {"images": images, "label": labels,
                "sample_index": torch.from_numpy(bp.video_indices[keep].copy())}

    def from_memory(self, plans: list, images: torch.Tensor, labels: np.ndarray):
        """The batches of a unit of an in-memory dataset: ``images`` holds the plans' finished
        samples in order (owned, on the batch's device); each batch is a view of it, so a
        batch costs a few slices (no copy, no launch)."""
        indices = np.concatenate([plan.video_indices for plan in plans])
        sample_index = torch.from_numpy(indices)
        dali = self.config.output == "dali"
        # DALI's labels: one copy to the images' device per unit, not one per batch.
        label = (to_device(labels[indices].reshape(-1, 1), images.device) if dali
                 else torch.from_numpy(labels[indices]))
        stats, rows_by = self.stats, self.stats["rows_by_executor"]
        offset = 0
        for plan in plans:
            rows = slice(offset, offset + plan.batch_size)
            offset = rows.stop
            stats["batches"] += 1
            stats["samples"] += plan.batch_size
            rows_by["memory"] = rows_by.get("memory", 0) + plan.batch_size
            if dali:
                yield [{"data": images[rows], "label": label[rows]}]
            else:
                yield {"images": images[rows], "label": label[rows],
                       "sample_index": sample_index[rows]}

    def _account(self, done: FinishedBatch) -> None:
        stats, valid = self.stats, done.valid
        stats["batches"] += 1
        stats["samples"] += int(valid.sum())
        stats["skipped_samples"] += int((~valid).sum())
        stats["skipped_files"].extend(path for path, _ in done.errors)
        for name, rows in done.rows_by_executor.items():
            stats["rows_by_executor"][name] = stats["rows_by_executor"].get(name, 0) + rows


def make_image_pool(config: ImageLoaderConfig, num_slots: int, decoder=None):
    """The pool that fills ``config``'s slots (``decoder``: a stand-in for nvImageCodec), or
    for an in-memory dataset the :class:`~._image_pools.MemoryImages` that needs none."""
    from ._image_pools import BatchDecodePool, MemoryImages, PillowInlinePool, PillowProcessPool

    if config.backend == "memory":
        return MemoryImages(config)
    if config.backend == "nvimgcodec" and config.num_workers > 0:
        from ._image_gpu_workers import GpuImageProcessPool

        return GpuImageProcessPool(config, num_slots)
    if config.backend in ("nvimgcodec", "batch"):
        return BatchDecodePool(config, num_slots, decoder)
    if config.num_workers == 0:
        return PillowInlinePool(config, num_slots)
    return PillowProcessPool(config, num_slots)


class ImageLoader(VideoLoader):
    """An iterable of batches of images (CIFAR in memory, or JPEG/PNG folders).

    Each batch is a dict: ``"images"`` (uint8 ``[B, H, W, 3]``, the stored pixels, when no
    processing is asked for; else as ``processing`` says, e.g. float32 ``[B, 3, 224, 224]``),
    ``"label"`` and ``"sample_index"`` (int64 ``[B]``, the image's position in the dataset).
    With ``output="dali"`` it is instead ``[{"data": images, "label": int64 [B, 1]}]``, as
    DALI's ``DALIGenericIterator`` gives, for code ported from DALI loaders.

    Samplers, resume, sharding and ``on_error`` are the video loader's: each image is a
    one-frame video to the samplers, so ``RandomFrames`` shuffles images (each once per
    epoch) and ``SequentialFrames`` keeps the dataset's order.

    Args:
        dataset (ImageDataset): :class:`~vidloader.images.CIFAR10`,
            :class:`~vidloader.images.CIFAR100`, :class:`~vidloader.images.ImageFolder`, ...
        batch_size (int): images per batch; default 256.
        sampler (Sampler | None): ``RandomFrames`` (default) or ``SequentialFrames``.
        processing (ImageProcess | None): crop, resize, flip, dtype, normalisation, layout;
            default the stored pixels.
        num_workers (int | None): decoding processes. Pillow: default one per core.
            ``"nvimgcodec"``: default :data:`GPU_IMAGE_WORKERS`, 0: in this process, two
            small reader processes read the files into shared memory, two decode threads
            (lanes, the batches dealt to them in turn) decode them (nvJPEG's hardware
            decoder, letting go of the GIL) and an augmentation thread augments; N > 0: N processes that each decode and augment
            whole batches on the GPU (a GIL each; more GPU memory, and their CUDA contexts
            take turns on the GPU; ahead only where the training loop's own Python is
            heavy). Unused for in-memory datasets and decoder objects.
        device (str | torch.device | None): where batches are delivered. An in-memory
            dataset is moved there once and augmented there per batch.
        decoder ("auto" | "memory" | "pillow" | "nvimgcodec"): ``"auto"``: in memory when the
            dataset is, else Pillow. ``"nvimgcodec"`` decodes whole batches on ``device``'s
            GPU (``pip install 'vidloader[images-gpu]'``). An object with ``name`` and
            ``decode(list[bytes | None]) -> list[Tensor | None]`` (uint8 ``[H, W, 3]``
            upright RGB, ``None`` for a failure) decodes whole batches in its place, on its
            own device (e.g. torchvision's ``decode_jpeg(device="cuda")`` wrapped); one with
            ``decode_files(list[str])`` instead is given the paths and reads the files itself.
        output ("dict" | "dali"): the batch's shape (see above).
        on_error ("raise" | "skip"): a file that fails to decode raises
            :class:`~vidloader.WorkerError` naming it, or is dropped from its batch and
            counted in ``stats``.
        prefetch, pin_memory, drop_last, rank, world_size, persistent_workers: as
            :class:`~vidloader.VideoLoader`.
        reader_threads (int): threads reading files for a batch-decoder object given bytes;
            default 2. (``"nvimgcodec"`` opens its files itself.)
    """

    def __init__(
        self,
        dataset: ImageDataset,
        *,
        batch_size: int = 256,
        sampler: Sampler | None = None,
        processing: ImageProcess | None = None,
        num_workers: int | None = None,
        device: str | torch.device | None = None,
        decoder: Decoder | object = "auto",
        output: Output = "dict",
        on_error: Literal["raise", "skip"] = "raise",
        prefetch: int = DEFAULT_PREFETCH_PER_WORKER,
        pin_memory: bool = False,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        persistent_workers: bool = False,
        reader_threads: int = DEFAULT_READER_THREADS,
    ) -> None:
        if not isinstance(dataset, ImageDataset):
            raise ConfigError(f"ImageLoader takes an image dataset (vidloader.images.CIFAR10, "
                              f"ImageFolder, ...), got {type(dataset).__name__}")
        if len(dataset) == 0:
            raise ConfigError(f"{dataset!r} holds no images")
        custom = None if isinstance(decoder, str) else decoder
        _check(batch_size=batch_size, prefetch=prefetch, on_error=on_error,
               decoder="nvimgcodec" if custom is not None else decoder, output=output,
               reader_threads=reader_threads)
        self.index = dataset  # the samplers' view: len() and num_frames (all ones)
        self.sampler = sampler if sampler is not None else RandomFrames()
        if self.sampler.is_clip or self.sampler.rows_per_sample != 1:
            raise ConfigError(f"{self.sampler!r} samples clips or rigs; images take "
                              "RandomFrames or SequentialFrames")
        self.batch_size, self.drop_last = batch_size, drop_last
        self.labels = dataset.labels
        detected = detect_rank_world()
        self.rank = detected[0] if rank is None else rank
        self.world_size = detected[1] if world_size is None else world_size
        self._plan_cache, self._epoch, self._next_batch = None, 0, 0
        proc = processing if processing is not None else ImageProcess()
        backend = _resolve_decoder(dataset, decoder, device) if custom is None else _batch(custom)
        self.config = ImageLoaderConfig(
            dataset=dataset, proc=proc, out_hw=_out_hw(dataset, proc), backend=backend,
            batch_size=batch_size, on_error=on_error,
            num_workers=_default_workers(backend) if num_workers is None else int(num_workers),
            prefetch=prefetch, persistent_workers=persistent_workers,
            device=torch.device(device) if device is not None else None,
            pin_memory=pin_memory, output=output, reader_threads=reader_threads,
            lookahead=_lookahead(backend, device, batch_size),
        )
        self._pool = self._scheduler = None
        self._collector = ImageCollector(self.config)
        self._custom_decoder = custom
        len(self)  # plan epoch 0 now: a rank with no batch fails at construction
        _LIVE_LOADERS.add(self)

    @property
    def dataset(self) -> ImageDataset:
        """The images."""
        return self.index

    @property
    def decode_stats(self):
        """Not kept for images (no GOPs or seeks); see ``stats["rows_by_executor"]``."""
        return None

    @property
    def memory_plan(self) -> dict:
        """What the loader holds, by component, in bytes; every key is always there (0 or
        ``None`` where it does not apply):

        - ``backend``, ``device``;
        - ``staging_slots`` of ``slot_bytes``, ``slots_on`` ``"device"`` (the GPU pools,
          which stage the finished output), ``"shared host"`` (Pillow's workers) or
          ``"host"``;
        - an in-memory dataset: ``dataset_on_device_bytes`` (its copy on a GPU, kept by the
          dataset and shared by its loaders), ``units_alive`` units of ``unit_output_bytes``
          (a unit's output; the next is made while a batch of the last is held) and
          ``augment_workspace_bytes`` (a unit's intermediates, at most);
        - ``decoder="nvimgcodec"`` or a decoder object: ``decode_buffers`` of
          ``decode_buffer_bytes`` (a batch of images of the index's mean size: an estimate;
          a decoder object's own output is not counted unless it decodes packed),
          ``augment_workspace_bytes`` (per augmentation thread or worker: on CUDA with
          Triton, the fused kernel's parameters and one output batch; otherwise, at most, the
          batched matmuls' intermediates for windows as large as the largest image), and in
          one process the reader processes' ``reader_slabs`` of ``reader_slab_bytes`` in
          shared host memory (those of the running pool, or those it would start; readers
          that fail to start give a warning and none), ``reader_slabs_page_locked`` where
          they are locked for CUDA (on a GPU, ``_image_decode.PIN_READ_SLABS``: counted
          against ``ulimit -l`` where one is set);
        - ``cublas_workspace_bytes``: the cuBLAS workspace torch allocates for the stream
          that augments on a GPU in this process, where it runs matmuls (an in-memory
          dataset, or no Triton; 32 MiB on an H200 by default;
          ``CUBLAS_WORKSPACE_CONFIG`` sets it);
        - ``device_bytes``, ``host_bytes`` (shared included), ``host_shared_bytes`` and
          ``host_page_locked_bytes``;
        - ``not_counted``: what the loader also holds and the plan leaves out (the batches
          the training loop holds; on a GPU each process's CUDA context and allocator cache,
          with the one measurement there is).
        """
        from ._image_memory import image_memory_plan

        return image_memory_plan(self)

    @property
    def gpu_staging_buffers(self) -> int:
        """Staging slots that hold GPU memory: all of them for the GPU pools, none for Pillow
        (host slots, copied out per batch) or an in-memory dataset (no slots)."""
        from ._image_memory import gpu_staging_slots

        return gpu_staging_slots(self)

    def _units_in_flight(self) -> int:
        """One batch per worker (Pillow) or decode lane (nvImageCodec) plus the prefetch."""
        from ._image_decode import NVIMGCODEC_LANES

        config = self.config
        lanes = 1 if self._custom_decoder is not None else NVIMGCODEC_LANES  # see BatchDecodePool
        nvimgcodec = config.num_workers or lanes  # processes, or lanes in this process
        ways = {"pillow": config.num_workers, "nvimgcodec": nvimgcodec}.get(config.backend, 1)
        return max(1, ways) + config.prefetch - 1

    @property
    def _unit_workers(self) -> int:
        return self.config.num_workers  # no NVDEC processes: the workers as they are

    def _start(self) -> None:
        self._pool = make_image_pool(self.config, self.staging_slots, self._custom_decoder)
        in_memory = self.config.backend == "memory"
        self._scheduler = None if in_memory else Scheduler(self._pool, self.labels)

    def _run(self, plan, start: int):
        if self._scheduler is not None:
            yield from super()._run(plan, start)
            return
        # In memory: a unit of ``lookahead`` batches at a time, straight from the sampler's
        # plan, with no scheduler (see MemoryImages).
        unit, pool, collect = self.lookahead, self._pool, self._collector.from_memory
        for first in range(start, len(plan), unit):
            plans = [plan.batch(b) for b in range(first, min(first + unit, len(plan)))]
            for b, batch in enumerate(collect(plans, pool.augment(plans), self.labels), first):
                self._next_batch = b + 1
                yield batch

    def _drain_or_close(self) -> None:
        if self._scheduler is None and self._pool is not None and self.persistent_workers:
            return  # in memory: nothing in flight, nothing to drain
        super()._drain_or_close()

    def __repr__(self) -> str:
        return (f"ImageLoader({self.dataset!r}, {type(self.sampler).__name__}, "
                f"batch_size={self.batch_size}, decoder={self.backend!r}, "
                f"num_workers={self.num_workers})")


def _check(*, batch_size, prefetch, on_error, decoder, output, reader_threads) -> None:
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    if prefetch < 1:
        raise ConfigError(f"prefetch must be >= 1, got {prefetch}")
    if on_error not in ("raise", "skip"):
        raise ConfigError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if decoder not in DECODERS:
        raise ConfigError(f"decoder must be one of {DECODERS}, got {decoder!r}")
    if output not in OUTPUTS:
        raise ConfigError(f"output must be 'dict' or 'dali' (DALI's [{{'data', 'label'}}]), "
                          f"got {output!r}")
    if reader_threads < 1:
        raise ConfigError(f"reader_threads must be >= 1, got {reader_threads}")


def _resolve_decoder(dataset: ImageDataset, decoder: str, device) -> str:
    if dataset.in_memory:
        if decoder not in ("auto", "memory"):
            raise ConfigError(f"{dataset!r} is held in memory: nothing to decode, so "
                              f"decoder={decoder!r} does not apply; leave decoder='auto'")
        return "memory"
    if decoder == "memory":
        raise ConfigError(f"{dataset!r} is not in memory; use decoder='pillow' or 'nvimgcodec'")
    _check_file_dataset(dataset)
    if decoder == "nvimgcodec" and (device is None or torch.device(device).type != "cuda"):
        raise ConfigError(f"decoder='nvimgcodec' decodes on a GPU: pass device='cuda' (got "
                          f"device={device!r}), or use decoder='pillow'")
    return "pillow" if decoder == "auto" else decoder


def _check_file_dataset(dataset: ImageDataset) -> None:
    """A dataset of files must name them (``path(i)``) and give each image's upright size
    (``sizes``, int ``[N, 2]``): the crop windows are drawn from the sizes before decoding."""
    sizes = getattr(dataset, "sizes", None)
    shape = getattr(sizes, "shape", None)
    if not callable(getattr(dataset, "path", None)) or shape != (len(dataset), 2):
        raise ConfigError(f"{dataset!r} is neither in memory nor a dataset of files: a dataset "
                          "of files needs path(i) and sizes, an int array [N, 2] of each image's "
                          f"upright (height, width) (got sizes of shape {shape}); subclass "
                          "vidloader.images.ImageFolder, which indexes both")


def _default_workers(backend: str) -> int:
    """Pillow: a process per core; nvImageCodec: :data:`GPU_IMAGE_WORKERS`."""
    return GPU_IMAGE_WORKERS if backend == "nvimgcodec" else (os.cpu_count() or 1)


def _lookahead(backend: str, device, batch_size: int) -> int:
    """Batches per unit: many for an in-memory dataset on a GPU, else one."""
    on_gpu = device is not None and torch.device(device).type == "cuda"
    return max(1, MEMORY_UNIT_SAMPLES // batch_size) if backend == "memory" and on_gpu else 1


def _batch(decoder) -> str:
    decodes = any(callable(getattr(decoder, m, None)) for m in ("decode", "decode_files"))
    if not (hasattr(decoder, "name") and decodes):
        raise ConfigError(f"decoder must be one of {DECODERS} or an object with `name` and "
                          "`decode(list of bytes) -> list of tensors` (or `decode_files(list of "
                          f"paths)`), got {decoder!r}")
    return "batch"


def _out_hw(dataset: ImageDataset, proc: ImageProcess) -> tuple[int, int]:
    """The staged size: ``proc.size``, else the images' one size (ConfigError if they differ)."""
    if proc.size is not None:
        return proc.size
    if dataset.in_memory:
        return dataset.image_size
    sizes = np.unique(dataset.sizes, axis=0)
    if len(sizes) > 1:
        raise ConfigError(f"{dataset!r}: images have different sizes (e.g. "
                          f"{[tuple(s) for s in sizes[:3].tolist()]}), so they cannot share a "
                          "batch; give processing=ImageProcess(size=(height, width), ...)")
    return int(sizes[0, 0]), int(sizes[0, 1])

"""What an :class:`~._image_loader.ImageLoader` holds in memory, by component
(:attr:`ImageLoader.memory_plan`): its staging slots, an in-memory dataset's copy on the
device, the GPU pool's reader slabs (shared host memory) and the buffers its batches are
decoded into. The slots, the dataset's copy and the slabs are what the pools allocate; the
decode buffers are estimated from the index's mean image size (each batch's own sizes set
its buffer)."""

from __future__ import annotations

import math

import numpy as np
import torch

_ITEM_BYTES = {"uint8": 1, "float16": 2, "float32": 4}


def image_memory_plan(loader) -> dict:
    """``loader``'s plan as a dict (see :attr:`ImageLoader.memory_plan`)."""
    config = loader.config
    device = config.device if config.device is not None else torch.device("cpu")
    on_gpu = device.type != "cpu"
    plan: dict = {"backend": config.backend, "device": str(device)}
    totals = {"device_bytes": 0, "host_bytes": 0, "host_shared_bytes": 0}

    def add(nbytes: int, where: str) -> None:
        if where == "device" and on_gpu:
            totals["device_bytes"] += nbytes
        else:
            totals["host_bytes"] += nbytes
            if where == "shared":
                totals["host_shared_bytes"] += nbytes

    if config.backend == "memory":
        on_device = config.dataset.pixels.numel() if on_gpu else 0
        unit = loader.lookahead * config.batch_size * _sample_bytes(config)
        plan.update(staging_slots=0, dataset_on_device_bytes=on_device, unit_output_bytes=unit)
        add(on_device, "device")
        add(unit, "device")
    else:
        slots, slot_bytes, where = _slots(loader, config, device)
        plan.update(staging_slots=slots, slot_bytes=slot_bytes, slots_on=where)
        add(slots * slot_bytes, "shared" if where == "host (shared)" else
            "device" if where == str(device) else "host")
        if config.backend == "nvimgcodec":
            buffers, each = _decode_buffers(config, slots)
            plan.update(decode_buffers_at_most=buffers, decode_buffer_bytes_estimate=each)
            add(buffers * each, "device")
        slabs, slab = _reader_slabs(loader, config, slots)
        if slabs:
            plan.update(reader_slabs=slabs, reader_slab_bytes=slab)
            add(slabs * slab, "shared")
    plan.update(totals)
    return plan


def gpu_staging_slots(loader) -> int:
    """How many of ``loader``'s staging slots hold GPU memory."""
    config = loader.config
    if config.backend == "memory":
        return 0
    device = config.device if config.device is not None else torch.device("cpu")
    where = _slots(loader, config, device)[2]
    return loader.staging_slots if where.startswith("cuda") else 0


def _sample_bytes(config) -> int:
    """Bytes of one finished sample: staged uint8 HWC, or the output's dtype (the GPU pools
    stage the finished output)."""
    oh, ow = config.out_hw
    return oh * ow * 3 * _ITEM_BYTES.get(config.proc.dtype, 1)


def _slots(loader, config, device: torch.device) -> tuple[int, int, str]:
    """(count, bytes each, where): the GPU pools stage the finished output on the device;
    Pillow stages uint8 in host memory (shared with its workers) and the collector copies
    it out."""
    slots = loader.staging_slots
    oh, ow = config.out_hw
    if config.backend in ("nvimgcodec", "batch"):
        return slots, config.batch_size * _sample_bytes(config), str(device)
    where = "host (shared)" if config.num_workers > 0 else "host"
    return slots, config.batch_size * oh * ow * 3, where  # uint8 [B, 1, oh, ow, 3]


def _decode_buffers(config, slots: int) -> tuple[int, int]:
    """(at most, bytes each): a batch's decoded images in one buffer, from the index's mean
    image size plus the alignment padding. In this process a batch holds its buffer from its
    decode until its augmentation has run: at most one per slot. A GPU worker decodes and
    augments one batch at a time."""
    from ..images import _packed

    sizes = getattr(config.dataset, "sizes", None)
    if sizes is None or len(sizes) == 0:
        return 0, 0
    mean_pixels = float(np.mean(np.asarray(sizes, np.int64)[:, 0] * np.asarray(sizes, np.int64)[:, 1]))
    pad = _packed.ALIGN_BYTES - 1 if _packed.ALIGN_BYTES > 1 else 0
    each = int(math.ceil(config.batch_size * (mean_pixels + pad) * 3)) + 3 + _packed.ALIGN_BYTES
    return (config.num_workers if config.num_workers > 0 else slots), each


def _reader_slabs(loader, config, slots: int) -> tuple[int, int]:
    """(count, bytes each) of the in-process GPU pool's reader slabs: those of the running
    pool, or those it would start (see ``_image_decode.BatchDecodePool._start_readers``)."""
    from . import _image_decode, _image_readers

    pool = loader._pool
    if pool is not None:
        readers = getattr(pool, "file_readers", None)
        if readers is None:
            return 0, 0
        return readers.num_slabs, readers.slab_bytes
    if config.backend != "nvimgcodec" or config.num_workers > 0:
        return 0, 0
    if not (_image_decode.READER_PROCESSES > 0 and _image_decode.PACKED_DECODE
            and not _image_decode.ROI_DECODE and getattr(config.dataset, "sizes", None) is not None
            and not _image_decode._in_daemonic_process()):
        return 0, 0
    lanes = _image_decode.NVIMGCODEC_LANES
    return slots + lanes + 1, _image_readers.slab_bytes(config.dataset, config.batch_size)

"""What an :class:`~._image_loader.ImageLoader` holds in memory, by component
(:attr:`ImageLoader.memory_plan`). The staging slots, an in-memory dataset's copy and the
reader slabs are what the pools allocate; the decode buffers and the augmentation's working
memory are estimates (a batch's own image sizes and crop windows set them); what is not
counted is named in the plan's ``not_counted``."""

from __future__ import annotations

import numpy as np
import torch

from ._image_decode import _TORCH_DTYPES

#: What a GPU pool holds that the plan does not count, with the one measurement there is.
_GPU_NOT_COUNTED = (
    "each GPU process's CUDA context, torch's allocator cache, cuBLAS workspaces and "
    "nvImageCodec's own state: the GPU held 3.1 / 6.7 / 8.8 GiB in all with 0 / 2 / 3 GPU "
    "workers (H200, batch 256, 224² crops of 500x375 JPEGs, session18-5)")


def image_memory_plan(loader) -> dict:
    """``loader``'s plan (see :attr:`ImageLoader.memory_plan`): every key always present."""
    config = loader.config
    device = config.device if config.device is not None else torch.device("cpu")
    on_gpu = device.type != "cpu"
    plan = dict(backend=config.backend, device=str(device), staging_slots=0, slot_bytes=0,
                slots_on=None, dataset_on_device_bytes=0, unit_output_bytes=0, units_alive=0,
                decode_buffers=0, decode_buffer_bytes=0, augment_workspace_bytes=0,
                reader_slabs=0, reader_slab_bytes=0, not_counted=[])
    if config.backend == "memory":
        plan.update(dataset_on_device_bytes=config.dataset.pixels.numel() if on_gpu else 0,
                    unit_output_bytes=loader.lookahead * config.batch_size * _sample_bytes(config),
                    units_alive=2)  # the next unit is made while a batch of the last is held
    else:
        plan.update(staging_slots=loader.staging_slots, slot_bytes=_slot_bytes(config),
                    slots_on=_slots_on(config, on_gpu))
        decoder = _decoder_kind(loader)
        if decoder is not None:
            _gpu_pool_parts(loader, config, decoder, plan)
        elif config.backend == "batch":
            plan["not_counted"].append("the decoder object's own output and working memory")
    if on_gpu and config.backend != "pillow":
        plan["not_counted"].append(_GPU_NOT_COUNTED)
    plan.update(_totals(plan, on_gpu))
    return plan


def gpu_staging_slots(loader) -> int:
    """How many of ``loader``'s staging slots hold GPU memory."""
    config = loader.config
    on_gpu = config.device is not None and config.device.type != "cpu"
    if config.backend == "memory" or _slots_on(config, on_gpu) != "device":
        return 0
    return loader.staging_slots


def _sample_bytes(config) -> int:
    """One finished sample in the output's dtype."""
    oh, ow = config.out_hw
    return oh * ow * 3 * _TORCH_DTYPES[config.proc.dtype].itemsize


def _slot_bytes(config) -> int:
    """A slot: the GPU pools stage the finished output; Pillow stages uint8 ``[B, 1, oh, ow,
    3]`` and the collector finishes it as it copies out."""
    if config.backend in ("nvimgcodec", "batch"):
        return config.batch_size * _sample_bytes(config)
    oh, ow = config.out_hw
    return config.batch_size * oh * ow * 3


def _slots_on(config, on_gpu: bool) -> str:
    """``"device"``, ``"shared host"`` (shared with worker processes) or ``"host"``."""
    if config.backend in ("nvimgcodec", "batch"):
        if on_gpu:
            return "device"
        gpu_workers = config.backend == "nvimgcodec" and config.num_workers > 0
        return "shared host" if gpu_workers else "host"  # CPU: a stand-in decoder, in tests
    return "shared host" if config.num_workers > 0 else "host"


def _decoder_kind(loader):
    """``(decodes_packed, opens_files)`` of the decoders the GPU pool makes or is given, or
    ``None`` where the plan cannot know its buffers (Pillow; a decoder object of the
    user's)."""
    from ..images import _nvimgcodec

    if loader.config.backend == "nvimgcodec" or (loader.config.backend == "batch"
                                                  and loader._custom_decoder is None):
        return _nvimgcodec.decodes_packed_here(), True
    return None


def _gpu_pool_parts(loader, config, decoder, plan: dict) -> None:
    """The decode buffers, the augmentation's working memory and the reader slabs."""
    packed, opens_files = decoder
    sizes = np.asarray(config.dataset.sizes, np.int64)
    in_process = _in_process(config)
    # In this process a batch holds its buffer from its decode until the augmentation has
    # passed the next batch (the augmenter lets go one batch late): a slot's worth and one
    # more. A GPU worker decodes and augments one batch at a time. Decoded as separate
    # images, the augmentation also packs a copy of them.
    buffers = loader.staging_slots + 1 if in_process else config.num_workers
    augmenters = 1 if in_process else config.num_workers
    if not packed:
        buffers += augmenters
    plan.update(decode_buffers=buffers, decode_buffer_bytes=_decode_buffer_bytes(sizes, config, packed),
                augment_workspace_bytes=augmenters * _augment_workspace_bytes(sizes, config))
    slabs, each = _reader_slabs(loader, config, packed, opens_files)
    plan.update(reader_slabs=slabs, reader_slab_bytes=each)


def _in_process(config) -> bool:
    """Whether the GPU pool decodes in this process (a decoder object always does)."""
    return config.backend == "batch" or config.num_workers == 0


def _decode_buffer_bytes(sizes: np.ndarray, config, packed: bool) -> int:
    """A batch of images of the index's mean size decoded, in one buffer with its alignment
    padding (:mod:`~..images._packed`) or as separate images."""
    from ..images import _packed

    mean_pixels = float(np.mean(sizes[:, 0] * sizes[:, 1])) if len(sizes) else 0.0
    if not packed:
        return int(config.batch_size * mean_pixels * 3)
    align = _packed.ALIGN_BYTES
    return int(config.batch_size * (mean_pixels + align - 1) * 3) + 3 + align - 1


def _augment_workspace_bytes(sizes: np.ndarray, config) -> int:
    """At most, the batched augmentation's intermediates for windows as large as the largest
    image (``images/_batched.py``): the gather's int64 then int32 pixel numbers, the gathered
    uint8 pixels and the float16 padded batch (``[B, Hm, Wm]`` each), and the rows' product
    ``[B, 3 oh, Wm]`` in float16. Crops smaller than the image need less."""
    if not len(sizes):
        return 0
    hm, wm = int(sizes[:, 0].max()), int(sizes[:, 1].max())
    oh, _ = config.out_hw
    batch = config.batch_size
    return batch * hm * wm * (8 + 4 + 3 + 3 * 2) + batch * 3 * oh * wm * 2


def _reader_slabs(loader, config, packed: bool, opens_files: bool) -> tuple[int, int]:
    """(count, bytes each) of the in-process GPU pool's reader slabs: the running pool's, or
    those it would start (``_image_decode.starts_reader_processes``)."""
    from . import _image_decode, _image_readers

    pool = loader._pool
    if pool is not None:
        readers = getattr(pool, "file_readers", None)
        return (0, 0) if readers is None else (readers.num_slabs, readers.bytes_per_slab)
    if not (_in_process(config) and _image_decode.starts_reader_processes(packed, opens_files)):
        return 0, 0
    count = loader.staging_slots + _image_decode.NVIMGCODEC_LANES + 1
    return count, _image_readers.slab_bytes(config.dataset, config.batch_size)


def _totals(plan: dict, on_gpu: bool) -> dict:
    """Bytes on the device, in host memory, and of those in shared host memory."""
    slots = plan["staging_slots"] * plan["slot_bytes"]
    units = plan["units_alive"] * plan["unit_output_bytes"]
    decode = plan["decode_buffers"] * plan["decode_buffer_bytes"]
    slabs = plan["reader_slabs"] * plan["reader_slab_bytes"]
    shared = slabs + (slots if plan["slots_on"] == "shared host" else 0)
    work = units + decode + plan["augment_workspace_bytes"]  # where the batches are made
    device = plan["dataset_on_device_bytes"] + (slots if plan["slots_on"] == "device" else 0)
    device += work if on_gpu else 0
    host = shared + (slots if plan["slots_on"] == "host" else 0) + (0 if on_gpu else work)
    return {"device_bytes": device, "host_bytes": host, "host_shared_bytes": shared}

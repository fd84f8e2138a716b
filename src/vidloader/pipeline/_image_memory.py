"""What an :class:`~._image_loader.ImageLoader` holds in memory, by component
(:attr:`ImageLoader.memory_plan`). The staging slots, an in-memory dataset's copy and the
reader slabs are what the pools allocate; the decode buffers and the augmentation's working
memory are estimates (a batch's own image sizes and crop windows set them); what is not
counted is named in the plan's ``not_counted``."""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np
import torch

from ._image_decode import _TORCH_DTYPES

#: What a GPU pool holds that the plan does not count, with the one measurement there is.
_GPU_NOT_COUNTED = (
    "each GPU process's CUDA context, torch's allocator cache, the GPU workers' cuBLAS "
    "workspaces, nvImageCodec's and nvJPEG's own state: the GPU held 3.1 / 6.7 / 8.8 GiB in all with 0 / 2 / 3 GPU "
    "workers (H200, batch 256, 224² crops of 500x375 JPEGs, session18-5)")


def image_memory_plan(loader) -> dict:
    """``loader``'s plan (see :attr:`ImageLoader.memory_plan`): every key always present."""
    config = loader.config
    device = config.device if config.device is not None else torch.device("cpu")
    on_gpu = device.type != "cpu"
    plan = dict(backend=config.backend, device=str(device), staging_slots=0, slot_bytes=0,
                slots_on=None, dataset_on_device_bytes=0, unit_output_bytes=0, units_alive=0,
                decode_buffers=0, decode_buffer_bytes=0, augment_workspace_bytes=0,
                reader_slabs=0, reader_slab_bytes=0, reader_slabs_page_locked=False,
                cublas_workspace_bytes=0, not_counted=[])
    if config.backend == "memory":
        unit = loader.lookahead * config.batch_size
        plan.update(dataset_on_device_bytes=config.dataset.pixels.numel() if on_gpu else 0,
                    unit_output_bytes=unit * _sample_bytes(config),
                    units_alive=2,  # the next unit is made while a batch of the last is held
                    augment_workspace_bytes=unit * _memory_workspace_per_sample(config, device),
                    cublas_workspace_bytes=cublas_workspace_bytes(device) if on_gpu else 0)
    else:
        plan.update(staging_slots=loader.staging_slots, slot_bytes=_slot_bytes(config),
                    slots_on=_slots_on(config, on_gpu))
        decoder = _decoder_kind(loader)
        if decoder is not None:
            _gpu_pool_parts(loader, config, decoder, plan, device)
    plan["not_counted"] += _not_counted(loader, config, on_gpu)
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
    ``None`` for Pillow and in-memory datasets."""
    from ..images import _nvimgcodec

    config, given = loader.config, loader._custom_decoder
    if config.backend == "nvimgcodec" or (config.backend == "batch" and given is None):
        # nvJPEG's decoder (the default engine) decodes packed whatever nvImageCodec's version
        # (where it cannot be set up the pools fall back to nvImageCodec's: then this errs)
        packs = _nvimgcodec.PACKED_JPEG_ENGINE == "nvjpeg" or _nvimgcodec.decodes_packed_here()
        return packs, True
    if config.backend == "batch":
        return (bool(getattr(given, "decodes_packed", False)),
                callable(getattr(given, "decode_files", None)))
    return None


def _decodes_batches_packed(config, can_pack: bool) -> bool:
    """Whether the pool decodes each batch into one buffer: the decoder can, and the
    switches let it (``_image_decode.PACKED_DECODE`` and not ``ROI_DECODE`` in this process,
    ``_image_gpu_workers.WORKERS_PACKED`` in the workers)."""
    from . import _image_decode, _image_gpu_workers

    if _in_process(config):
        return _image_decode.packs_batches(can_pack)
    return can_pack and _image_gpu_workers.WORKERS_PACKED


def _gpu_pool_parts(loader, config, decoder, plan: dict, device: torch.device) -> None:
    """The decode buffers, the augmentation's working memory and the reader slabs."""
    can_pack, opens_files = decoder
    packed = _decodes_batches_packed(config, can_pack)
    sizes = np.asarray(config.dataset.sizes, np.int64)
    in_process = _in_process(config)
    # In this process a batch holds its buffer from its decode until the augmentation has
    # passed the next batch (the augmenter lets go one batch late): a slot's worth and one
    # more. A GPU worker decodes and augments one batch at a time. Decoded as separate
    # images, the augmentation also packs a copy of them. A decoder object's own output is
    # its own (not counted) unless it decodes packed.
    augmenters = 1 if in_process else config.num_workers
    owned = packed or config.backend == "nvimgcodec"
    buffers = (loader.staging_slots + 1 if in_process else config.num_workers) if owned else 0
    if not packed:
        buffers += augmenters
    fused = device.type == "cuda" and _fuses_resize()
    workspace = _fused_workspace(config) if fused else _resize_workspace(sizes, config, device)
    plan.update(decode_buffers=buffers, decode_buffer_bytes=_decode_buffer_bytes(sizes, config, packed),
                augment_workspace_bytes=augmenters * workspace)
    slabs, each = _reader_slabs(loader, config, can_pack, opens_files)
    plan.update(reader_slabs=slabs, reader_slab_bytes=each,
                reader_slabs_page_locked=_slabs_page_locked(loader, slabs, device))
    if in_process and device.type == "cuda" and not fused:  # the augmentation stream's bmm
        plan["cublas_workspace_bytes"] = cublas_workspace_bytes(device)


def _fuses_resize() -> bool:
    """Whether CUDA batches are cropped and resized by the fused Triton kernel here
    (``images/_batched.py``, :func:`cuda_resize_engine`) rather than by batched matmuls:
    where Triton imports. A launch that then fails hands over to the matmuls for the rest of
    the process, with a warning; the plan read after that counts theirs."""
    from ..images import _batched

    return _batched.cuda_resize_engine() == "triton"


#: Bytes a sample of the fused kernel's per-image parameters (eight int64) on the device.
_FUSED_PARAM_BYTES = 8 * 8


def _fused_workspace(config) -> int:
    """The fused kernel's working memory for a batch: its parameters, and one output batch
    more (a batch with rows missing is finished apart, then copied); it keeps no
    intermediate."""
    return config.batch_size * (_FUSED_PARAM_BYTES + _sample_bytes(config)) + 2 * 3 * 4


#: torch's default cuBLAS workspace for one stream (``CUBLAS_WORKSPACE_CONFIG`` unset):
#: ``:4096:8`` on compute capability 9 and later, ``:4096:2:16:8`` before (KiB, count).
_CUBLAS_DEFAULT = {True: 4096 * 8 * 1024, False: (4096 * 2 + 16 * 8) * 1024}


def cublas_workspace_bytes(device: torch.device) -> int:
    """The cuBLAS workspace torch allocates, through its caching allocator, for each stream
    that runs a matrix product (the batched resize's) on ``device``: ``CUBLAS_WORKSPACE_CONFIG``'s
    ``:KIB:COUNT`` pairs summed where it is set, else torch's default for the GPU (32 MiB on
    an H200; where no GPU can be asked, as in the CPU tests, the larger default). On the H200
    the one-process pool's peak in torch's allocator was 33,971,200 bytes at batch 4 with
    32² crops: 33,554,432 of them this workspace (``benchmarks/results/gpu/session28-5``)."""
    config = os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")
    pairs = re.findall(r":([0-9]+):([0-9]+)", config)
    if pairs:
        return sum(int(kib) * 1024 * int(count) for kib, count in pairs)
    try:
        major = torch.cuda.get_device_capability(device)[0]
    except (AssertionError, RuntimeError):  # no CUDA here
        major = 9
    return _CUBLAS_DEFAULT[major >= 9]


def _not_counted(loader, config, on_gpu: bool) -> list[str]:
    """What the loader also holds that the plan leaves out."""
    out = ["the batches the training loop still holds"]
    if config.backend == "batch" and loader._custom_decoder is not None:
        out.append("the decoder object's own working memory (and its output, unless it decodes packed)")
    if config.backend == "nvimgcodec" and config.num_workers > 0:
        out.append("the GPU workers' files read ahead, in host memory (up to about three tasks a worker)")
    if on_gpu and config.backend != "pillow":
        out.append(_GPU_NOT_COUNTED)
    return out


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


def _resize_workspace(sizes: np.ndarray, config, device: torch.device) -> int:
    """At most, the batched matmuls' crop/resize intermediates for a batch (``images/_batched.py``,
    one group) whose windows are as large as the largest image (a window's stored part never
    is larger): the gather's int64 then int32 pixel numbers, the gathered uint8 pixels and the
    padded batch in the compute dtype (``[B, Hm, Wm]`` each); the row and column weights (in
    float32, then the compute dtype) and ``resize_weights``' float64 temporaries; the rows'
    product ``[B, 3 oh, Wm]`` and the result ``[B, 3 oh, ow]``; and one output batch more (a
    batch with rows missing is finished apart, then copied)."""
    from ..images._batched import compute_dtype_for

    if not len(sizes):
        return 0
    hm, wm = int(sizes[:, 0].max()), int(sizes[:, 1].max())
    oh, ow = config.out_hw
    c = compute_dtype_for(device).itemsize
    taps = int(np.ceil(2 * max(1.0, hm / oh, wm / ow))) + 2
    per_sample = (hm * wm * (8 + 4 + 3 + 3 * c)
                  + (oh * hm + ow * wm) * (4 + c)
                  + 5 * 8 * (oh + ow) * taps
                  + 3 * oh * wm * c + 3 * oh * ow * c
                  + _sample_bytes(config))
    return config.batch_size * per_sample


def _memory_workspace_per_sample(config, device: torch.device) -> int:
    """At most, an in-memory unit's intermediates a sample: the gathered image (uint8), the
    crop/resize's (as :func:`_resize_workspace`, for a resizing crop), an int64 pixel number a
    staged pixel (the GPU's gather without resizing), the uint8 staged sample and a float32
    copy before the output's cast."""
    h, w = (int(x) for x in config.dataset.pixels.shape[1:3])
    oh, ow = config.out_hw
    sizes = np.array([[h, w]], np.int64)
    one = dataclasses.replace(config, batch_size=1)
    return h * w * 3 + _resize_workspace(sizes, one, device) + oh * ow * (8 + 3 + 3 * 4)


def _reader_slabs(loader, config, can_pack: bool, opens_files: bool) -> tuple[int, int]:
    """(count, bytes each) of the in-process GPU pool's reader slabs: the running pool's, or
    those it would start (``_image_decode.starts_reader_processes``)."""
    from . import _image_decode

    pool = loader._pool
    if pool is not None:
        readers = getattr(pool, "file_readers", None)
        return (0, 0) if readers is None else (readers.num_slabs, readers.bytes_per_slab)
    if not (_in_process(config) and _image_decode.starts_reader_processes(can_pack, opens_files)):
        return 0, 0
    lanes = 1 if loader._custom_decoder is not None else _image_decode.NVIMGCODEC_LANES
    return _image_decode.reader_slabs(config.dataset, config.batch_size, loader.staging_slots, lanes)


def _slabs_page_locked(loader, slabs: int, device: torch.device) -> bool:
    """Whether the reader slabs are (the running pool's) or would be page-locked for CUDA
    (``_image_decode.PIN_READ_SLABS``)."""
    from . import _image_decode

    pool = loader._pool
    if pool is not None:
        return getattr(pool, "slabs_page_locked", False)
    return slabs > 0 and device.type == "cuda" and _image_decode.PIN_READ_SLABS


def _totals(plan: dict, on_gpu: bool) -> dict:
    """Bytes on the device, in host memory, of those in shared host memory, and of those
    page-locked."""
    slots = plan["staging_slots"] * plan["slot_bytes"]
    units = plan["units_alive"] * plan["unit_output_bytes"]
    decode = plan["decode_buffers"] * plan["decode_buffer_bytes"]
    slabs = plan["reader_slabs"] * plan["reader_slab_bytes"]
    shared = slabs + (slots if plan["slots_on"] == "shared host" else 0)
    work = units + decode + plan["augment_workspace_bytes"]  # where the batches are made
    device = plan["dataset_on_device_bytes"] + (slots if plan["slots_on"] == "device" else 0)
    device += (work + plan["cublas_workspace_bytes"]) if on_gpu else 0
    host = shared + (slots if plan["slots_on"] == "host" else 0) + (0 if on_gpu else work)
    locked = slabs if plan["reader_slabs_page_locked"] else 0
    return {"device_bytes": device, "host_bytes": host, "host_shared_bytes": shared,
            "host_page_locked_bytes": locked}

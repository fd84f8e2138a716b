"""Filling image rows into staging slots: from memory (a gather and batched augmentation on
the slot's device) or from files (Pillow decodes, torch crops), and the worker process that
does the latter.

Image loading reuses the video pipeline's scheduler, units and worker processes; only what
fills a slot differs, so it lives here beside them, not in ``_worker.py``.
"""

from __future__ import annotations

import dataclasses
import signal
import traceback

import numpy as np
import torch

from .._utils._files import read_file  # noqa: F401 - the pools read files with it from here
from ..errors import MediaError
from ..images._augment import (
    Windows,
    augment_batch,
    crop_resize,
    cuts_without_resize,
    sample_windows,
)
from ..images._batched import (
    TritonFailed,
    crop_flip_gather,
    crop_resize_batch,
    crop_resize_rows,
    cuda_resize_engine,
    to_device,
)
from ..images._packed import PackedImages
from ..images._pillow import decode_image, needed_size
from ..processing import finalize
from ._messages import STOP, Failure, FillTask, Ready, RowsFilled


@dataclasses.dataclass(frozen=True)
class ImageWorkerStart:
    """An image worker's arguments: the loader's config and the shared staging slots."""

    worker_id: int
    config: object  # ImageLoaderConfig
    slots: list


def augment_from_memory(pixels: torch.Tensor, config, plans: list) -> torch.Tensor:
    """Every sample of ``plans`` (a unit of consecutive batches), gathered from ``pixels``
    (an in-memory dataset on the output's device), augmented and finished (dtype,
    normalisation, layout) in one batched pass: a tensor whose rows are the plans' rows in
    order.

    A unit of many batches is what makes a GPU epoch fast: the launches and host work per
    pass are a few dozen whatever its size, so they are paid once per unit, not per batch.
    On CUDA, fixed-size crops are one gather of pixels; resizing crops are one fused kernel
    that reads each row where it lies and finishes it as it writes
    (:func:`~..images._batched.crop_resize_rows`; image by image without Triton).
    """
    proc = config.proc
    indices = np.concatenate([plan.video_indices for plan in plans])
    seeds = np.concatenate([plan.sample_seeds for plan in plans])
    h, w = pixels.shape[1:3]
    windows = sample_windows(proc, h, w, seeds)
    out_hw = proc.out_hw(h, w)
    on_cuda = pixels.device.type == "cuda"
    if on_cuda and cuts_without_resize(proc, windows, out_hw):
        staged = crop_flip_gather(pixels, indices, windows, out_hw)
        return finalize(staged[:, None], proc, is_clip=False)
    if on_cuda and cuda_resize_engine() == "triton":
        try:  # one kernel reading the rows in place, finishing as it writes
            return crop_resize_rows(pixels, indices, windows, out_hw, proc=proc)
        except TritonFailed:  # it never ran: the per-image path below
            pass
    # on the CPU, gathering the images first and padding them is faster (caches)
    staged = augment_batch(pixels[to_device(indices, pixels.device)], proc, seeds,
                           windows=windows)
    return finalize(staged[:, None], proc, is_clip=False)


def fill_from_files(dataset, config, plan, staging: torch.Tensor) -> tuple[np.ndarray, list]:
    """Decode each row's file with Pillow (reduced in the JPEG decoder when the window is
    larger than the output), crop, resize and flip it, and write it into ``staging[row, 0]``.

    Returns:
        bool ``[rows]`` valid rows and ``(path, message)`` per skipped file.

    Raises:
        MediaError: a bad file, unless ``config.skips_bad_files``.
    """
    out_hw = config.out_hw
    sizes = dataset.sizes[plan.video_indices]
    windows = plan_windows(config, plan)
    valid, errors = np.ones(plan.batch_size, dtype=bool), []
    for row, image in enumerate(plan.video_indices.tolist()):
        window = windows[row]
        full_hw = (int(sizes[row, 0]), int(sizes[row, 1]))
        resizes = (window[2], window[3]) != out_hw
        try:
            min_hw = needed_size(full_hw, window[2:4], out_hw) if resizes else None
            array, scale = decode_image(dataset.path(image), min_hw=min_hw)
        except MediaError as exc:
            if not config.skips_bad_files:
                raise
            valid[row] = False
            errors.append((exc.path, str(exc)))
            continue
        staging[row, 0].copy_(crop_resize(torch.from_numpy(array), window, out_hw, scale))
    return valid, errors


def fill_task_messages(fill, slots: list, task: FillTask, executor: str) -> list:
    """Fill every plan of a unit; one :class:`RowsFilled` per plan, or one :class:`Failure`.

    ``fill(plan, staging)`` fills a plan's rows and returns ``(valid, errors)``.
    """
    messages = []
    try:
        for slot_id, plan, start in zip(task.slot_ids, task.plans, task.row_starts):
            staging = slots[slot_id]["images"][start:start + plan.batch_size]
            valid, errors = fill(plan, staging)
            stats = {"decoded": int(valid.sum())}
            messages.append(RowsFilled(plan.batch_index, slot_id, valid, errors, stats, start,
                                       executor, {}, task.unit))
    except BaseException as exc:  # a worker never raises: the loader does, naming the file
        return [Failure(task.first_batch, task.slot_ids, repr(exc), traceback.format_exc(),
                        getattr(exc, "path", None))]
    return messages


def file_filler(config):
    """``fill(plan, staging)`` for files decoded by Pillow in this process."""
    def fill(plan, staging):
        return fill_from_files(config.dataset, config, plan, staging)
    return fill


def image_worker_main(start: ImageWorkerStart, task_q, result_q) -> None:
    """A CPU image worker: takes :class:`FillTask` s, decodes and augments into the shared
    slots, replies one list of :class:`RowsFilled` per task (or a :class:`Failure`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the loader's to handle
    torch.set_num_threads(1)
    fill = file_filler(start.config)
    result_q.put(Ready(start.worker_id))
    while (task := task_q.get()) is not STOP:
        result_q.put(fill_task_messages(fill, start.slots, task, "pillow"))


def fill_from_images(config, decoder_name: str, images: list, plan, staging: torch.Tensor,
                     windows: Windows | None = None, regions: list | None = None):
    """Crop, resize, flip and finish the plan's decoded ``images`` (``None`` where a file
    could not be read or decoded; or :class:`~..images._packed.PackedImages`, with its
    ``missing`` rows) as one batch on their device, into ``staging`` (the final dtype and
    layout: see :func:`~..images._batched.crop_resize_batch`).

    ``windows``: the plan's windows if already drawn (:func:`plan_windows`). ``regions``:
    per row the ``(top, left, bottom, right)`` the decoder was asked to decode alone, or
    ``None``; a row whose image has exactly that size is its window already."""
    from ..errors import CorruptImageError

    dataset, proc = config.dataset, config.proc
    sizes = dataset.sizes[plan.video_indices]
    if windows is None:
        windows = plan_windows(config, plan)
    valid, errors = np.ones(plan.batch_size, dtype=bool), []
    packed = isinstance(images, PackedImages)
    missing = images.missing if packed else np.array([x is None for x in images], bool)
    for row in np.flatnonzero(missing).tolist():
        path = dataset.path(int(plan.video_indices[row]))
        exc = CorruptImageError(path, f"{decoder_name} could not read or decode it; "
                                "re-encode or remove it, or pass on_error='skip'")
        if not config.skips_bad_files:
            raise exc
        valid[row] = False
        errors.append((path, str(exc)))
    rows = np.flatnonzero(valid)
    if len(rows) == 0:
        return valid, errors
    if packed:
        kept = images if len(rows) == len(images) else images.select(rows)
        shapes = np.stack([kept.heights, kept.widths], axis=1)
    else:
        kept = [images[r] for r in rows]
        shapes = np.array([(x.shape[0], x.shape[1]) for x in kept], np.int64)
    sub = Windows(*(getattr(windows, f)[rows] for f in ("top", "left", "height", "width", "flip")))
    full = sizes[rows]
    if regions is not None:
        paths = [dataset.path(int(plan.video_indices[r])) for r in rows]
        sub, full = _as_decoded_windows(sub, full, shapes, [regions[r] for r in rows], paths)
    scales = shapes / full.astype(np.float64)
    if len(rows) == plan.batch_size:
        crop_resize_batch(kept, sub, config.out_hw, scales, proc=proc, out=staging)
    else:  # failed rows are dropped by the collector: fill the others in place
        index = to_device(rows, staging.device)
        staging.index_copy_(0, index, crop_resize_batch(kept, sub, config.out_hw, scales,
                                                        proc=proc))
    return valid, errors


def plan_windows(config, plan) -> Windows:
    """The crop window of every row of ``plan`` (drawn from its seeds and stored sizes)."""
    sizes = config.dataset.sizes[plan.video_indices]
    return sample_windows(config.proc, sizes[:, 0], sizes[:, 1], plan.sample_seeds)


def decode_regions(config, plan, windows: Windows) -> list | None:
    """Per row, the window to decode alone (``(top, left, bottom, right)``), or ``None``
    where the whole image must be decoded: a window reaching outside the image (padding), a
    window that is the whole image, or a file whose EXIF orientation turns or mirrors it
    (the region would be in the stored, not the upright, pixels). ``None`` for the plan when
    the dataset does not record orientations."""
    orientations = getattr(config.dataset, "orientations", None)
    if orientations is None:
        return None
    sizes = config.dataset.sizes[plan.video_indices]
    top, left = windows.top, windows.left
    bottom, right = top + windows.height, left + windows.width
    inside = (top >= 0) & (left >= 0) & (bottom <= sizes[:, 0]) & (right <= sizes[:, 1])
    smaller = (windows.height < sizes[:, 0]) | (windows.width < sizes[:, 1])
    ok = inside & smaller & (orientations[plan.video_indices] == 1)
    if not ok.any():
        return None
    return [(int(t), int(x), int(b), int(r)) if k else None
            for k, t, x, b, r in zip(ok.tolist(), top, left, bottom, right)]


def _as_decoded_windows(windows: Windows, full: np.ndarray, shapes: np.ndarray, regions: list,
                        paths: list[str]):
    """Windows and full sizes relative to what was decoded: a row decoded as its region
    (its image has the region's size) is its own window, at the origin; one decoded whole
    (Pillow's fallback, or a decoder that ignored the region) keeps its window.

    Raises:
        RuntimeError: an image of neither size (the decoder clamped or aligned the region):
            its window cannot be placed; turn ``ROI_DECODE`` off.
    """
    asked = np.array([r is not None for r in regions])
    cut = asked & (shapes[:, 0] == windows.height) & (shapes[:, 1] == windows.width)
    whole = (shapes == full).all(1)
    for row in np.flatnonzero(asked & ~cut & ~whole):
        raise RuntimeError(f"{paths[row]}: the decoder gave {tuple(shapes[row])} for region "
                           f"{regions[row]} of a {tuple(full[row])} image, neither the region "
                           "nor the whole image; set vidloader.pipeline._image_decode."
                           "ROI_DECODE = False")
    if not cut.any():
        return windows, full
    top = np.where(cut, 0, windows.top)
    left = np.where(cut, 0, windows.left)
    full = np.where(cut[:, None], np.stack([windows.height, windows.width], 1), full)
    return Windows(top, left, windows.height, windows.width, windows.flip), full

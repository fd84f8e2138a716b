"""``ImageLoader.memory_plan`` and ``gpu_staging_buffers``: what the image pools hold, checked
against what they allocate (CPU only; the GPU pools run with a packing stand-in for
nvImageCodec)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from vidloader.images import CIFAR10, ImageFolder, ImageProcess
from vidloader.images._synthetic import write_cifar10
from vidloader.pipeline import ImageLoader

from .test_image_readers import _packing_pools
from .test_images import folder  # noqa: F401 - the fixture


def _public_properties_work(loader) -> None:
    for name in dir(loader):
        if not name.startswith("_"):
            getattr(loader, name)  # none may raise (two did: AttributeError on the config)


@pytest.mark.parametrize("workers", [0, 2])
def test_pillow_plan_is_what_the_pool_allocates(folder, workers):  # noqa: F811
    ds = ImageFolder(folder, num_workers=0, progress=False)
    loader = ImageLoader(ds, batch_size=4, num_workers=workers, on_error="skip",
                         processing=ImageProcess(size=(20, 24), crop="center"))
    try:
        _public_properties_work(loader)
        plan = loader.memory_plan
        batches = iter(loader)
        next(batches)  # the pool runs while the epoch is under way
        slots = loader._pool.slots
        assert plan["staging_slots"] == len(slots) == loader.staging_slots
        assert plan["slot_bytes"] == slots[0]["images"].nbytes == 4 * 20 * 24 * 3
        assert plan["slots_on"] == ("host (shared)" if workers else "host")
        assert plan["host_bytes"] == sum(s["images"].nbytes for s in slots)
        assert plan["host_shared_bytes"] == (plan["host_bytes"] if workers else 0)
        assert plan["device_bytes"] == 0 and loader.gpu_staging_buffers == 0
        assert "reader_slabs" not in plan and "decode_buffers_at_most" not in plan
    finally:
        loader.shutdown()


def test_in_memory_plan_counts_a_unit_of_output(tmp_path):
    ds = CIFAR10(write_cifar10(tmp_path, num_train=64, num_test=8))
    proc = ImageProcess(crop="random", padding=4, random_flip=True, dtype="float32", normalized=True)
    loader = ImageLoader(ds, batch_size=8, processing=proc)
    _public_properties_work(loader)
    plan = loader.memory_plan
    assert plan["staging_slots"] == 0 and loader.gpu_staging_buffers == 0
    assert plan["dataset_on_device_bytes"] == 0  # on the CPU the dataset is not copied
    batches = iter(loader)
    next(batches)
    unit = [loader._epoch_plan(0).batch(b) for b in range(loader.lookahead)]
    assert plan["unit_output_bytes"] == loader._pool.augment(unit).nbytes
    assert plan["host_bytes"] == plan["unit_output_bytes"]


def test_gpu_pool_plan_counts_the_running_readers_slabs(folder, monkeypatch):  # noqa: F811
    """The in-process GPU pool (packing stand-in, reader processes): its slots and, once it
    runs, its readers' slabs, as allocated."""
    from vidloader.pipeline import _image_decode

    monkeypatch.setattr(_image_decode, "READER_PROCESSES", 2)
    pillow, made, _ = _packing_pools(folder, monkeypatch)
    try:
        batches = iter(made)
        next(batches)
        plan = made.memory_plan
        readers, slots = made._pool.file_readers, made._pool.slots
        assert plan["reader_slabs"] == readers.num_slabs == len(readers.views)
        assert plan["reader_slab_bytes"] == readers.slab_bytes == readers.views[0].nbytes
        assert plan["reader_slabs"] == len(slots) + len(made._pool.lanes) + 1
        assert plan["slot_bytes"] == slots[0]["images"].nbytes
        assert plan["host_shared_bytes"] == readers.num_slabs * readers.slab_bytes
        assert plan["host_bytes"] == plan["host_shared_bytes"] + len(slots) * plan["slot_bytes"]
    finally:
        made.shutdown()
        pillow.shutdown()


@pytest.mark.parametrize("workers", [0, 2])
def test_nvimgcodec_plan_before_the_first_batch(folder, monkeypatch, workers):  # noqa: F811
    """For ``decoder="nvimgcodec"`` on a GPU (its config, set by hand here): slots on the
    device in the output's dtype, a decode buffer per slot in one process or per worker,
    estimated from the index's mean size, no less than a real buffer of that size; reader
    slabs in one process only, (slots + lanes + 1) of ``slab_bytes``."""
    from vidloader.images import _packed
    from vidloader.pipeline import _image_decode, _image_readers

    monkeypatch.setattr(_image_decode, "READER_PROCESSES", 2)
    ds = ImageFolder(folder, num_workers=0, progress=False)
    proc = ImageProcess(size=(16, 16), crop="random_resized", dtype="float16")
    loader = ImageLoader(ds, batch_size=4, processing=proc, num_workers=0)
    loader.config = dataclasses.replace(loader.config, backend="nvimgcodec", num_workers=workers,
                                        device=torch.device("cuda", 0))
    plan = loader.memory_plan
    slots = loader.staging_slots
    assert plan["slots_on"] == "cuda:0" and plan["slot_bytes"] == 4 * 16 * 16 * 3 * 2
    assert loader.gpu_staging_buffers == slots
    assert plan["decode_buffers_at_most"] == (workers or slots)
    sizes = np.repeat(np.round(ds.sizes.mean(0)).astype(np.int64)[None], 4, axis=0)
    real = _packed.PackedImages.allocate(sizes, torch.device("cpu")).pixels.untyped_storage().nbytes()
    assert real <= plan["decode_buffer_bytes_estimate"] <= real + 4 * 3 * _packed.ALIGN_BYTES
    if workers:
        assert "reader_slabs" not in plan
    else:
        assert plan["reader_slabs"] == slots + _image_decode.NVIMGCODEC_LANES + 1
        assert plan["reader_slab_bytes"] == _image_readers.slab_bytes(ds, 4)
    assert plan["device_bytes"] == (slots * plan["slot_bytes"]
                                    + plan["decode_buffers_at_most"] * plan["decode_buffer_bytes_estimate"])
    assert plan["host_shared_bytes"] == plan.get("reader_slabs", 0) * plan.get("reader_slab_bytes", 0)
    monkeypatch.setattr(_image_decode, "READER_PROCESSES", 0)
    assert "reader_slabs" not in loader.memory_plan

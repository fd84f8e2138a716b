"""``ImageLoader.memory_plan`` and ``gpu_staging_buffers``: what the image pools hold, checked
against what they allocate (CPU only; the GPU pools run with a packing stand-in for
nvImageCodec, and a GPU configuration is set by hand where only the plan is read)."""

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

KEYS = {"backend", "device", "staging_slots", "slot_bytes", "slots_on", "dataset_on_device_bytes",
        "unit_output_bytes", "units_alive", "decode_buffers", "decode_buffer_bytes",
        "augment_workspace_bytes", "reader_slabs", "reader_slab_bytes", "reader_slabs_page_locked",
        "cublas_workspace_bytes", "device_bytes", "host_bytes", "host_shared_bytes",
        "host_page_locked_bytes", "not_counted"}


def _public_properties_work(loader) -> None:
    for name in dir(loader):
        if not name.startswith("_"):
            getattr(loader, name)  # none may raise (two did: AttributeError on the config)


def _on_gpu(loader, **changes) -> None:
    """The loader's config as on a GPU (only the plan is read afterwards)."""
    loader.config = dataclasses.replace(loader.config, device=torch.device("cuda", 0), **changes)


@pytest.mark.parametrize("workers", [0, 2])
def test_pillow_plan_is_what_the_pool_allocates(folder, workers):  # noqa: F811
    ds = ImageFolder(folder, num_workers=0, progress=False)
    loader = ImageLoader(ds, batch_size=4, num_workers=workers, on_error="skip",
                         processing=ImageProcess(size=(20, 24), crop="center"))
    try:
        _public_properties_work(loader)
        plan = loader.memory_plan
        assert set(plan) == KEYS and plan["not_counted"] == ["the batches the training loop still holds"]
        batches = iter(loader)
        next(batches)  # the pool runs while the epoch is under way
        slots = loader._pool.slots
        assert plan["staging_slots"] == len(slots) == loader.staging_slots
        assert plan["slot_bytes"] == slots[0]["images"].nbytes == 4 * 20 * 24 * 3
        assert plan["slots_on"] == ("shared host" if workers else "host")
        assert plan["host_bytes"] == sum(s["images"].nbytes for s in slots)
        assert plan["host_shared_bytes"] == (plan["host_bytes"] if workers else 0)
        assert plan["device_bytes"] == 0 and loader.gpu_staging_buffers == 0
        assert plan["reader_slabs"] == plan["decode_buffers"] == plan["augment_workspace_bytes"] == 0
    finally:
        loader.shutdown()


@pytest.mark.parametrize("batch_size", [64, 8])  # a unit of one batch, and of several
def test_in_memory_plan_counts_two_units_of_output(tmp_path, batch_size):
    ds = CIFAR10(write_cifar10(tmp_path, num_train=64, num_test=8))
    proc = ImageProcess(crop="random", padding=4, random_flip=True, dtype="float32", normalized=True)
    loader = ImageLoader(ds, batch_size=batch_size, processing=proc)
    loader.config = dataclasses.replace(loader.config, lookahead=64 // batch_size)
    _public_properties_work(loader)
    plan = loader.memory_plan
    assert plan["staging_slots"] == 0 and loader.gpu_staging_buffers == 0
    assert plan["dataset_on_device_bytes"] == 0  # on the CPU the dataset is not copied
    batches = iter(loader)
    next(batches)
    unit = [loader._epoch_plan(0).batch(b) for b in range(loader.lookahead)]
    assert plan["unit_output_bytes"] == loader._pool.augment(unit).nbytes
    # a unit's intermediates: at least its gathered images, staged samples and float32 copy
    assert plan["augment_workspace_bytes"] >= 64 * (32 * 32 * 3 + 32 * 32 * 3 * (1 + 4))
    assert plan["units_alive"] == 2
    assert plan["host_bytes"] == 2 * plan["unit_output_bytes"] + plan["augment_workspace_bytes"]
    _on_gpu(loader)
    on_gpu = loader.memory_plan
    assert on_gpu["dataset_on_device_bytes"] == ds.pixels.numel() == 64 * 32 * 32 * 3
    assert on_gpu["cublas_workspace_bytes"] > 0 and plan["cublas_workspace_bytes"] == 0
    assert on_gpu["device_bytes"] == (ds.pixels.numel() + 2 * plan["unit_output_bytes"]
                                      + on_gpu["augment_workspace_bytes"] + on_gpu["cublas_workspace_bytes"])
    assert on_gpu["host_bytes"] == 0 and any("CUDA context" in x for x in on_gpu["not_counted"])


def test_gpu_pool_plan_predicts_the_readers_it_starts(folder, monkeypatch):  # noqa: F811
    """The in-process GPU pool (packing stand-in, reader processes): the plan made before it
    starts names the slabs and slots it then allocates."""
    from vidloader.images import _nvimgcodec
    from vidloader.pipeline import _image_decode

    monkeypatch.setattr(_image_decode, "READER_PROCESSES", 2)
    monkeypatch.setattr(_nvimgcodec, "decodes_packed_here", lambda: True)  # as nvImageCodec 0.9
    pillow, made, _ = _packing_pools(folder, monkeypatch)
    try:
        before = made.memory_plan
        batches = iter(made)
        next(batches)
        after = made.memory_plan
        readers, slots = made._pool.file_readers, made._pool.slots
        assert before == after
        assert after["reader_slabs"] == readers.num_slabs == len(readers.views)
        assert after["reader_slab_bytes"] == readers.bytes_per_slab == readers.views[0].nbytes
        assert after["staging_slots"] == len(slots)
        assert after["slot_bytes"] == slots[0]["images"].nbytes
        assert after["host_shared_bytes"] == readers.num_slabs * readers.bytes_per_slab
    finally:
        made.shutdown()
        pillow.shutdown()


def test_decoder_object_plan_predicts_its_readers_and_buffers(folder, monkeypatch):  # noqa: F811
    """A decoder object that decodes packed from files (the packing stand-in, given as an
    object): one lane in this process, reader processes, decode buffers and the
    augmentation's workspace; the plan made before the pool starts matches what it starts.
    With ``PACKED_DECODE`` off, no readers and one buffer more for the packing copy."""
    from vidloader.pipeline import _image_decode

    from .test_images import install_packing_decoder

    monkeypatch.setattr(_image_decode, "READER_PROCESSES", 2)
    Packing = install_packing_decoder(monkeypatch, lambda *args: None)
    ds = ImageFolder(folder, num_workers=0, progress=False)
    proc = ImageProcess(size=(40, 40), crop="random_resized")
    loader = ImageLoader(ds, batch_size=4, processing=proc, on_error="skip", decoder=Packing("cpu"),
                         persistent_workers=True)
    try:
        before = loader.memory_plan
        batches = iter(loader)
        next(batches)
        after, readers = loader.memory_plan, loader._pool.file_readers
        assert before == after and after["reader_slabs"] == readers.num_slabs > 0
        assert after["decode_buffers"] == loader.staging_slots + 1 and after["augment_workspace_bytes"] > 0
        assert any("decoder object" in x for x in after["not_counted"])
    finally:
        loader.shutdown()
    monkeypatch.setattr(_image_decode, "PACKED_DECODE", False)
    unpacked = ImageLoader(ds, batch_size=4, processing=proc, decoder=Packing("cpu")).memory_plan
    assert unpacked["reader_slabs"] == 0 and unpacked["decode_buffers"] == 1  # the packing copy


@pytest.mark.parametrize("engine", ["triton", "matmul"])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("packed", [True, False])
def test_nvimgcodec_plan_on_a_gpu(folder, monkeypatch, workers, packed, engine):  # noqa: F811
    """``decoder="nvimgcodec"`` on a GPU: slots on the device in the output's dtype; decode
    buffers one per slot and one more in one process, one per worker, plus one per
    augmentation where images are decoded separately, each no smaller than a real packed
    buffer of the mean size; the augmentation's workspace per augmentation; reader slabs in
    one process only, and only where the batches are decoded packed and not in a daemonic
    process."""
    from vidloader.images import _batched, _nvimgcodec, _packed
    from vidloader.pipeline import _image_decode, _image_readers

    monkeypatch.setattr(_batched, "cuda_resize_engine", lambda: engine)
    monkeypatch.setattr(_image_decode, "READER_PROCESSES", 2)
    monkeypatch.setattr(_nvimgcodec, "decodes_packed_here", lambda: packed)
    # nvJPEG's decoder always packs: unpacked only with nvImageCodec's, before its 0.9
    monkeypatch.setattr(_nvimgcodec, "PACKED_JPEG_ENGINE", "nvjpeg" if packed else "nvimgcodec")
    ds = ImageFolder(folder, num_workers=0, progress=False)
    proc = ImageProcess(size=(16, 16), crop="random_resized", dtype="float16")
    loader = ImageLoader(ds, batch_size=4, processing=proc, num_workers=0)
    _on_gpu(loader, backend="nvimgcodec", num_workers=workers)
    plan, slots = loader.memory_plan, loader.staging_slots
    assert plan["slots_on"] == "device" and plan["slot_bytes"] == 4 * 16 * 16 * 3 * 2
    assert loader.gpu_staging_buffers == slots
    augmenters = workers or 1
    assert plan["decode_buffers"] == (workers or slots + 1) + (0 if packed else augmenters)
    sizes = np.repeat(np.round(ds.sizes.mean(0)).astype(np.int64)[None], 4, axis=0)
    real = _packed.PackedImages.allocate(sizes, torch.device("cpu")).pixels.untyped_storage().nbytes()
    if packed:
        assert real <= plan["decode_buffer_bytes"] <= real + 4 * 3 * _packed.ALIGN_BYTES
    else:
        assert plan["decode_buffer_bytes"] == 4 * 48 * 64 * 3  # the test images are all 48x64
    largest = int(ds.sizes[:, 0].max()) * int(ds.sizes[:, 1].max())
    if engine == "matmul":  # the padded batch and its gather, in the compute dtype and int32
        assert plan["augment_workspace_bytes"] > augmenters * 4 * largest * 12
    else:  # the fused kernel's parameters (eight int64 a row) and one output batch more
        assert plan["augment_workspace_bytes"] == augmenters * (4 * (64 + plan["slot_bytes"] // 4) + 24)
    if workers or not packed:
        assert plan["reader_slabs"] == 0
    else:
        assert plan["reader_slabs"] == slots + _image_decode.NVIMGCODEC_LANES + 1
        assert plan["reader_slab_bytes"] == _image_readers.slab_bytes(ds, 4)
    # one augmenting stream here, running matmuls only without the fused kernel
    assert plan["cublas_workspace_bytes"] == (0 if workers or engine == "triton" else 32 * 2**20)
    assert plan["device_bytes"] == (slots * plan["slot_bytes"] + plan["augment_workspace_bytes"]
                                    + plan["decode_buffers"] * plan["decode_buffer_bytes"]
                                    + plan["cublas_workspace_bytes"])
    assert plan["host_shared_bytes"] == plan["host_bytes"] == plan["reader_slabs"] * plan["reader_slab_bytes"]
    # page-locked for CUDA where there are slabs (PIN_READ_SLABS), and not when it is off
    assert plan["reader_slabs_page_locked"] == (plan["reader_slabs"] > 0)
    assert plan["host_page_locked_bytes"] == plan["host_shared_bytes"]
    monkeypatch.setattr(_image_decode, "PIN_READ_SLABS", False)
    unlocked = loader.memory_plan
    assert not unlocked["reader_slabs_page_locked"] and unlocked["host_page_locked_bytes"] == 0
    assert any("CUDA context" in line for line in plan["not_counted"])
    monkeypatch.setattr(_image_decode, "_in_daemonic_process", lambda: True)
    assert loader.memory_plan["reader_slabs"] == 0


@pytest.mark.parametrize(("config", "expected"), [(":4096:8", 32 * 2**20),
                                                  (":4096:2:16:8", (4096 * 2 + 16 * 8) * 1024),
                                                  (":0:0", 0)])
def test_cublas_workspace_follows_torch_s_setting(monkeypatch, config, expected):
    from vidloader.pipeline._image_memory import cublas_workspace_bytes

    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", config)
    assert cublas_workspace_bytes(torch.device("cuda")) == expected


def test_packed_decode_support_follows_the_installed_nvimgcodec(monkeypatch):
    """``decodes_packed_here`` and the decoder's packed parameters: none without nvImageCodec,
    none before 0.9 (no ``as_images``, or a ``DecodeParams`` without ``sample_format``), and
    interleaved RGB with EXIF orientation from 0.9 on. Checked with stand-in modules: the
    CPU machine has no nvImageCodec."""
    import sys
    from types import ModuleType, SimpleNamespace

    from vidloader.images import _nvimgcodec

    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", None)  # not installed
    assert _nvimgcodec.decodes_packed_here() is False

    def module(*, as_images=True, sample_format=True):
        def params(**kw):
            if "sample_format" in kw and not sample_format:
                raise TypeError("unexpected keyword argument 'sample_format'")
            return kw
        fake = ModuleType("nvidia.nvimgcodec")
        fake.ColorSpec = SimpleNamespace(SRGB="srgb")
        fake.SampleFormat = SimpleNamespace(I_RGB="i_rgb")
        fake.DecodeParams = params
        if as_images:
            fake.as_images = lambda places, cuda_stream=0: places
        return fake
    assert _nvimgcodec._packed_params(module(as_images=False)) is None
    assert _nvimgcodec._packed_params(module(sample_format=False)) is None
    assert _nvimgcodec._packed_params(module()) == {
        "apply_exif_orientation": True, "color_spec": "srgb", "allow_any_depth": False,
        "sample_format": "i_rgb"}
    nvidia = ModuleType("nvidia")
    nvidia.nvimgcodec = module()
    monkeypatch.setitem(sys.modules, "nvidia", nvidia)
    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", nvidia.nvimgcodec)
    assert _nvimgcodec.decodes_packed_here() is True
    for fake, packs in ((module(), True), (module(sample_format=False), False)):  # the decoder too
        fake.CodeStream = fake.Region = object
        fake.Backend = lambda kind, load_hint=1.0: (kind, load_hint)
        fake.BackendKind = SimpleNamespace(**{kind: kind for kind in _nvimgcodec.BACKENDS})
        fake.Decoder = lambda **kw: kw
        monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", fake)
        nvidia.nvimgcodec = fake
        decoder = _nvimgcodec.NvImageCodecDecoder(torch.device("cpu"))
        assert decoder.decodes_packed is packs and (decoder._packed_params is not None) is packs
        assert _nvimgcodec.NvImageCodecDecoder(torch.device("cpu"), packed=False).decodes_packed is False


@pytest.mark.cuda
@pytest.mark.parametrize("size", [32, 224])  # smaller than the 48x64 images, and larger
def test_nvimgcodec_plan_bounds_what_torch_allocates_in_one_process(folder, size):  # noqa: F811
    """On a GPU, the one-process pool (its lanes, reader processes, packed decode): the most
    torch held over two epochs lies between the slots alone and the plan's device bytes plus
    the batches the loop holds, which the plan leaves out (``not_counted``): a batch is
    copied out of its slot while the loop still holds the last, so two (nvJPEG's and
    nvImageCodec's own allocations and the CUDA context are not torch's, and not counted).
    Session 29's fused kernel cut the plan's workspace from the matmuls' intermediates to one
    output batch: the held batches no longer fit under it."""
    pytest.importorskip("nvidia.nvimgcodec")
    from vidloader.images import _nvimgcodec

    ds = ImageFolder(folder, num_workers=0, progress=False)
    proc = ImageProcess(size=(size, size), crop="random_resized", random_flip=True, dtype="float32",
                        normalized=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()  # before the loader: its slots count in the peak
    loader = ImageLoader(ds, batch_size=4, processing=proc, decoder="nvimgcodec", device="cuda",
                         num_workers=0, on_error="skip", persistent_workers=True)
    try:
        plan = loader.memory_plan
        assert plan["decode_buffers"] == loader.staging_slots + 1 + (0 if _nvimgcodec.decodes_packed_here() else 1)
        for _ in range(2):
            for _batch in loader:
                pass
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        print(f"torch's peak {peak:,} bytes; plan {plan['device_bytes']:,} "
              f"(slots {plan['staging_slots'] * plan['slot_bytes']:,})")
        held = 2 * plan["slot_bytes"]  # a slot holds one batch in the output's dtype
        assert plan["staging_slots"] * plan["slot_bytes"] <= peak <= plan["device_bytes"] + held
        assert loader.memory_plan["reader_slabs"] == plan["reader_slabs"]
    finally:
        loader.shutdown()

"""``vidloader bench images``: the image workloads of issue 15, every contender in one call.

- ``cifar``: one CIFAR-10 training epoch (50,000 32×32 images, batch 256, random crop with
  padding 4 + flip + normalize, float32 NCHW). vidloader holds the set on ``--device`` and
  augments there; the reference is the seed's torchvision-style pipeline (PIL +
  per-sample transforms in a ``DataLoader`` with 2 workers), timed on ``--cpu-batches``
  batches and extrapolated to the epoch.
- ``jpeg``: a folder of generated ImageNet-like JPEGs (500×375, quality 90) at 224² random
  resized crop + flip + normalize: vidloader's Pillow workers (all cores), vidloader with
  nvImageCodec, and, decode alone, nvImageCodec and torchvision's ``decode_jpeg`` on CUDA;
  DALI's whole pipeline when ``nvidia.dali`` imports.
- ``resize``: the augmentation alone (224² random resized crop + flip + normalize on ~500×375
  images): batched matmuls against the per-image path and ``grid_sample``
  (:mod:`._images_resize`).

Each contender runs in this process, after a warm-up; a failure is recorded in the JSON (its
error) and the others go on. Results: a table on stdout and ``images-<workload>.json``
under ``--out``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)  # CIFAR-10's
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


#: Milliseconds the consumer works on the host after each batch (``--host-ms``), standing in
#: for a training step's host side, in the way :data:`HOST_WORK` says. A loader whose
#: threads retake the GIL in this process may wait on that work; one whose work runs in
#: other processes or in C++ threads should not. 0: the consumer only counts.
HOST_MS = 0.0

#: How the consumer works (``--host-work``): ``"torch"``, small torch ops one after another
#: (each dispatch lets go of the GIL, as a model's ops do), or ``"python"``, a pure-Python
#: loop that gives the GIL up only when Python's switch interval makes it: the worst case.
HOST_WORK = "torch"


def hold_the_gil(ms: float) -> int:
    """Busy pure-Python work for ``ms`` milliseconds (switching the GIL as Python code does);
    returns the loop count, so the work is not optimised away."""
    end, n = time.perf_counter() + ms / 1e3, 0
    while time.perf_counter() < end:
        n += 1
    return n


def dispatch_small_ops(ms: float, device: str) -> int:
    """Small in-place torch ops on ``device``, one after another, for ``ms`` milliseconds;
    returns how many."""
    import torch

    x = torch.zeros(16, device=device)
    end, n = time.perf_counter() + ms / 1e3, 0
    while time.perf_counter() < end:
        x.add_(1.0)
        n += 1
    return n


def _host_work(device: str) -> None:
    if HOST_MS <= 0:
        return
    if HOST_WORK == "python":
        hold_the_gil(HOST_MS)
    else:
        dispatch_small_ops(HOST_MS, device)


#: The last timed span of :func:`_time_batches`, in ``time.monotonic`` seconds (the GPU
#: sampler's clock), for the sampled contenders' utilisation.
_LAST_SPAN: tuple[float, float] | None = None


def _time_batches(batches, limit: int | None, warmup: int = 2) -> tuple[int, float]:
    """Images and seconds over the batches after ``warmup`` (start-up excluded); after each
    batch the consumer works :data:`HOST_MS` on the host (:data:`HOST_WORK`), inside the
    timed span."""
    global _LAST_SPAN
    images, start, span_start = 0, None, None
    for n, batch in enumerate(batches, 1):
        if n == warmup:
            _sync()
            start, span_start = time.perf_counter(), time.monotonic()
        elif n > warmup:
            images += _count(batch)
        _host_work(_HOST_DEVICE)
        if limit is not None and n >= warmup + limit:
            break
    _sync()
    _LAST_SPAN = (span_start, time.monotonic())
    return images, time.perf_counter() - start


def _count(batch) -> int:
    """Images in a batch: DALI's ``[{"data": ...}]``, a dict with ``"images"``, a list of
    decoded images (the decode-alone contenders) or a batched tensor."""
    if isinstance(batch, list) and batch and isinstance(batch[0], dict):
        return len(batch[0]["data"])
    if isinstance(batch, list):
        return len(batch)
    if isinstance(batch, dict):
        return len(batch["images"])
    return len(batch[0])


# -- CIFAR -----------------------------------------------------------------------------------

def _cifar_vidloader(root: Path, device: str, batch_size: int) -> dict:
    from ..images import CIFAR10, ImageProcess
    from ..pipeline import ImageLoader

    proc = ImageProcess(crop="random", padding=4, random_flip=True, dtype="float32",
                        normalized=True, mean=MEAN, std=STD, layout="chw")
    loader = ImageLoader(CIFAR10(root), batch_size=batch_size, processing=proc, device=device)
    list(loader)  # epoch 0: moves the set to the device, warms the kernels
    _sync()
    start = time.perf_counter()
    images = sum(len(b["images"]) for b in loader)
    _sync()
    seconds = time.perf_counter() - start
    return {"images": images, "seconds": seconds, "images_per_s": images / seconds,
            "epoch_seconds": seconds}


class _PilCifar:
    """The seed's dataset: a PIL image per sample, torchvision transforms (or the same ops in
    PIL and torch where torchvision is absent)."""

    def __init__(self, pixels, labels) -> None:
        self.pixels, self.labels = pixels, labels
        self.transform = None

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        from PIL import Image

        if self.transform is None:
            self.transform = _pil_transform()
        return self.transform(Image.fromarray(self.pixels[i])), int(self.labels[i])


def _pil_transform():
    try:
        import torchvision.transforms as T

        return T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
                          T.Normalize(MEAN, STD)])
    except ImportError:
        return _PilTransform()


class _PilTransform:
    def __call__(self, image):
        import random

        import numpy as np
        import torch
        from PIL import ImageOps

        padded = ImageOps.expand(image, border=4, fill=0)
        x, y = random.randint(0, 8), random.randint(0, 8)
        image = padded.crop((x, y, x + 32, y + 32))
        if random.random() < 0.5:
            image = ImageOps.mirror(image)
        t = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255).permute(2, 0, 1)
        return (t - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]


def _cifar_torchvision(root: Path, batch_size: int, batches: int) -> dict:
    import torch

    from ..images import CIFAR10

    ds = CIFAR10(root)
    data = _PilCifar(ds.pixels.numpy(), ds.labels)
    loader = torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=True,
                                         num_workers=2, pin_memory=torch.cuda.is_available())
    images, seconds = _time_batches(
        ((x.cuda(non_blocking=True) if torch.cuda.is_available() else x, y) for x, y in loader),
        batches)
    rate = images / seconds
    return {"images": images, "seconds": seconds, "images_per_s": rate,
            "epoch_seconds": len(ds) / rate, "note": f"{batches} batches timed, epoch extrapolated"}


# -- JPEG folder -----------------------------------------------------------------------------

def _rrc_proc():
    from ..images import ImageProcess

    return ImageProcess(size=224, crop="random_resized", random_flip=True, dtype="float32",
                        normalized=True, mean=IMAGENET_MEAN, std=IMAGENET_STD, layout="chw")


def _jpeg_vidloader(folder, device, batch_size, batches, decoder, workers) -> dict:
    from ..pipeline import ImageLoader

    loader = ImageLoader(folder, batch_size=batch_size, processing=_rrc_proc(), device=device,
                         decoder=decoder, num_workers=workers, persistent_workers=True)
    try:
        images, seconds = _time_batches(_epochs(loader), batches)
        settings = _pool_settings(loader._pool)
    finally:
        loader.shutdown()
    return {"images": images, "seconds": seconds, "images_per_s": images / seconds,
            "workers": loader.num_workers, **settings}


def _sampled(call, query: str | None):
    """``call`` (a contender) with the GPU sampled by ``nvidia-smi`` while it runs: its row
    gains the GPU's (and, where the query has it, the JPEG decoder's) mean utilisation over
    the timed span, and the device memory in use at its peak during the run above what was
    in use just before it (device-wide, worker processes included), after this process's
    allocators gave back what they had cached (torch's, DALI's). ``query``:
    :func:`~._monitor.jpeg_query`'s; without one the row is left as it is."""
    from ._monitor import GpuSampler

    def run() -> dict:
        global _LAST_SPAN
        if query is None:
            return call()
        _release_cached_gpu_memory()  # what earlier contenders keep would hide this one's
        sampler, _LAST_SPAN = GpuSampler(query), None
        try:
            deadline = time.monotonic() + 3.0  # a baseline sample before the contender starts
            while len(sampler.samples) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            row = call()
        finally:
            sampler.stop()
        span = _LAST_SPAN or (0.0, time.monotonic())
        summary = sampler.summary(*span)
        if summary:
            row.update(gpu_util_pct=summary["gpu_util_pct"],
                       gpu_mem_added_bytes=summary["gpu_mem_peak_bytes"] - summary["gpu_mem_baseline_bytes"])
            if "utilization.jpeg" in query:  # the query's third field
                row["jpeg_util_pct"] = summary["nvdec_util_pct"]
        return row
    return run


def _release_cached_gpu_memory() -> None:
    """Give back what this process's allocators keep cached (torch's; DALI's pools where DALI
    is loaded), so a contender's added memory is its own."""
    import torch

    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    dali = sys.modules.get("nvidia.dali.backend")
    release = getattr(dali, "ReleaseUnusedMemory", None)
    if release is not None:
        with contextlib.suppress(Exception):  # best effort: the figure says what it measures
            release()


def _pool_settings(pool) -> dict:
    """How the GPU image pool ran, for the record: the in-process pool's reader processes
    (sharing each batch's reads out or not, their slabs page-locked or not), its lanes (any
    free lane taking the next batch or not), whether it decoded into one buffer and its
    decoder's name (``nvjpeg``, ``nvimgcodec``);
    the GPU workers' read-ahead and, where they make the default decoder, its engine."""
    settings: dict = {"pool": type(pool).__name__}
    readers = getattr(pool, "file_readers", None)
    if hasattr(pool, "file_readers"):
        from ..pipeline import _image_readers

        settings["reader_processes"] = 0 if readers is None else readers._procs.num_workers
        settings["packed_decode"] = bool(getattr(pool, "_packed", False))
        settings["reads_shared_out"] = readers is not None and _image_readers.SPLIT_READS
        settings["slabs_page_locked"] = pool.slabs_page_locked
        settings["lanes"] = len(pool.lanes)
        settings["any_free_lane"] = getattr(pool, "_any_lane", None) is not None
    if hasattr(pool, "read_ahead"):
        settings["workers_read_ahead"] = pool.read_ahead
    decoder = getattr(pool, "decoder", None)  # the in-process pool's first lane's
    made = getattr(getattr(pool, "make_decoder", None), "keywords", {})  # the workers' factory
    if decoder is not None:
        settings["decoder"] = decoder.name
    elif "settings" in made:
        settings["packed_jpeg_engine"] = made["settings"]["PACKED_JPEG_ENGINE"]
    return settings


def _epochs(loader):
    while True:
        yield from loader


def _batch_rows(folder, batch_size: int, batches: int):
    """The decode-alone rows' batches, as the folder's indices: in order, round and round."""
    for b in range(batches + 2):
        yield (b * batch_size + np.arange(batch_size)) % len(folder)


def _files(folder, batch_size: int, batches: int):
    for rows in _batch_rows(folder, batch_size, batches):
        yield [Path(folder.path(i)).read_bytes() for i in rows.tolist()]


def _decode_nvimgcodec(folder, batch_size: int, batches: int) -> dict:
    import torch

    from ..images._nvimgcodec import NvImageCodecDecoder

    decoder = NvImageCodecDecoder(torch.device("cuda", 0))
    blobs = list(_files(folder, batch_size, batches))  # read first: decode alone is timed
    images, seconds = _time_batches(([x for x in decoder.decode(b) if x is not None] for b in blobs),
                                    batches)
    return {"images": images, "seconds": seconds, "images_per_s": images / seconds,
            "note": "decode only, files read beforehand"}


def _decode_nvjpeg(folder, batch_size: int, batches: int) -> dict:
    import torch

    from ..images._nvjpeg import NvJpegDecoder

    decoder = NvJpegDecoder(torch.device("cuda", 0))
    rows = list(_batch_rows(folder, batch_size, batches))
    blobs = list(_files(folder, batch_size, batches))  # read first: decode alone is timed
    images, seconds = _time_batches((_unpacked(decoder.decode_packed(b, folder.sizes[r]))
                                     for b, r in zip(blobs, rows)), batches)
    return {"images": images, "seconds": seconds, "images_per_s": images / seconds,
            "hardware_share": decoder.hardware_decoded / max(1, decoder.hardware_decoded + decoder.handed_on),
            "note": "decode only (one thread, into one buffer a batch), files read beforehand"}


def _unpacked(decoded) -> list:
    """A packed decode's images (a list where they did not fit their places), ``None`` left out."""
    return [x for x in decoded if x is not None]


def _decode_torchvision(folder, batch_size: int, batches: int) -> dict:
    import torch
    from torchvision.io import decode_jpeg

    blobs = [[torch.frombuffer(bytearray(x), dtype=torch.uint8) for x in b]
             for b in _files(folder, batch_size, batches)]
    images, seconds = _time_batches((decode_jpeg(b, device="cuda") for b in blobs), batches)
    return {"images": images, "seconds": seconds, "images_per_s": images / seconds,
            "note": "decode only, files read beforehand"}


def _dali(root: str, batch_size: int, batches: int) -> dict:
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    @pipeline_def(batch_size=batch_size, num_threads=os.cpu_count() or 1, device_id=0)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="r")
        images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB,
                                               hw_decoder_load=1.0)
        images = fn.resize(images, resize_x=224, resize_y=224)
        images = fn.crop_mirror_normalize(
            images, dtype=types.FLOAT, output_layout="CHW", mirror=fn.random.coin_flip(),
            mean=[m * 255 for m in IMAGENET_MEAN], std=[s * 255 for s in IMAGENET_STD])
        return images, labels

    p = pipe()
    p.build()
    it = DALIGenericIterator(p, ["data", "label"], reader_name="r")
    images, seconds = _time_batches(_epochs(it), batches)
    return {"images": images, "seconds": seconds, "images_per_s": images / seconds,
            "note": "fn.decoders.image_random_crop(mixed, hw_decoder_load=1.0) + resize + "
                    "crop_mirror_normalize"}


# -- the command -----------------------------------------------------------------------------

def _attempt(results: dict, name: str, call) -> None:
    try:
        results[name] = call()
    except Exception as exc:  # noqa: BLE001 - one contender failing must not stop the others
        results[name] = {"error": f"{type(exc).__name__}: {exc}"}
    shown = results[name]
    rate = f"{shown['images_per_s']:>12,.0f} images/s" if "images_per_s" in shown else shown["error"]
    if "gpu_util_pct" in shown:  # sampled by nvidia-smi (_sampled)
        jpeg = f"JPEG decoder {shown['jpeg_util_pct']:.0f}%, " if "jpeg_util_pct" in shown else ""
        rate += f"  ({jpeg}GPU {shown['gpu_util_pct']:.0f}%, +{shown['gpu_mem_added_bytes'] / 2**30:.1f} GiB)"
    print(f"{name:<28} {rate}", flush=True)


def _cifar(args, data: Path, device: str) -> dict:
    from ..images._synthetic import write_cifar10

    root = data / "cifar"
    if not (root / "cifar-10-batches-py" / "test_batch").exists():
        write_cifar10(root, num_train=50_000, num_test=1_000)
    results: dict = {}
    _attempt(results, f"vidloader ({device})", lambda: _cifar_vidloader(root, device, 256))
    _attempt(results, "torchvision-style, 2 workers",
             lambda: _cifar_torchvision(root, 256, args.cpu_batches))
    ours, ref = results[f"vidloader ({device})"], results["torchvision-style, 2 workers"]
    if "epoch_seconds" in ours and "epoch_seconds" in ref:
        results["speedup"] = ref["epoch_seconds"] / ours["epoch_seconds"]
        print(f"epoch: {ours['epoch_seconds']:.2f} s against {ref['epoch_seconds']:.1f} s: "
              f"{results['speedup']:.0f}x")
    return results


_HOST_DEVICE = "cpu"  # where dispatch_small_ops runs: the workload's device


#: ``--contenders``' short names for the JPEG workload's contenders, in the order they run.
JPEG_CONTENDERS = {
    "pillow": "vidloader pillow (all cores)",
    "vidloader": "vidloader nvimgcodec",
    "vidloader-workers": "vidloader nvimgcodec, 2 GPU workers",
    "nvimgcodec": "nvimgcodec decode alone",
    "nvjpeg": "nvjpeg decode alone",
    "torchvision": "torchvision decode_jpeg cuda",
    "dali": "DALI pipeline",
}


def _jpeg(args, data: Path, device: str) -> dict:
    global HOST_MS, HOST_WORK, _HOST_DEVICE
    HOST_MS = float(getattr(args, "host_ms", 0.0) or 0.0)
    HOST_WORK = getattr(args, "host_work", "torch")
    _HOST_DEVICE = device
    try:
        return _jpeg_contenders(args, data, device)
    finally:
        HOST_MS, HOST_WORK, _HOST_DEVICE = 0.0, "torch", "cpu"


def _jpeg_contenders(args, data: Path, device: str) -> dict:
    import torch

    from ..images import ImageFolder
    from ..images._synthetic import write_image_folder

    copies = max(1, getattr(args, "copies", 1))
    name = "jpeg" if copies == 1 else f"jpeg-x{copies}"
    root = write_image_folder(data / name, num_classes=10, per_class=args.images // 10,
                              copies=copies)
    folder = ImageFolder(root)
    b, n = args.batch_size, args.batches
    results: dict = {"files": len(folder)}
    if HOST_MS > 0:
        bound = 1e3 * b / HOST_MS
        results["host_ms"] = {"per_batch": HOST_MS, "work": HOST_WORK, "bound_images_per_s": bound}
        print(f"the consumer works {HOST_MS:g} ms on the host after each batch ({HOST_WORK}; "
              f"at most {bound:,.0f} images/s)", flush=True)
    wanted = {JPEG_CONTENDERS[short] for short in getattr(args, "contenders", None) or JPEG_CONTENDERS}
    pillow = JPEG_CONTENDERS["pillow"]
    if pillow in wanted:
        _attempt(results, pillow, lambda: _jpeg_vidloader(folder, device, b, n, "pillow", args.workers))
    elif not torch.cuda.is_available():
        print(f"none of the named contenders runs without CUDA ({', '.join(sorted(wanted))}): "
              "only 'pillow' does", flush=True)
    if torch.cuda.is_available():
        contenders = {  # the default (the in-process pool), and 2 GPU worker processes
            "vidloader nvimgcodec": lambda: _jpeg_vidloader(folder, device, b, n, "nvimgcodec", None),
            "vidloader nvimgcodec, 2 GPU workers":
                lambda: _jpeg_vidloader(folder, device, b, n, "nvimgcodec", 2),
            "nvimgcodec decode alone": lambda: _decode_nvimgcodec(folder, b, n),
            "nvjpeg decode alone": lambda: _decode_nvjpeg(folder, b, n),
            "torchvision decode_jpeg cuda": lambda: _decode_torchvision(folder, b, n),
            "DALI pipeline": lambda: _dali(str(root), b, n),
        }
        contenders = {name: call for name, call in contenders.items() if name in wanted}
        from ._monitor import jpeg_query

        query = jpeg_query()
        contenders = {name: _sampled(call, query) for name, call in contenders.items()}
        results.update(_in_rounds(contenders, args.rounds))
        if HOST_MS > 0:  # their decode runs on the consumer's thread: the work follows it
            for name in ("nvimgcodec decode alone", "nvjpeg decode alone", "torchvision decode_jpeg cuda"):
                if isinstance(results.get(name), dict):
                    results[name]["host_work"] = "after each decode, not beside it"
    return results


def _in_rounds(contenders: dict, rounds: int) -> dict:
    """Each contender ``rounds`` times, in order and then in reverse, alternately (a machine
    that drifts during the call favours no one). One round: each contender's result as it
    comes. Several: its first successful result with ``images_per_s`` the median over the
    rounds and ``rounds`` every rate (or error); and ``ratio_to_dali``, the default loader's
    rate over DALI's within each round where both ran, with its median."""
    runs: dict = {name: [] for name in contenders}
    for r in range(rounds):
        order = list(contenders) if r % 2 == 0 else list(contenders)[::-1]
        for name in order:
            one: dict = {}
            _attempt(one, name if rounds == 1 else f"{name} (round {r + 1})", contenders[name])
            runs[name].append(next(iter(one.values())))
    if rounds == 1:
        return {name: got[0] for name, got in runs.items()}
    out: dict = {name: _summary(got) for name, got in runs.items()}
    ours, dali = runs.get("vidloader nvimgcodec", []), runs.get("DALI pipeline", [])
    ratios = [a["images_per_s"] / d["images_per_s"] for a, d in zip(ours, dali)
              if "images_per_s" in a and "images_per_s" in d]
    if ratios:
        out["ratio_to_dali"] = {"rounds": ratios, "median": statistics.median(ratios)}
        print(f"vidloader / DALI, by round: {', '.join(f'{x:.2f}' for x in ratios)} "
              f"(median {statistics.median(ratios):.2f})", flush=True)
    return out


#: A round's own measurements, kept per round rather than taken from the first.
_SAMPLED = ("gpu_util_pct", "jpeg_util_pct", "gpu_mem_added_bytes")


def _summary(got: list[dict]) -> dict:
    """A contender's rounds: its first successful result's settings (not its image count,
    seconds or sampled GPU figures, which are one round's), the median rate and every
    round's, and the sampled figures by round where there are any."""
    rates = [g["images_per_s"] for g in got if "images_per_s" in g]
    if not rates:
        return got[0]
    first = next(g for g in got if "images_per_s" in g)
    settings = {k: v for k, v in first.items() if k not in ("images", "seconds", *_SAMPLED)}
    out = {**settings, "images_per_s": statistics.median(rates),
           "rounds": [g.get("images_per_s", g.get("error")) for g in got]}
    if any(key in g for g in got for key in _SAMPLED):
        out["sampled_rounds"] = [{key: g.get(key) for key in _SAMPLED} for g in got]
    return out


def _resize(args, data: Path, device: str) -> dict:
    from ._images_resize import run_resize

    return run_resize(args, device)


def run(args) -> int:
    """Run the workloads; print a line per contender; write JSON under ``--out``."""
    import torch

    from .._utils._sysinfo import describe_machine

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    data = Path(args.data_dir or Path.home() / ".cache" / "vidloader" / "bench-images")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for workload in args.workload.split(","):
        print(f"== {workload} (device {device})")
        results = {"cifar": _cifar, "jpeg": _jpeg, "resize": _resize}[workload](args, data, device)
        report = {"workload": workload, "device": device, "machine": describe_machine(),
                  "args": {k: v for k, v in vars(args).items() if k != "func"}, "results": results}
        (out / f"images-{workload}.json").write_text(json.dumps(report, indent=1, default=str))
    return 0

"""The GPU JPEG loader under its settings, in one process (issue 15): decode lanes, region
decoding (only each crop window), nvImageCodec's backends and hardware share, each on the
image bench's JPEG workload (224² random resized crop + flip + normalize, batch 256), then
DALI's whole pipeline and nvImageCodec decode alone on the same files for reference.

Usage (on the device): ``python3 benchmarks/diag/jpeg_loader_ab.py [images] [batches]``;
prints a line per variant and writes ``$OUT/jpeg_loader_ab.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from vidloader.bench import _images as bench
from vidloader.images import ImageFolder, _nvimgcodec
from vidloader.images._synthetic import write_image_folder
from vidloader.pipeline import _image_decode

HW = ("HW_GPU_ONLY", "GPU_ONLY", "HYBRID_CPU_GPU", "CPU_ONLY")
VARIANTS = {  # label: (lanes, region decoding, backends, hardware share)
    "1 lane, whole images": (1, False, HW, 1.0),
    "1 lane, regions": (1, True, HW, 1.0),
    "2 lanes, whole images": (2, False, HW, 1.0),
    "2 lanes, regions": (2, True, HW, 1.0),
    "3 lanes, whole images": (3, False, HW, 1.0),
    "3 lanes, regions": (3, True, HW, 1.0),
    "4 lanes, whole images": (4, False, HW, 1.0),
    "4 lanes, regions": (4, True, HW, 1.0),
    "2 lanes, regions, hw 0.7 + cuda": (2, True, ("HW_GPU_ONLY", "GPU_ONLY"), 0.7),
    "3 lanes, regions, hw 0.7 + cuda": (3, True, ("HW_GPU_ONLY", "GPU_ONLY"), 0.7),
    "1 lane, whole images, again": (1, False, HW, 1.0),
}


def _session25_switches(results: dict, folder) -> None:
    if os.environ.get("AB_PACKED") == "0":  # batches decoded as a list of images (session 24)
        _unpack()
        results["packed_decode"] = False
    if os.environ.get("AB_PREFETCH"):  # the loader's prefetch (default 2)
        from vidloader.pipeline import ImageLoader

        ImageLoader.__init__.__kwdefaults__["prefetch"] = int(os.environ["AB_PREFETCH"])
        results["prefetch"] = int(os.environ["AB_PREFETCH"])
    if os.environ.get("AB_CACHED") == "1":  # lanes given every file's bytes from memory
        _image_decode.READER_PROCESSES = 0  # (the readers would hand them slab views instead)
        _cached_bytes(results, folder)
    if os.environ.get("AB_READ_AHEAD"):  # GPU workers read their next task's files ahead (1/0)
        from vidloader.pipeline import _image_gpu_workers

        # read by each pool when it is made
        _image_gpu_workers.WORKERS_READ_AHEAD = os.environ["AB_READ_AHEAD"] == "1"
        results["workers_read_ahead"] = _image_gpu_workers.WORKERS_READ_AHEAD
    if os.environ.get("AB_READERS"):  # reader processes for the in-process lanes
        _image_decode.READER_PROCESSES = int(os.environ["AB_READERS"])
        results["reader_processes"] = _image_decode.READER_PROCESSES
    if os.environ.get("AB_OPTIONS"):  # nvImageCodec's decoder options (session 26)
        _nvimgcodec.DECODER_OPTIONS = os.environ["AB_OPTIONS"]
        results["decoder_options"] = _nvimgcodec.DECODER_OPTIONS
    if os.environ.get("AB_LANE_FLAGS"):  # each lane's decoder its own nvJPEG handle (session 26)
        _own_handles(os.environ["AB_LANE_FLAGS"].split(","))
        results["lane_nvjpeg_flags"] = os.environ["AB_LANE_FLAGS"]
    if os.environ.get("AB_ALIGN"):  # each packed image's first byte aligned (session 27)
        from vidloader.images import _packed

        _packed.ALIGN_BYTES = int(os.environ["AB_ALIGN"])
        results["packed_align_bytes"] = _packed.ALIGN_BYTES
    if os.environ.get("AB_ENGINE"):  # the packed JPEGs' engine, nvjpeg or nvimgcodec (session 28)
        _nvimgcodec.PACKED_JPEG_ENGINE = os.environ["AB_ENGINE"]
        results["packed_jpeg_engine"] = _nvimgcodec.PACKED_JPEG_ENGINE
    _session29_switches(results)
    if os.environ.get("AB_BYTES") == "1":  # lanes given bytes from the reader threads
        _image_decode.BatchDecodePool._opens_files = property(lambda self: False)
        results["lanes_read_bytes"] = True


def _session29_switches(results: dict) -> None:
    if os.environ.get("AB_READERS_WALK"):  # the readers walk the JPEG headers, 1/0
        _image_decode.READERS_WALK_HEADERS = os.environ["AB_READERS_WALK"] == "1"
        results["readers_walk_headers"] = _image_decode.READERS_WALK_HEADERS
    if os.environ.get("AB_RESIZE"):  # CUDA's crop/resize: triton or matmul
        from vidloader.images import _batched
        _batched.CUDA_RESIZE = os.environ["AB_RESIZE"]
        results["cuda_resize"] = os.environ["AB_RESIZE"]
    session30_switches(results)


def session30_switches(results: dict) -> None:
    """Also read by ``jpeg_loader_timeline.py``."""
    if os.environ.get("AB_PIN"):  # the readers' slabs page-locked for CUDA, 1/0
        _image_decode.PIN_READ_SLABS = os.environ["AB_PIN"] == "1"
        results["pin_read_slabs"] = _image_decode.PIN_READ_SLABS
    if os.environ.get("AB_PREALLOC"):  # nvJPEG's hardware decoder set up for N images (0: not)
        from vidloader.images import _nvjpeg

        _nvjpeg.PREALLOCATE_IMAGES = int(os.environ["AB_PREALLOC"])
        results["nvjpeg_preallocate_images"] = _nvjpeg.PREALLOCATE_IMAGES
    if os.environ.get("AB_SPLIT"):  # each batch's reads shared out among the readers, 1/0
        from vidloader.pipeline import _image_readers

        _image_readers.SPLIT_READS = os.environ["AB_SPLIT"] == "1"
        results["split_reads"] = _image_readers.SPLIT_READS
    if os.environ.get("AB_TAKE_ANY"):  # any free lane takes the next batch, 1/0
        _image_decode.LANES_TAKE_ANY = os.environ["AB_TAKE_ANY"] == "1"
        results["lanes_take_any"] = _image_decode.LANES_TAKE_ANY


def _own_handles(flags: list[str]) -> None:
    """The in-process pool's decoders made in turn with nvJPEG flags ``flags`` (extra flags
    on the hardware decoder): nvImageCodec shares one handle between decoders of the same
    flags, and decoders whose flags differ get their own."""
    real = _nvimgcodec.NvImageCodecDecoder
    made = []

    class OwnHandle(real):
        def __init__(self, device, **options):
            if options.get("options") is None:
                flag = flags[len(made) % len(flags)]
                options["options"] = f"nvjpeg_hw_decoder:extra_flags={flag}" if flag != "0" else ""
                made.append(flag)
            super().__init__(device, **options)
    _nvimgcodec.NvImageCodecDecoder = OwnHandle


def _cached_bytes(results: dict, folder) -> None:
    """The in-process pool's lanes decode bytes held in memory instead of paths: what the
    pool would do if files reached it already read, for free (an upper bound for readers in
    other processes). Every file of ``folder`` is read here, before any loader starts."""
    paths = [folder.path(i) for i in range(len(folder))]
    cache = {path: Path(path).read_bytes() for path in paths}
    real = _nvimgcodec.NvImageCodecDecoder.decode_packed

    def decode_packed(self, sources, sizes, **options):
        if sources and isinstance(sources[0], str):
            sources = [cache[path] for path in sources]
        return real(self, sources, sizes, **options)
    _nvimgcodec.NvImageCodecDecoder.decode_packed = decode_packed
    results["lanes_given_cached_bytes"] = True


def _unpack() -> None:
    """Decoders that do not decode into one buffer, in this process's pool and in the
    GPU workers (whose decoders are made by a picklable partial)."""
    import functools

    from vidloader.pipeline import _image_gpu_workers, _image_loader

    _image_decode.PACKED_DECODE = False
    make = functools.partial(_nvimgcodec.NvImageCodecDecoder, packed=False)
    default = _image_loader.make_image_pool

    def make_pool(config, num_slots, decoder=None):
        if config.backend == "nvimgcodec" and config.num_workers > 0:
            return _image_gpu_workers.GpuImageProcessPool(config, num_slots, make_decoder=make)
        return default(config, num_slots, decoder)
    _image_loader.make_image_pool = make_pool


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    copies = int(os.environ.get("AB_COPIES", "1"))
    root = write_image_folder(f"/tmp/jpeg-ab-x{copies}", num_classes=10, per_class=count // 10,
                              copies=copies)
    folder = ImageFolder(root, progress=False)
    results: dict = {"files": len(folder), "copies": copies, "batch": 256, "batches": batches}
    only = os.environ.get("AB_ONLY")
    if os.environ.get("AB_TORCH_THREADS"):  # torch's intra-op threads in this process
        import torch

        torch.set_num_threads(int(os.environ["AB_TORCH_THREADS"]))
        results["torch_threads"] = torch.get_num_threads()
    if os.environ.get("AB_NV_THREADS"):  # each nvImageCodec decoder's CPU threads
        _nvimgcodec.CPU_THREADS = int(os.environ["AB_NV_THREADS"])
        results["nvimgcodec_cpu_threads"] = _nvimgcodec.CPU_THREADS
    if os.environ.get("AB_DECODE_PRIORITY"):  # the decode lanes' CUDA stream priority
        _image_decode.DECODE_STREAM_PRIORITY = int(os.environ["AB_DECODE_PRIORITY"])
        results["decode_stream_priority"] = _image_decode.DECODE_STREAM_PRIORITY
    if os.environ.get("AB_PHASED"):  # lanes take the GIL once a file (1) or as before (0)
        _image_decode.PHASED_DECODE = os.environ["AB_PHASED"] == "1"
        results["phased_decode"] = _image_decode.PHASED_DECODE
    _session25_switches(results, folder)
    workers = int(os.environ.get("AB_WORKERS", "0"))  # 0: the in-process pool
    results["num_workers"] = workers
    if os.environ.get("AB_SWITCH"):  # the GIL's switch interval (Python's default 5 ms)
        sys.setswitchinterval(float(os.environ["AB_SWITCH"]))
        results["switch_interval_s"] = sys.getswitchinterval()
    for label, (lanes, regions, backends, share) in VARIANTS.items():
        if only and only not in label:
            continue
        _image_decode.NVIMGCODEC_LANES, _image_decode.ROI_DECODE = lanes, regions
        _nvimgcodec.BACKENDS, _nvimgcodec.DEFAULT_HW_LOAD = backends, share
        sampler = None
        if os.environ.get("AB_PROFILE") == label:  # where each thread spends this variant
            from vidloader.bench._stacks import StackSampler

            sampler = StackSampler(interval=0.002).start()
            sampler.phase = "run"
        bench._attempt(results, label,
                       lambda: bench._jpeg_vidloader(folder, "cuda", 256, batches, "nvimgcodec", workers))
        if sampler is not None:
            sampler.stop()
            results[f"{label} profile"] = sampler.summary(top=10)
            print(json.dumps(results[f"{label} profile"], indent=1), flush=True)
    _nvimgcodec.BACKENDS, _nvimgcodec.DEFAULT_HW_LOAD = HW, 1.0
    if os.environ.get("AB_REFERENCES", "1") == "1":  # 0: the loader's variants only
        bench._attempt(results, "nvimgcodec decode alone",
                       lambda: bench._decode_nvimgcodec(folder, 256, batches))
        bench._attempt(results, "DALI pipeline", lambda: bench._dali(str(root), 256, batches))
    out = Path(os.environ.get("OUT", ".")) / "jpeg_loader_ab.json"
    out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``vidloader bench sweep``: VideoLoader(backend="nvdec") settings on one GPU, beside the raw
NVDEC ceiling.

Runs on the GPU machine (device tool) over the bench's W1 dataset at ``--scale`` and prints one
JSON line per configuration: frames/s, decoded frames per delivered frame, NVDEC and GPU
utilisation (``nvidia-smi``, sampled every 200 ms). It chooses defaults (decoder threads,
frame cache, non-reference skipping, ``nvdec_options["units_decoding"]``: units queued on the
decoders at once); the figures we publish come from ``vidloader bench run``.

Usage: ``vidloader bench sweep --scale gpu-quick --out sweep.json``
"""

from __future__ import annotations

import json
import queue
import threading
import time
import traceback
from pathlib import Path

import torch

from ..errors import ConfigError
from ..index import VideoIndex
from ..pipeline import VideoLoader
from ..processing import Process
from ..sampling import GopShuffle, RandomFrames, SequentialFrames
from ._datasets import load_index, prepare_dataset
from ._monitor import GpuSampler

SAMPLERS = {"sequential": SequentialFrames, "random": RandomFrames, "relaxed": GopShuffle}

#: (sampler, nvdec_decoders, nvdec_options) per configuration (``--configs`` replaces them).
CONFIGS = [
    ("sequential", 16, {}),
    ("random", 16, {}),
    ("random", 16, {"skip_nonref": False}),
    ("relaxed", 16, {}),
    ("sequential", 8, {}),
    ("random", 8, {}),
]

#: Share of ``--batches`` / ``--warmup`` the random configurations run (they are slow).
RANDOM_SHARE = 0.4


def ceiling(paths: list[str], threads: int, seconds: float) -> dict:
    """Raw PyNvVideoCodec demuxer + decoder on ``threads`` threads (as the bench's
    ``pynvc-threads`` peer), frames decoded per second over about ``seconds``."""
    from ._peers_gpu import PynvcThreadsPeer

    peer = PynvcThreadsPeer()
    peer.check()
    counts: queue.Queue = queue.Queue()
    stop = threading.Event()
    workers = [threading.Thread(target=peer._work, args=(paths[k::threads] or paths, counts, stop),
                                daemon=True) for k in range(threads)]
    gpu = GpuSampler()
    for w in workers:
        w.start()
    time.sleep(2.0)  # decoders created, pipeline full
    while not counts.empty():
        counts.get()
    t0, frames = time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        got = counts.get(timeout=60)
        if isinstance(got, BaseException):
            raise got
        frames += got
    t1 = time.monotonic()
    stop.set()
    for w in workers:
        w.join(timeout=30)
    gpu.stop()
    return {"fps": frames / (t1 - t0), "frames": frames, "threads": threads, **gpu.summary(t0, t1)}


def _endless(loader):
    """The loader's batches, epoch after epoch (a short epoch is no end of the run)."""
    while True:
        yield from loader


def _make_loader(index, sampler_name: str, decoders: int, options: dict, workers: int) -> VideoLoader:
    return VideoLoader(
        index, sampler=SAMPLERS[sampler_name](), batch_size=128,
        processing=Process(size=(224, 224)), backend="nvdec", num_workers=workers,
        nvdec_decoders=decoders, nvdec_options=options, drop_last=True, persistent_workers=True,
    )


def run_loader(index, sampler_name: str, decoders: int, options: dict, *, workers: int,
               batches: int, warmup: int, profile: bool = False) -> dict:
    sampler = None
    if profile:
        from ._stacks import StackSampler

        sampler = StackSampler().start()
    created = time.monotonic()
    loader = _make_loader(index, sampler_name, decoders, options, workers)
    gpu = GpuSampler()
    try:
        measured = _measure(loader, created, sampler, warmup=warmup, batches=batches)
    finally:
        loader.shutdown()
        gpu.stop()
        if sampler is not None:
            sampler.stop()
    t0, t1 = measured.pop("t0"), measured.pop("t1")
    return {
        **measured, "lookahead": loader.lookahead, **gpu.summary(t0, t1),
        **({"stacks": sampler.summary()} if profile else {}),
    }


def _measure(loader, created: float, sampler, *, warmup: int, batches: int) -> dict:
    """Frames/s over ``batches`` batches after ``warmup``, and the decode counters' change."""
    batches_of = _endless(loader)
    next(batches_of)
    first_batch_s = time.monotonic() - created
    if sampler is not None:
        sampler.phase = "warmup"
    for _ in range(warmup - 1):
        next(batches_of)
    torch.cuda.synchronize()
    if sampler is not None:
        sampler.phase = "steady"
    before = dict(loader.decode_stats.__dict__)
    t0, n = time.monotonic(), 0
    for _ in range(batches):
        n += next(batches_of)["frames"].shape[0]
    torch.cuda.synchronize()
    t1 = time.monotonic()
    if sampler is not None:
        sampler.phase = "shutdown"
    after = dict(loader.decode_stats.__dict__)
    delta = {k: after[k] - before[k] for k in after if isinstance(after[k], int)}
    return {
        "fps": n / (t1 - t0), "frames": n, "seconds": t1 - t0, "t0": t0, "t1": t1,
        "decoded_per_delivered": delta.get("decoded", 0) / max(1, delta.get("delivered", 1)),
        "first_batch_s": first_batch_s, "stats": delta,
    }


def parse_configs(text: str) -> list[tuple[str, int, dict]]:
    """``sequential:24,random:16:skip_nonref=0:units_decoding=2`` -> CONFIGS entries.

    Raises:
        ConfigError: an unknown sampler name.
    """
    configs = []
    for item in filter(None, text.split(",")):
        name, decoders, *opts = item.split(":")
        if name not in SAMPLERS:
            raise ConfigError(f"--configs: unknown sampler {name!r} in {item!r}; choose from "
                              f"{', '.join(sorted(SAMPLERS))}")
        configs.append((name, int(decoders), {k: int(v) for k, v in (o.split("=") for o in opts)}))
    return configs


def run(args) -> int:
    """Sweep the configurations (options: ``vidloader bench sweep --help``)."""
    configs = parse_configs(args.configs) if args.configs else CONFIGS
    dataset = prepare_dataset("W1", args.scale, data_dir=args.data_dir)
    index = load_index(dataset)
    if args.repeat > 1:
        index = VideoIndex(list(index) * args.repeat)
    results: dict = {"scale": args.scale, "videos": len(index), "workers": args.workers,
                     "gpu": torch.cuda.get_device_name(0), "runs": []}
    only = set(filter(None, args.only.split(",")))

    def record(name: str, fn) -> None:
        t0 = time.monotonic()
        try:
            res = fn()
        except Exception:
            res = {"error": traceback.format_exc()[-2000:]}
        res = {"config": name, "wall_s": round(time.monotonic() - t0, 1), **res}
        results["runs"].append(res)
        print(json.dumps(res, default=float), flush=True)
        Path(args.out).write_text(json.dumps(results, indent=1, default=float))

    paths = [r.path for r in index]
    if not args.no_ceiling:
        record("ceiling pynvc-threads x16", lambda: ceiling(paths, 16, args.ceiling_seconds))
    for sampler_name, decoders, options in configs:
        if only and sampler_name not in only:
            continue
        name = f"{sampler_name} d{decoders} {options or ''}".strip()
        scale = RANDOM_SHARE if sampler_name == "random" else 1.0  # ~10x slower per frame
        # The warm-up is never shortened: with 4 units decoding ahead, a short one leaves work
        # done before t0 inside the timed window (run 2 timed 12,000 decoded frames/s,
        # 4x the NVDEC ceiling, with random frames after 4 warm-up batches).
        batches, warmup = max(4, int(args.batches * scale)), args.warmup
        record(name, lambda s=sampler_name, d=decoders, o=options, b=batches, w=warmup: run_loader(
            index, s, d, o, workers=args.workers, batches=b, warmup=w, profile=args.profile))
    return 0

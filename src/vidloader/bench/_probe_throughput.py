"""Part 2 of ``vidloader bench probe``: NVDEC throughput, raw PyNvVideoCodec against vidloader's
NVDEC executor, with ``nvidia-smi``'s decoder utilisation sampled alongside.

(a) raw ``CreateDemuxer`` + ``CreateDecoder``, 1 and 8 threads, a decoder per video or one
reused; (b) the executor decoding every frame in order; (c) the executor on batches of 128
random (video, frame) pairs; (d) separation: fork workers demux, this process decodes.
"""

from __future__ import annotations

import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from ..decoding.nvdec._annexb import ContainerCache, demux_gops
from ..index import probe_video
from ..planning import plan_tasks_for_frames
from ..synthetic import VideoSpec, make_dataset

#: Where output tensors live ("cpu" only for a dry run against a fake PyNvVideoCodec).
DEVICE = "cuda"


class SmiSampler:
    """``nvidia-smi`` decoder/GPU utilisation sampled every 100 ms in the background."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int, int]] = []
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=utilization.decoder,utilization.gpu", "--format=csv,noheader,nounits", "-lms", "100"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                dec, gpu = (int(x) for x in line.strip().split(","))
            except ValueError:
                continue
            self.samples.append((time.perf_counter(), dec, gpu))

    def window(self, t0: float, t1: float) -> dict:
        s = [(d, g) for t, d, g in self.samples if t0 <= t <= t1]
        if not s:
            return {"samples": 0}
        d = np.array(s)
        return {"samples": len(s), "decoder_mean": float(d[:, 0].mean()), "decoder_max": int(d[:, 0].max()),
                "gpu_mean": float(d[:, 1].mean())}

    def close(self) -> None:
        self.proc.terminate()


def _timed(smi: SmiSampler, fn) -> dict:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    frames = fn()
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    return {"frames": frames, "seconds": round(t1 - t0, 3), "fps": round(frames / (t1 - t0), 1),
            "nvidia_smi": smi.window(t0, t1)}


def _raw_video(nvc, path: str) -> int:
    stream = torch.cuda.Stream()
    demux = nvc.CreateDemuxer(path)
    dec = nvc.CreateDecoder(gpuid=0, codec=demux.GetNvCodecId(), cudacontext=0, cudastream=stream.cuda_stream,
                            usedevicememory=True, maxwidth=0, maxheight=0,
                            outputColorType=nvc.OutputColorType.NATIVE, latency=nvc.DisplayDecodeLatencyType.NATIVE)
    n = 0
    for pkt in demux:
        n += len(dec.Decode(pkt))
    eos = nvc.PacketData()
    eos.bsl, eos.bsl_data = 0, 0
    n += len(dec.Decode(eos))
    stream.synchronize()
    return n


def _raw_reused(nvc, paths: list[str]) -> int:
    """One decoder for every video: flushed after each, as the executor does."""
    stream = torch.cuda.Stream()
    dec, n = None, 0
    eos = nvc.PacketData()
    eos.bsl, eos.bsl_data = 0, 0
    for path in paths:
        demux = nvc.CreateDemuxer(path)
        if dec is None:
            dec = nvc.CreateDecoder(gpuid=0, codec=demux.GetNvCodecId(), cudacontext=0, cudastream=stream.cuda_stream,
                                    usedevicememory=True, maxwidth=1920, maxheight=1080,
                                    outputColorType=nvc.OutputColorType.NATIVE,
                                    latency=nvc.DisplayDecodeLatencyType.NATIVE)
        for pkt in demux:
            n += len(dec.Decode(pkt))
        n += len(dec.Decode(eos))
    stream.synchronize()
    return n


def throughput(tmp: Path, n_videos: int, n_frames: int, batches: int) -> dict:
    """Part 2 over ``n_videos`` synthetic 1080p videos of ``n_frames`` frames (written under
    ``tmp``): raw PyNvVideoCodec, then the executor sequential, random and in separation."""
    import PyNvVideoCodec as nvc

    from ..decoding.nvdec._executor import NvdecExecutor

    t0 = time.perf_counter()
    specs = [VideoSpec(codec="h264", width=1920, height=1080, num_frames=n_frames, gop=30, bframes=2,
                       preset="superfast", bitrate=8_000_000, seed=i) for i in range(n_videos)]
    paths = [str(p) for p in make_dataset(tmp / "bench", specs, num_workers=16)]
    records = [probe_video(p) for p in paths]
    res: dict = {"videos": n_videos, "frames_per_video": n_frames, "size": "1920x1080", "gop": 30, "bframes": 2,
                 "generate_seconds": round(time.perf_counter() - t0, 1)}
    total = sum(r.num_frames for r in records)
    smi = SmiSampler()
    try:
        _raw_video(nvc, paths[0])  # warm-up
        t = time.perf_counter()
        _raw_video(nvc, paths[0])
        res["raw_one_video_seconds_incl_create"] = round(time.perf_counter() - t, 3)
        res["a_raw_1_thread"] = _timed(smi, lambda: sum(_raw_video(nvc, p) for p in paths))
        with ThreadPoolExecutor(8) as pool:
            res["a_raw_8_threads"] = _timed(smi, lambda: sum(pool.map(lambda p: _raw_video(nvc, p), paths)))
        res["a_raw_reused_decoder_1_thread"] = _timed(smi, lambda: _raw_reused(nvc, paths))
        with ThreadPoolExecutor(8) as pool:
            res["a_raw_reused_decoder_8_threads"] = _timed(
                smi, lambda: sum(pool.map(lambda k: _raw_reused(nvc, paths[k::8]), range(8))))
        res.update(_bench_executor(smi, NvdecExecutor, records, total, batches))
    finally:
        smi.close()
    return res


def _bench_executor(smi, NvdecExecutor, records, total: int, batches: int) -> dict:
    res = {}
    all_tasks = [plan_tasks_for_frames(k, r, np.arange(r.num_frames)) for k, r in enumerate(records)]
    max_w = max(r.width for r in records)
    max_h = max(r.height for r in records)
    for nd in (1, 4):
        ex = NvdecExecutor(num_decoders=nd, max_width=max_w, max_height=max_h, frame_cache_bytes=0, packet_cache_bytes=0)
        ex.decode_batch(all_tasks[:1], lambda *a: None)  # warm-up: decoders, streams
        res[f"b_executor_sequential_{nd}_decoders"] = _timed(smi, lambda: _decode_all(ex, all_tasks))
        rgb = torch.empty(total, 224, 224, 3, dtype=torch.uint8, device=DEVICE)
        res[f"b_executor_sequential_{nd}_decoders_rgb224"] = _timed(smi, lambda: _decode_all(ex, all_tasks, rgb))
        ex.close()
    rng = np.random.default_rng(0)
    plans = [_random_batch(rng, records) for _ in range(batches)]
    for label, cache in (("no_container_cache", None), ("container_cache", ContainerCache(64))):
        t = time.perf_counter()
        n = 0
        for tasks in plans:
            for task in tasks:
                demux_gops(task.record, task.gops, container_cache=cache)
                n += len(task.frames)
        res[f"c_cpu_demux_only_1_thread_{label}_fps"] = round(n / (time.perf_counter() - t), 1)
    for nd in (1, 4, 8):
        ex = NvdecExecutor(num_decoders=nd, max_width=max_w, max_height=max_h, frame_cache_bytes=0, packet_cache_bytes=0)
        ex.decode_batch(plans[0][:2], lambda *a: None)
        out = torch.empty(128, 224, 224, 3, dtype=torch.uint8, device=DEVICE)
        before = ex.stats.decoded
        r = _timed(smi, lambda: _decode_random(ex, plans, out))
        r["decoded_per_delivered"] = round((ex.stats.decoded - before) / r["frames"], 2)
        res[f"c_executor_random128_{nd}_decoders_rgb224"] = r
        ex.close()
    sep_plans = [_random_batch(rng, records) for _ in range(2 * batches + 1)]
    for nd in (4, 8):
        ex = NvdecExecutor(num_decoders=nd, max_width=max_w, max_height=max_h, frame_cache_bytes=0, packet_cache_bytes=0)
        res[f"d_separation_random128_8_fork_workers_{nd}_decoders_rgb224"] = _separation(smi, ex, sep_plans)
        ex.close()
    return res


_WORKER_CONTAINERS: list = []


class _BatchDemux(torch.utils.data.Dataset):
    """Separation mode's worker side: item k = the bundles of batch plan k (CPU only)."""

    def __init__(self, plans) -> None:
        self.plans = plans

    def __len__(self) -> int:
        return len(self.plans)

    def __getitem__(self, k: int):
        if not _WORKER_CONTAINERS:
            _WORKER_CONTAINERS.append(ContainerCache(64))
        return k, [demux_gops(t.record, t.gops, container_cache=_WORKER_CONTAINERS[0]) for t in self.plans[k]]


def _separation(smi, ex, plans) -> dict:
    """DataLoader workers (fork) demux each random batch; this process decodes the bundles."""
    loader = torch.utils.data.DataLoader(_BatchDemux(plans), batch_size=None, num_workers=8,
                                         multiprocessing_context="fork", prefetch_factor=2)
    out = torch.empty(128, 224, 224, 3, dtype=torch.uint8, device=DEVICE)
    it = iter(loader)
    _decode_one(ex, plans, *next(it), out)  # the first batch pays for worker start-up

    def rest() -> int:
        return sum(_decode_one(ex, plans, k, bundles, out) for k, bundles in it)

    r = _timed(smi, rest)
    r["batches"] = len(plans) - 1
    return r


def _decode_one(ex, plans, k, bundles, out) -> int:
    slot = [0]

    def sink(pos, i, frame):
        frame.to_rgb((224, 224), out=out[slot[0] % 128])
        slot[0] += 1

    ex.decode_batch(plans[k], sink, bundles=bundles)
    return slot[0]


def _decode_all(ex, tasks, rgb=None) -> int:
    count = [0]

    def sink(pos, i, frame):
        if rgb is not None:
            frame.to_rgb((224, 224), out=rgb[count[0]])
        count[0] += 1

    ex.decode_batch(tasks, sink)
    return count[0]


def _random_batch(rng, records) -> list:
    vids = rng.integers(0, len(records), 128)
    frames = [int(rng.integers(0, records[v].num_frames)) for v in vids]
    by_video: dict[int, list[int]] = {}
    for v, f in zip(vids.tolist(), frames):
        by_video.setdefault(v, []).append(f)
    return [plan_tasks_for_frames(v, records[v], fs) for v, fs in sorted(by_video.items())]


def _decode_random(ex, plans, out) -> int:
    n = 0
    for tasks in plans:
        slot = [0]

        def sink(pos, i, frame):
            frame.to_rgb((224, 224), out=out[slot[0] % 128])
            slot[0] += 1

        ex.decode_batch(tasks, sink)
        n += slot[0]
    return n

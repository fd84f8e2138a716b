"""Probe PyNvVideoCodec's behaviour and measure NVDEC throughput, in one run on a GPU machine.

Part 1 (facts): what the low-level API does with hand-built packets — whether ``getPTS()``
returns the pts we set, output latency per ``Decode`` call, the DLPack shape/strides of NV12
frames, whether a flushed decoder accepts a new GOP, whether ``setReconfigParams`` is needed
for a smaller video, and whether frame surfaces are recycled by the next ``Decode``.

Part 2 (throughput) over ~16 synthetic 1080p H.264 videos (GOP 30, B-frames):
(a) raw PyNvVideoCodec ``CreateDemuxer`` + ``CreateDecoder``, 1 and 8 threads;
(b) ``NvdecExecutor`` sequential decode; (c) ``NvdecExecutor`` random frames, batches of 128
random (video, frame) pairs. ``nvidia-smi`` decoder utilisation is sampled alongside.

Usage: ``python benchmarks/nvdec_probe.py --out probe.json [--videos 16 --frames 75]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from vidloader.decoding.nvdec._annexb import ContainerCache, demux_gops
from vidloader.decoding._base import GopRequest
from vidloader.decoding.nvdec._decoder import current_cuda_context
from vidloader.index._probe import probe_video
from vidloader.planning import plan_tasks_for_frames
from vidloader.processing._nv12 import i420_to_nv12
from vidloader.synthetic import VideoSpec, make_dataset

RESULTS: dict = {}
CREATE_NOTES: dict = {}
#: Where output tensors live ("cpu" only for a dry run against a fake PyNvVideoCodec).
DEVICE = "cuda"


def _save(path: Path) -> None:
    path.write_text(json.dumps(RESULTS, indent=2, default=str))


def _section(name: str, out: Path):
    """Decorator: run a probe section, store its result or its traceback, save the JSON."""
    def wrap(fn):
        def run(*a, **k):
            t0 = time.perf_counter()
            try:
                RESULTS[name] = fn(*a, **k)
            except Exception:
                RESULTS[name] = {"error": traceback.format_exc()}
            print(f"== {name} ({time.perf_counter() - t0:.1f} s): {json.dumps(RESULTS[name], default=str)[:3000]}", flush=True)
            _save(out)
        return run
    return wrap


# -- part 1: facts ------------------------------------------------------------------------

def _ref_nv12(path) -> list[np.ndarray]:
    import av

    with av.open(str(path)) as c:
        return [i420_to_nv12(f.to_ndarray(format="yuv420p")) for f in c.decode(video=0)]


class _Raw:
    """A bare low-level decoder on its own stream, to poke at."""

    def __init__(self, nvc, codec: str, max_w=0, max_h=0):
        self.nvc = nvc
        self.stream = torch.cuda.Stream()
        enum = getattr(nvc.cudaVideoCodec, {"h264": "H264", "hevc": "HEVC"}[codec])
        kwargs = dict(gpuid=0, codec=enum, cudacontext=0, cudastream=self.stream.cuda_stream,
                      usedevicememory=True, maxwidth=max_w, maxheight=max_h,
                      outputColorType=nvc.OutputColorType.NATIVE, latency=nvc.DisplayDecodeLatencyType.NATIVE)
        try:
            self.dec = nvc.CreateDecoder(**kwargs)
            CREATE_NOTES.setdefault("cudacontext=0 with a torch stream", "ok")
        except Exception as exc:
            CREATE_NOTES["cudacontext=0 with a torch stream"] = repr(exc)[:300]
            self.dec = nvc.CreateDecoder(**{**kwargs, "cudacontext": current_cuda_context()})

    def feed(self, bundle, g=0, *, flags=0, pts="real", keep=None):
        """Decode GOP g; return per-call output counts and per-frame (getPTS, nv12 copy)."""
        nvc, per_call, frames = self.nvc, [], []
        r = bundle.packet_range(g)
        ranks = np.argsort(np.argsort(bundle.pts[r.start:r.stop])) + 1
        with torch.cuda.stream(self.stream):
            for j, i in enumerate(r):
                pkt = nvc.PacketData()
                pkt.bsl_data = bundle.payload.ctypes.data + int(bundle.offsets[i])
                pkt.bsl = int(bundle.sizes[i])
                pkt.pts = {"real": int(bundle.pts[i]), "rank": int(ranks[j]), "none": 0}[pts]
                pkt.decode_flag = flags
                out = self.dec.Decode(pkt)
                per_call.append(len(out))
                frames += [self._take(f, keep) for f in out]
            eos = nvc.PacketData()
            eos.bsl, eos.bsl_data = 0, 0
            out = self.dec.Decode(eos)
            per_call.append(len(out))
            frames += [self._take(f, keep) for f in out]
        torch.cuda.synchronize()
        return per_call, frames

    def _take(self, frame, keep):
        t = torch.from_dlpack(frame)
        if keep is not None:
            keep.append((frame, t, t.clone()))
        return int(frame.getPTS()), t.clone().cpu().numpy(), (tuple(t.shape), tuple(t.stride()), str(t.device), t.data_ptr())


def _exact(frames, ref, record, key, pts_list=None) -> bool:
    ok = []
    for j, (_, nv12, _) in enumerate(frames):
        i = key + j
        ok.append(nv12.shape == ref[i].shape and np.array_equal(nv12, ref[i]))
    return all(ok) and len(ok) > 0


def facts(tmp: Path) -> dict:
    import PyNvVideoCodec as nvc

    specs = {
        "h264": VideoSpec(codec="h264", width=320, height=180, num_frames=48, gop=12, bframes=3, seed=1),
        "hevc": VideoSpec(codec="hevc", width=320, height=180, num_frames=48, gop=12, bframes=3, seed=2),
        "small": VideoSpec(codec="h264", width=192, height=108, num_frames=24, gop=12, bframes=3, seed=3),
    }
    paths = dict(zip(specs, make_dataset(tmp / "facts", list(specs.values()), names=[f"{n}.mp4" for n in specs])))
    rec = {n: probe_video(p) for n, p in paths.items()}
    ref = {n: _ref_nv12(p) for n, p in paths.items()}
    full = {n: demux_gops(r, [GopRequest(12, np.arange(12, 24))]) for n, r in rec.items()}
    res: dict = {"version": getattr(nvc, "__version__", "?")}
    res["caps"] = _caps(nvc)
    raw = _Raw(nvc, "h264", 320, 180)
    per_call, frames = raw.feed(full["h264"], flags=0, pts="real")
    res["flags0_realpts"] = {
        "per_call_outputs": per_call, "getPTS": [f[0] for f in frames],
        "fed_pts_display_order": sorted(full["h264"].pts.tolist()),
        "dlpack": frames[0][2] if frames else None, "exact": _exact(frames, ref["h264"], rec["h264"], 12),
    }
    per_call, frames = raw.feed(full["h264"], flags=2 | 8, pts="rank")
    res["reuse_after_flush_flags10_rank"] = {
        "per_call_outputs": per_call, "getPTS": [f[0] for f in frames],
        "exact": _exact(frames, ref["h264"], rec["h264"], 12),
    }
    for flags in (2, 8):
        per_call, frames = raw.feed(full["h264"], flags=flags, pts="rank")
        res[f"flags{flags}_rank"] = {"per_call_outputs": per_call, "getPTS": [f[0] for f in frames],
                                     "exact": _exact(frames, ref["h264"], rec["h264"], 12)}
    per_call, frames = raw.feed(full["h264"], flags=0, pts="none")
    res["no_pts"] = {"getPTS": [f[0] for f in frames], "exact": _exact(frames, ref["h264"], rec["h264"], 12)}
    res["lifetime"] = _safe(_lifetime, raw, full["h264"])
    res["reconfig"] = _safe(_reconfig, nvc, full, ref, rec)
    res["hevc"] = _safe(_hevc, nvc, full, ref, rec)
    res["frame_object"] = _safe(_frame_object, raw, full["h264"])
    res["stream_order"] = _safe(lambda: _stream_order(_Raw(nvc, "h264", 320, 180), full["h264"], ref["h264"], 12))
    res["create_notes"] = CREATE_NOTES
    res["current_cuda_context_nonzero"] = current_cuda_context() != 0
    return res


def _safe(fn, *args):
    """One probe's result, or its error (so one failure does not hide the other facts)."""
    try:
        return fn(*args)
    except Exception as exc:
        return {"error": repr(exc)[:500]}


def _caps(nvc) -> dict:
    out = {}
    for codec in ("H264", "HEVC"):
        for depth in (8, 10):
            try:
                out[f"{codec}_{depth}"] = dict(nvc.GetDecoderCaps(gpuid=0, codec=getattr(nvc.cudaVideoCodec, codec), bitdepth=depth))
            except Exception as exc:
                out[f"{codec}_{depth}"] = repr(exc)
    return out


def _lifetime(raw: _Raw, bundle) -> dict:
    keep: list = []
    raw.feed(bundle, flags=2 | 8, pts="rank", keep=keep)
    changed = [not torch.equal(t, c) for _, t, c in keep]
    ptrs = [t.data_ptr() for _, t, _ in keep]
    return {"frames": len(keep), "views_changed_after_later_decodes": changed,
            "distinct_data_ptrs": len(set(ptrs)), "data_ptrs_mod": [p % 10**8 for p in ptrs]}


def _reconfig(nvc, full, ref, rec) -> dict:
    out = {}
    raw = _Raw(nvc, "h264", 480, 272)
    _, f1 = raw.feed(full["h264"], flags=10, pts="rank")
    out["big_max_first_320x180"] = _exact(f1, ref["h264"], rec["h264"], 12)
    _, f2 = raw.feed(full["small"], flags=10, pts="rank")
    out["then_192x108_without_setReconfigParams"] = {"exact": _exact(f2, ref["small"], rec["small"], 12),
                                                     "shape": f2[0][2] if f2 else None, "n": len(f2)}
    raw.dec.setReconfigParams(192, 108)
    _, f3 = raw.feed(full["small"], flags=10, pts="rank")
    out["192x108_after_setReconfigParams"] = {"exact": _exact(f3, ref["small"], rec["small"], 12),
                                              "shape": f3[0][2] if f3 else None, "n": len(f3)}
    raw.dec.setReconfigParams(320, 180)
    _, f4 = raw.feed(full["h264"], flags=10, pts="rank")
    out["back_to_320x180"] = {"exact": _exact(f4, ref["h264"], rec["h264"], 12), "shape": f4[0][2] if f4 else None}
    try:
        small_first = _Raw(nvc, "h264", 0, 0)
        small_first.feed(full["small"], flags=10, pts="rank")
        _, f5 = small_first.feed(full["h264"], flags=10, pts="rank")
        out["max0_then_larger"] = {"n": len(f5), "exact": _exact(f5, ref["h264"], rec["h264"], 12)}
    except Exception as exc:
        out["max0_then_larger"] = repr(exc)[:300]
    return out


def _hevc(nvc, full, ref, rec) -> dict:
    raw = _Raw(nvc, "hevc", 320, 180)
    per_call, f = raw.feed(full["hevc"], flags=10, pts="rank")
    per_call2, f2 = raw.feed(full["hevc"], flags=10, pts="rank")
    return {"per_call": per_call, "getPTS": [x[0] for x in f], "exact": _exact(f, ref["hevc"], rec["hevc"], 12),
            "reuse_exact": _exact(f2, ref["hevc"], rec["hevc"], 12)}


def _stream_order(raw: _Raw, bundle, ref, key: int) -> dict:
    """Is the binding's write into a recycled frame buffer ordered after our stream's reads?

    Each frame is read (cloned) on our stream behind a ~20 ms sleep kernel, and the next
    ``Decode`` is called at once, without waiting. If every clone is still exact, the binding
    writes on the stream we passed and ``SYNC_BEFORE_RECYCLE`` can be turned off."""
    if not hasattr(torch.cuda, "_sleep"):
        return {"skipped": "torch.cuda._sleep missing"}
    nvc, copies = raw.nvc, []
    with torch.cuda.stream(raw.stream):
        eos = nvc.PacketData()
        eos.bsl, eos.bsl_data = 0, 0
        packets = []
        for i in bundle.packet_range(0):
            pkt = nvc.PacketData()
            pkt.bsl_data = bundle.payload.ctypes.data + int(bundle.offsets[i])
            pkt.bsl, pkt.pts, pkt.decode_flag = int(bundle.sizes[i]), int(bundle.pts[i]), 10
            packets.append(pkt)
        for pkt in packets + [eos]:
            for f in raw.dec.Decode(pkt):
                t = torch.from_dlpack(f)
                torch.cuda._sleep(30_000_000)
                copies.append(t.clone())
    torch.cuda.synchronize()
    exact = [np.array_equal(c.cpu().numpy(), ref[key + j]) for j, c in enumerate(copies)]
    return {"frames": len(exact), "exact_with_delayed_reads": exact}


def _frame_object(raw: _Raw, bundle) -> dict:
    keep: list = []
    raw.feed(bundle, flags=10, pts="rank", keep=keep)
    frame = keep[0][0]
    info = {}
    for attr in ("shape", "strides", "dtype", "format", "timestamp"):
        try:
            info[attr] = str(getattr(frame, attr))
        except Exception as exc:
            info[attr] = repr(exc)[:200]
    try:
        info["cuda_planes"] = [str(p.__cuda_array_interface__)[:200] for p in frame.cuda()]
    except Exception as exc:
        info["cuda_planes"] = repr(exc)[:200]
    return info


# -- part 2: throughput -------------------------------------------------------------------

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


def bench(tmp: Path, n_videos: int, n_frames: int, batches: int) -> dict:
    import PyNvVideoCodec as nvc

    from vidloader.decoding.nvdec._executor import NvdecExecutor

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("nvdec_probe.json"))
    ap.add_argument("--videos", type=int, default=16)
    ap.add_argument("--frames", type=int, default=75)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--skip-facts", action="store_true")
    args = ap.parse_args()
    RESULTS["device"] = torch.cuda.get_device_name(0)
    with tempfile.TemporaryDirectory() as d:
        if not args.skip_facts:
            _section("facts", args.out)(facts)(Path(d))
        _section("bench", args.out)(bench)(Path(d), args.videos, args.frames, args.batches)


if __name__ == "__main__":
    main()

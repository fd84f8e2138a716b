"""``vidloader bench probe``: PyNvVideoCodec's behaviour and NVDEC throughput, in one run on a
GPU machine.

Part 1 (facts): what the low-level API does with hand-built packets — whether ``getPTS()``
returns the pts we set, output latency per ``Decode`` call, the DLPack shape/strides of NV12
frames, whether a flushed decoder accepts a new GOP, whether ``setReconfigParams`` is needed
for a smaller video, and whether frame surfaces are recycled by the next ``Decode``.

Part 2 (throughput) over ~16 synthetic 1080p H.264 videos (GOP 30, B-frames):
(a) raw PyNvVideoCodec ``CreateDemuxer`` + ``CreateDecoder``, 1 and 8 threads;
(b) ``NvdecExecutor`` sequential decode; (c) ``NvdecExecutor`` random frames, batches of 128
random (video, frame) pairs. ``nvidia-smi`` decoder utilisation is sampled alongside (part 2
is in :mod:`._probe_throughput`).

Usage: ``vidloader bench probe --out probe.json [--videos 16 --frames 75]``
"""

from __future__ import annotations

import json
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch

from ..decoding import GopRequest
from ..decoding.nvdec._annexb import demux_gops
from ..decoding.nvdec._decoder import current_cuda_context
from ..index import probe_video
from ..processing._nv12 import i420_to_nv12
from ..synthetic import VideoSpec, make_dataset
from ._probe_throughput import throughput

RESULTS: dict = {}
CREATE_NOTES: dict = {}


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


def _exact(frames, ref, record, key) -> bool:
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


def run(args) -> int:
    """Probe, saving the JSON to ``args.out`` after each part (options: ``vidloader bench probe
    --help``)."""
    out = Path(args.out)
    RESULTS["device"] = torch.cuda.get_device_name(0)
    with tempfile.TemporaryDirectory() as d:
        if not args.skip_facts:
            _section("facts", out)(facts)(Path(d))
        # "bench": the key of the recorded results (benchmarks/results/nvdec_bench_*.json).
        _section("bench", out)(throughput)(Path(d), args.videos, args.frames, args.batches)
    return 0

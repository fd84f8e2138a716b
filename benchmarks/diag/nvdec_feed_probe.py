"""Why is NVDEC slow on small clips? (issues 13 and 16: W4 clips ran at 555 frames/s on an H100
with NVDEC 11% busy and 1.4 CPU cores busy, against 2,069 for the CPU backend.)

Decodes the GOPs that random 16-frame clips (stride 2) of the bench's W4 dataset need, on N
threads, each with its own :class:`DecoderSlot`, in several ways, and reports for each the
clips/s, packets/s, process CPU seconds per packet and where each thread's time went (the
binding's ``Decode``, the stream syncs before a surface is recycled, ``setReconfigParams``,
the frame callback):

* ``slot``: the library's ``DecoderSlot.decode_gop``, wanted frames cloned (the loader's path);
* ``slot-1size``: the same on videos of one size only (no reconfiguration between GOPs);
* ``slot`` with ``feed_packets`` 1, 4, 16, 64: access units per ``Decode`` call;
* ``chunk``: the packets a GOP needs concatenated into one raw ``Decode`` call, then the flush;
* ``slot-t1``: one thread, for the per-thread latency.

Then runs the loader itself on the W4 clips for a few seconds with a stack sampler and prints
where its threads were. Writes one JSON::

    PYTHONPATH=$PWD/src:$PWD/.site python3 benchmarks/diag/nvdec_feed_probe.py OUT.json
"""

from __future__ import annotations

import collections
import json
import sys
import threading
import time
import traceback

import numpy as np
import torch

from vidloader.bench._datasets import load_index, prepare_dataset
from vidloader.decoding._base import DecodeTask
from vidloader.decoding.nvdec import _decoder as D
from vidloader.decoding.nvdec._annexb import demux_gops
from vidloader.decoding.nvdec._executor import load_pynvvideocodec

CLIPS, THREADS, SECONDS = 600, 16, 6.0


class Timers:
    """Per-thread seconds spent in named calls, summed at the end."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total: collections.Counter = collections.Counter()

    def add(self, name: str, dt: float) -> None:
        with self.lock:
            self.total[name] += dt


def _jobs(index, rng):
    jobs = []
    for _ in range(CLIPS):
        v = int(rng.integers(len(index)))
        rec = index[v]
        start = int(rng.integers(0, rec.num_frames - 31))
        task = DecodeTask.for_frames(v, rec, start + 2 * np.arange(16))
        jobs.append((rec, task, demux_gops(rec, task.gops)))
    return jobs


def _instrument(slot: D.DecoderSlot, timers: Timers) -> None:
    """Wrap the slot's Decode calls (sync included) and reconfiguration with timers."""
    decode = slot._decode

    def timed_decode(dec, pkt):
        t = time.perf_counter()
        if slot._frames_out and D.SYNC_BEFORE_RECYCLE:
            slot.stream.synchronize()
            timers.add("sync", time.perf_counter() - t)
            slot._frames_out = False
        t1 = time.perf_counter()
        out = decode(dec, pkt)
        timers.add("Decode", time.perf_counter() - t1)
        return out

    slot._decode = timed_decode
    new = slot._new_decoder

    def timed_new(record, old):
        t = time.perf_counter()
        try:
            return new(record, old)
        finally:
            timers.add("create", time.perf_counter() - t)

    slot._new_decoder = timed_new


def _decode_chunk(slot: D.DecoderSlot, rec, bundle, g, wanted, on_frame, timers: Timers) -> int:
    """Feed the GOP's needed packets as one concatenated buffer, then the flush; count frames."""
    dec = slot._decoder(rec)
    feed = D._packets_to_feed(rec, bundle, g, wanted, skip_nonref=True)
    pieces = [bundle.payload[int(bundle.offsets[i]): int(bundle.offsets[i]) + int(bundle.sizes[i])] for i in feed]
    buf = np.concatenate(pieces)
    nvc = slot.nvc
    pkt = nvc.PacketData()
    pkt.bsl_data, pkt.bsl, pkt.pts, pkt.decode_flag = buf.ctypes.data, buf.nbytes, 1, 0
    eos = nvc.PacketData()
    eos.bsl, eos.bsl_data = 0, 0
    t = time.perf_counter()
    frames = list(dec.handle.Decode(pkt))
    n = len(frames)
    for f in frames:
        on_frame(f)
    frames = dec.handle.Decode(eos)
    n += len(frames)
    for f in frames:
        on_frame(f)
    timers.add("Decode", time.perf_counter() - t)
    dec.flushed = True
    return n if n == len(feed) else -n


def _run(mode: str, jobs, threads: int, nvc, feed: int = 1) -> dict:
    timers, lock = Timers(), threading.Lock()
    state = {"next": 0, "clips": 0, "packets": 0, "frames": 0, "count_mismatch": 0}
    stop = time.perf_counter() + SECONDS
    errors: list[str] = []

    def worker():
        slot = D.DecoderSlot(nvc, 0, max_width=max(r.width for r, _, _ in jobs),
                             max_height=max(r.height for r, _, _ in jobs), feed_packets=feed)
        _instrument(slot, timers)
        with torch.cuda.device(0), torch.cuda.stream(slot.stream):
            while time.perf_counter() < stop:
                with lock:
                    k = state["next"] % len(jobs)
                    state["next"] += 1
                rec, task, bundle = jobs[k]
                kept = []
                try:
                    for g, gop in enumerate(task.gops):
                        want = set(gop.frames.tolist())
                        if mode == "chunk":
                            n = _decode_chunk(slot, rec, bundle, g, gop.frames, lambda f: None, timers)
                            packets = abs(n)
                            with lock:
                                state["count_mismatch"] += n < 0
                        else:
                            def on_frame(i, nv12, want=want):
                                t = time.perf_counter()
                                if i in want:
                                    kept.append(D.nv12_view(nv12, rec.height, rec.width, slot.device)
                                                if not isinstance(nv12, torch.Tensor) else
                                                nv12[: rec.height * 3 // 2, : rec.width].clone())
                                timers.add("on_frame", time.perf_counter() - t)
                            packets, _ = slot.decode_gop(rec, bundle, g, gop.frames, on_frame,
                                                         wants=want.__contains__)
                        with lock:
                            state["packets"] += packets
                except Exception:  # noqa: BLE001 - recorded
                    errors.append(traceback.format_exc(limit=3))
                    return
                with lock:
                    state["clips"] += 1

    cpu0, t0 = time.process_time(), time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    torch.cuda.synchronize()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    out = {"mode": mode, "threads": threads, "feed_packets": feed, "wall_s": wall, "clips_per_s": state["clips"] / wall,
           "frames_per_s": 16 * state["clips"] / wall, "packets_per_s": state["packets"] / wall,
           "cpu_s_per_packet_us": 1e6 * cpu / max(1, state["packets"]), "cpu_cores": cpu / wall,
           "thread_seconds": {k: round(v, 2) for k, v in timers.total.items()},
           "count_mismatch": state["count_mismatch"], "errors": errors[:2]}
    print(json.dumps(out), flush=True)
    return out


def _stack_sample(seconds: float, make_loader) -> dict:
    """Run the loader for ``seconds`` while sampling every thread's stack every 5 ms."""
    counts: collections.Counter = collections.Counter()
    done = threading.Event()

    def sampler():
        me = threading.get_ident()
        names = {}
        while not done.is_set():
            names.update({t.ident: t.name for t in threading.enumerate()})
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                names_, f = [], frame
                while f is not None and len(names_) < 4:  # no linecache: cheap under the GIL
                    names_.append(f"{f.f_code.co_name}:{f.f_lineno}")
                    f = f.f_back
                where = " < ".join(names_)
                counts[(names.get(ident, "?").split("_")[0], where)] += 1
            time.sleep(0.02)

    loader = make_loader()
    it = iter(loader)
    next(it)
    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    t0, frames = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        b = next(it)
        frames += b["frames"].shape[0] * b["frames"].shape[1]
    torch.cuda.synchronize()
    rate = frames / (time.perf_counter() - t0)
    done.set()
    loader.shutdown()
    top = [{"thread": k[0], "where": k[1], "samples": n} for k, n in counts.most_common(40)]
    return {"frames_per_s": rate, "top": top}


def main() -> None:
    nvc = load_pynvvideocodec()
    index = load_index(prepare_dataset("W4", "gpu-quick", data_dir="/tmp/bench-data"))
    rng = np.random.default_rng(0)
    jobs = _jobs(index, rng)
    sizes = collections.Counter((r.width, r.height) for r, _, _ in jobs)
    small = min(sizes, key=lambda s: s[0])
    one_size = [j for j in jobs if (j[0].width, j[0].height) == small]
    report = {"gpu": torch.cuda.get_device_name(0), "sizes": {f"{w}x{h}": n for (w, h), n in sizes.items()},
              "runs": []}
    torch.zeros(1, device="cuda")
    for mode, js, threads, feed in (("slot", jobs, THREADS, 1), ("slot", jobs, THREADS, 4),
                                    ("slot", jobs, THREADS, 16), ("slot", jobs, THREADS, 64),
                                    ("slot-1size", one_size, THREADS, 16), ("slot", jobs, 32, 16),
                                    ("slot-t1", jobs, 1, 16), ("chunk", jobs, THREADS, 1)):
        report["runs"].append(_run(mode, js, threads, nvc, feed))

    _write(report)
    from vidloader import Clips, Process, VideoLoader

    def make():
        return VideoLoader(index, backend="nvdec", num_workers=16, device="cuda", batch_size=8,
                           sampler=Clips(sequence_length=16, stride=2, seed=0), persistent_workers=True,
                           processing=Process(size=(112, 112), short_side=128, crop="random"))

    try:
        report["loader"] = _stack_sample(8.0, make)
        print(json.dumps(report["loader"], indent=0)[:6000], flush=True)
    except Exception:  # noqa: BLE001 - the probe's runs above are the record
        report["loader"] = {"error": traceback.format_exc()}
    _write(report)


def _write(report: dict) -> None:
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()

"""Where the one-process GPU JPEG loader's time goes, batch by batch (issue 15; session 27).

Session 27 (``session27-2``, ``-6``, H200) put nvImageCodec's hardware decode alone at
16,600-21,900 images/s with aligned places, and the one-process loader (2 lanes, 2 reader
processes) at 12,000-14,300 on the same files: the loader leaves the decoder idle part of
the time. Session 26's profile had the lanes waiting for work 19-25% of the time, yet more
batches in flight (prefetch 4) was slower (``session27-1``). This records, for every batch,
when it was submitted, when its lane job and its decode call ran, and when its augmentation
ran (``fill_from_images``) on which thread, then reports over the timed batches:

- each lane's share of time in a job and in nvImageCodec's decode call;
- the share of time with at least one decode call under way (the decoder's demand), and
  with two at once;
- the augmentation thread's share of busy time;
- mean durations: a decode call, a lane job, the wait from submit to the lane starting,
  from the decode's end to its augmentation starting.

Variants (lanes, prefetch), two rounds alternated: (2, 2) as shipped, (2, 4), (1, 2), (1, 4).

Usage (on the device): ``python3 benchmarks/diag/jpeg_loader_timeline.py [images] [batches]``;
prints a block per run and writes ``$OUT/jpeg_loader_timeline.json`` after each.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

from vidloader.bench import _images as bench
from vidloader.images import ImageFolder, _nvimgcodec
from vidloader.images._synthetic import write_image_folder
from vidloader.pipeline import ImageLoader, _image_decode

VARIANTS = {"3 lanes, prefetch 2": (3, 2), "2 lanes, prefetch 2": (2, 2),
            "2 lanes, prefetch 4": (2, 4), "1 lane, prefetch 2": (1, 2), "1 lane, prefetch 4": (1, 4)}
EVENTS: list = []  # (kind, thread name, start, end)
CPU: dict = {}  # kind -> [thread CPU seconds of each call] (session 30)
READS: dict = {}  # id(future) -> [asked, done, resumed] (session 30)


def timed(kind: str, fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            EVENTS.append((kind, threading.current_thread().name, t0, time.perf_counter()))
            CPU.setdefault(kind, []).append(time.thread_time() - c0)
    return run


def instrument_reads() -> None:
    """Session 30: each read's latency (asked -> reply thread completes it) and the lane's
    resumption after it (completed -> ``files`` called on the lane)."""
    from vidloader.pipeline import _image_readers

    readers = _image_readers.FileReaders
    real_read, real_files = readers.read, readers.files

    def read(self, paths, **kwargs):
        asked = time.perf_counter()
        future = real_read(self, paths, **kwargs)
        entry = [asked, None, None]  # ids are reused: a new entry each time
        READS[id(future)] = entry

        def done(f, entry=entry):
            entry[1] = time.perf_counter()
            if not f.exception():
                READS[id(f.result())] = entry
        future.add_done_callback(done)
        return future

    def files(self, got, paths):
        entry = READS.get(id(got))
        if entry is not None:
            entry[2] = time.perf_counter()
        return real_files(self, got, paths)
    readers.read, readers.files = read, files


def thread_cpu() -> dict:
    """CPU seconds so far of each live thread of this process, by name (Linux)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for thread in threading.enumerate():
        try:
            with open(f"/proc/self/task/{thread.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[thread.name] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError, TypeError):
            continue
    return out


def instrument() -> None:
    pool = _image_decode.BatchDecodePool
    pool.submit = timed("submit", pool.submit)
    pool._decode = timed("lane job", pool._decode)
    _image_decode.fill_from_images = timed("augment", _image_decode.fill_from_images)
    from vidloader.images import _nvjpeg  # session 28's default engine: its own decode_packed

    for dec in (_nvimgcodec.NvImageCodecDecoder, _nvjpeg.NvJpegDecoder):
        dec.decode_packed = timed("decode call", dec.decode_packed)
    # Session 29: inside the lane job, the read's wait and nvJPEG's parts
    pool._decode_read = timed("read and decode", pool._decode_read)
    _nvjpeg.NvJpegDecoder._decode_hardware = timed("hardware call", _nvjpeg.NvJpegDecoder._decode_hardware)
    _nvjpeg.NvJpegDecoder._next_state = timed("state wait", _nvjpeg.NvJpegDecoder._next_state)
    _nvjpeg.NvJpegDecoder._hand_on = timed("hand on", _nvjpeg.NvJpegDecoder._hand_on)
    instrument_reads()


def busy(intervals: list, t0: float, t1: float) -> tuple[float, float]:
    """Shares of [t0, t1] with at least one and with at least two intervals under way."""
    marks = sorted([(max(a, t0), 1) for a, b in intervals if b > t0 and a < t1]
                   + [(min(b, t1), -1) for a, b in intervals if b > t0 and a < t1])
    one = two = 0.0
    depth, last = 0, t0
    for t, step in marks:
        if depth >= 1:
            one += t - last
        if depth >= 2:
            two += t - last
        depth, last = depth + step, t
    span = t1 - t0
    return one / span, two / span


def summarise(t0: float, t1: float) -> dict:
    kinds: dict = {}
    for kind, thread, a, b in EVENTS:
        if a >= t0 and b <= t1:
            kinds.setdefault(kind, {}).setdefault(thread, []).append((a, b))
    out: dict = {"seconds": round(t1 - t0, 3)}
    for kind in ("lane job", "read and decode", "decode call", "hardware call", "state wait",
                 "hand on", "augment", "submit"):
        threads = kinds.get(kind, {})
        every = [iv for ivs in threads.values() for iv in ivs]
        out[kind] = {
            "count": len(every),
            "mean_ms": round(1e3 * float(np.mean([b - a for a, b in every])), 2) if every else None,
            "share_by_thread": {t: round(busy(ivs, t0, t1)[0], 3) for t, ivs in sorted(threads.items())},
            "share_any, share_two": [round(x, 3) for x in busy(every, t0, t1)],
            "mean_cpu_ms": round(1e3 * float(np.mean(CPU[kind])), 2) if CPU.get(kind) else None,
        }
    reads = [e for e in {id(e): e for e in READS.values()}.values()
             if e[0] >= t0 and e[2] is not None and e[2] <= t1]
    out["read: asked to done, done to lane, mean ms"] = [
        round(1e3 * float(np.mean([e[1] - e[0] for e in reads])), 2) if reads else None,
        round(1e3 * float(np.mean([e[2] - e[1] for e in reads])), 2) if reads else None]
    # decode end -> augment start, matched in order (both in submission order)
    ends = sorted(b for k, _, a, b in EVENTS if k == "decode call" and a >= t0 and b <= t1)
    starts = sorted(a for k, _, a, b in EVENTS if k == "augment" and a >= t0 and b <= t1)
    gaps = [s - e for e, s in zip(ends, starts) if s >= e]
    out["decode end to augment start, mean ms"] = round(1e3 * float(np.mean(gaps)), 2) if gaps else None
    return out


def run(folder, label: str, lanes: int, prefetch: int, batches: int) -> dict:
    _image_decode.NVIMGCODEC_LANES = lanes
    ImageLoader.__init__.__kwdefaults__["prefetch"] = prefetch
    EVENTS.clear()
    CPU.clear()
    READS.clear()
    marks = {}
    real = bench._time_batches

    def timing(batches_, limit, warmup=2):
        it = iter(batches_)

        def counted():
            for n, batch in enumerate(it, 1):
                if n == warmup + 10:  # the timeline skips the first ten timed batches
                    marks["t0"] = time.perf_counter()
                    marks["cpu0"], marks["proc0"] = thread_cpu(), time.process_time()
                yield batch
        result = real(counted(), limit, warmup)
        marks["t1"] = time.perf_counter()
        marks["cpu1"], marks["proc1"] = thread_cpu(), time.process_time()
        return result
    bench._time_batches = timing
    try:  # nvidia-smi sampled too: the JPEG decoder's utilisation, where the driver has it
        row = bench._sampled(lambda: bench._jpeg_vidloader(folder, "cuda", 256, batches,
                                                           "nvimgcodec", 0), SMI_QUERY)()
    finally:
        bench._time_batches = real
    row["timeline"] = summarise(marks["t0"], marks["t1"])
    span = marks["t1"] - marks["t0"]  # cores busy: each thread's, and the whole process's
    row["timeline"]["cores busy by thread"] = {
        name: round((marks["cpu1"][name] - marks["cpu0"][name]) / span, 3)
        for name in sorted(marks["cpu1"]) if name in marks["cpu0"]}
    row["timeline"]["cores busy, process"] = round((marks["proc1"] - marks["proc0"]) / span, 3)
    return row


SMI_QUERY = None  # set in main: _monitor.jpeg_query()


def main() -> int:
    global SMI_QUERY
    from vidloader.bench._monitor import jpeg_query

    SMI_QUERY = jpeg_query()
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 150
    folder = ImageFolder(write_image_folder("/tmp/jpeg-ab-x1", num_classes=10, per_class=count // 10),
                         progress=False)
    instrument()
    results: dict = {"files": len(folder), "batch": 256, "batches": batches}
    from jpeg_loader_ab import session30_switches  # AB_PIN, AB_PREALLOC (session 30)

    session30_switches(results)
    out = Path(os.environ.get("OUT", ".")) / "jpeg_loader_timeline.json"
    for round_ in (1, 2):
        order = list(VARIANTS.items()) if round_ == 1 else list(VARIANTS.items())[::-1]
        for label, (lanes, prefetch) in order:
            if os.environ.get("TIMELINE_ONLY") and label not in os.environ["TIMELINE_ONLY"].split(";"):
                continue  # TIMELINE_ONLY: the labels to run, separated by ";"
            try:
                row = run(folder, label, lanes, prefetch, batches)
            except Exception as exc:  # noqa: BLE001 - say what failed, go on
                results[f"{label}, round {round_}"] = {"error": repr(exc)}
                print(f"{label}, round {round_}: {exc!r}", flush=True)
                continue
            results[f"{label}, round {round_}"] = row
            out.write_text(json.dumps(results, indent=1))
            util = f" (JPEG decoder {row['jpeg_util_pct']:.0f}%)" if "jpeg_util_pct" in row else ""
            print(f"{label}, round {round_}: {row['images_per_s']:,.0f} images/s{util}", flush=True)
            print(json.dumps(row["timeline"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long NVDEC decoders take to start, alone and many at once (issue 14: the first batch
of a 16-worker NVDEC loader came 2.25 s after creating it, warm, on the H200).

For n in 1, 4, 16: n threads at once each create a PyNvVideoCodec decoder and decode the
first 30 frames of its own file (one GOP of W1); then the same decoders decode the next 30
frames. Prints the wall time of each round, each decoder's ``GetSessionInitTime()`` and the
time to its first frame: whether creating decoders, not decoding, holds the first batch.

    python benchmarks/diag/nvdec_session_init.py /tmp/bench-data/W1-gpu-quick-*/
"""

from __future__ import annotations

import glob
import json
import sys
import threading
import time

FRAMES = 30


def _decode_frames(dec, packets, n: int) -> tuple[int, float | None]:
    got, first = 0, None
    t0 = time.perf_counter()
    for pkt in packets:
        got += len(dec.Decode(pkt))
        if got and first is None:
            first = time.perf_counter() - t0
        if got >= n:
            break
    return got, first


def _one(nvc, path, out, k, barrier):
    dmx = nvc.CreateDemuxer(path)
    packets = iter(dmx)
    barrier.wait()
    t0 = time.perf_counter()
    dec = nvc.CreateDecoder(gpuid=0, codec=dmx.GetNvCodecId(), cudacontext=0, cudastream=0,
                            usedevicememory=True)
    created = time.perf_counter() - t0
    got, first = _decode_frames(dec, packets, FRAMES)
    gop1 = time.perf_counter() - t0
    t1 = time.perf_counter()
    got2, _ = _decode_frames(dec, packets, FRAMES)
    gop2 = time.perf_counter() - t1
    out[k] = {"create_s": round(created, 4), "first_frame_s": round(created + (first or 0), 4),
              "gop1_s": round(gop1, 4), "gop2_s": round(gop2, 4), "frames": [got, got2],
              "session_init_ms": dec.GetSessionInitTime()}


def main() -> None:
    import PyNvVideoCodec as nvc
    import torch

    torch.zeros(1, device="cuda")  # the context exists before timing, as in the loader
    files = sorted(glob.glob(sys.argv[1].rstrip("/") + "/**/*.mp4", recursive=True))
    results = {}
    for n in (1, 4, 16, 16):
        out, barrier = [None] * n, threading.Barrier(n)
        threads = [threading.Thread(target=_one, args=(nvc, files[(k + 7 * n) % len(files)], out, k, barrier))
                   for k in range(n)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        key = f"{n}" if str(n) not in results else f"{n}-again"
        results[key] = {"wall_s": round(wall, 3),
                        "max_first_frame_s": max(o["first_frame_s"] for o in out),
                        "max_gop1_s": max(o["gop1_s"] for o in out),
                        "max_gop2_s": max(o["gop2_s"] for o in out),
                        "decoders": out}
        print(key, json.dumps({k: v for k, v in results[key].items() if k != "decoders"}),
              "session_init_ms", [o["session_init_ms"] for o in out], flush=True)
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

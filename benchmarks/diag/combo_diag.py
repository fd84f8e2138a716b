"""Per-batch arrival times of cpu / nvdec / combo on a small generated 1080p H.264 set (W1-like:
GOP 30, 2 B-frames, 12 Mbit/s), uniform random frames, batch 128, 224x224, 16 workers,
persistent workers, epochs chained. Steady frames/s counts batches arriving after each
variant's ``skip`` seconds (start-up and the drain of the slots filled before the first batch).
Writes $OUT/combo_diag.json after each variant and a stack dump every 60 s ($OUT/stacks.txt).

    python3 benchmarks/diag/combo_diag.py VIDEOS WIDTH HEIGHT nvdec:30:12,combo:45:15,cpu:90:60
"""

import faulthandler
import json
import os
import sys
import time

import torch

import vidloader
from vidloader import RandomFrames, VideoLoader
from vidloader.pipeline import _combo as combo
from vidloader.synthetic import VideoSpec, make_dataset

#: The combo's settings as shipped; a ``combo-nice=N`` or ``combo-div=N`` variant changes one
#: for its own run only.
_DEFAULTS = (combo.COMBO_CPU_NICE, combo.COMBO_DEMUX_DIVISOR)


def _decoded_per_delivered(loader):
    stats = loader.decode_stats
    return round(stats.decoded / stats.delivered, 2) if stats.delivered else None


def _endless(loader):
    while True:
        yield from loader


def _run(index, backend: str, duration: float, skip: float) -> dict:
    kw = {}
    combo.COMBO_CPU_NICE, combo.COMBO_DEMUX_DIVISOR = _DEFAULTS
    if backend.startswith("combo-nice"):  # the CPU side's niceness, for an A/B in one call
        combo.COMBO_CPU_NICE = int(backend.split("=")[1])
        backend = "combo"
    if backend.startswith("combo-div"):  # one process in DIV demuxes for NVDEC
        combo.COMBO_DEMUX_DIVISOR = int(backend.split("=")[1])
        backend = "combo"
    if backend.startswith("combo-share"):
        kw["combo_share"] = float(backend.split("=")[1])
        backend = "combo"
    t0 = time.time()
    loader = VideoLoader(index, backend=backend, sampler=RandomFrames(seed=0), batch_size=128,
                         size=(224, 224), num_workers=16, device="cuda",
                         persistent_workers=True, **kw)
    arrivals = []
    it = _endless(loader)
    for _ in it:
        torch.cuda.synchronize()
        arrivals.append(round(time.time() - t0, 2))
        if time.time() - t0 > duration or len(arrivals) >= 400:
            break
    stats = dict(loader.stats)
    it.close()
    loader.shutdown()
    timed = [a for a in arrivals if a >= skip]
    steady = (len(timed) - 1) * 128 / (timed[-1] - timed[0]) if len(timed) > 2 else None
    return dict(first_batch_s=arrivals[0], frames_per_s=steady, timed_batches=len(timed),
                decoded_per_delivered=_decoded_per_delivered(loader),
                rows_by_executor=dict(stats["rows_by_executor"]), arrivals=arrivals, **kw)


def main() -> None:
    out = os.environ.get("OUT", "/tmp")
    n, w, h = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    specs = [VideoSpec(codec="h264", width=w, height=h, num_frames=120, gop=30, bframes=2, seed=s,
                       bitrate=int(12e6 * w * h / (1920 * 1080))) for s in range(n)]
    t = time.time()
    paths = make_dataset("/tmp/diag120", specs, num_workers=16)
    index = vidloader.build_index(paths, num_workers=16, progress=False)
    print("generated", round(time.time() - t, 1), "s", flush=True)
    faulthandler.dump_traceback_later(60, repeat=True, file=open(f"{out}/stacks.txt", "w"))  # noqa: SIM115
    results = {}
    for spec in sys.argv[4].split(","):
        backend, duration, skip = spec.split(":")
        results[backend] = row = _run(index, backend, float(duration), float(skip))
        with open(f"{out}/combo_diag.json", "w") as f:
            json.dump(dict(videos=n, size=[w, h], frames_per_video=120,
                           gpu=torch.cuda.get_device_name(0), results=results), f, indent=1)
        print(backend, {k: v for k, v in row.items() if k != "arrivals"}, row["arrivals"][:40], flush=True)


if __name__ == "__main__":
    main()

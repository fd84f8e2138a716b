"""Session 22: the planning cost a batch of NVDEC's units over a plan of streams
(``pipeline/_units.py`` ``stream_gop_units``; ``MultiCameraClips(streams=True)``, 6 cameras, GOP
30 or 64), plans computed beforehand so only the units are timed, the least of five runs. Run on the 2-core machine
before and after the cells' keys were located a batch at a time
(``benchmarks/results/cpu/session22-stream-units.txt``)."""

from __future__ import annotations

import time

import numpy as np

from vidloader.pipeline._units import stream_gop_units
from vidloader.sampling import MultiCameraClips


class _Record:
    def __init__(self, frames: int, gop: int) -> None:
        self.keyframes = np.arange(0, frames, gop, dtype=np.int64)
        self.num_frames = frames

    def keyframe_before(self, f):
        return self.keyframes[np.searchsorted(self.keyframes, f, side="right") - 1]

    def check_frames(self, f) -> None:
        pass


class _Index:
    """An index stand-in: lengths and keyframes."""

    def __init__(self, frames: int, videos: int, gop: int) -> None:
        self.num_frames = np.full(videos, frames, np.int64)
        self.records = [_Record(frames, gop) for _ in range(videos)]

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i):
        return self.records[i]


def run(rigs: int, cameras: int, frames: int, batch: int, gop: int, batches: int) -> None:
    index = _Index(frames, rigs * cameras, gop)
    positions = [[r * cameras + c for c in range(cameras)] for r in range(rigs)]
    plan = MultiCameraClips(positions, shuffle=False, streams=True).plan_epoch(index, epoch=0,
                                                                                 batch_size=batch)
    batches = min(batches, len(plan))
    for b in range(batches):
        plan.batch(b)
    times = []
    for _ in range(5):  # the least of five: the 2-core machine is shared
        start = time.perf_counter()
        for unit in stream_gop_units(plan, index, 0, span=gop):
            if max(p.batch for p in unit) >= batches - 1:
                break
        times.append(time.perf_counter() - start)
    print(f"{rigs} rigs of {frames} frames, {batch} samples x {cameras} cameras a batch, GOP {gop}: "
          f"{min(times) / batches * 1e3:.3f} ms a batch (least of 5)")


if __name__ == "__main__":
    run(200, 6, 48, 8, 30, 1000)
    run(2000, 6, 300, 64, 64, 600)
    run(2000, 6, 300, 256, 64, 300)
    run(300, 6, 108_000, 256, 30, 40)  # hour-long videos: 3,600 keyframes each

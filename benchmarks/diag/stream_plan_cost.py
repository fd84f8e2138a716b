"""Session 22: the stream order's plan cost a batch (``MultiCameraClips(streams=True)``, 6
cameras, 48 frames a camera, batch 8) for 10, 200 and 850 rigs, over the first 300 batches of
epoch 0. Run on the 2-core machine before and after ``StreamEpoch`` computed blocks of batches
(``benchmarks/results/cpu/session22-stream-plan.txt``)."""

from __future__ import annotations

import time

import numpy as np

from vidloader import MultiCameraClips


class _Lengths:
    """An index stand-in: samplers read only ``num_frames`` and ``len``."""

    def __init__(self, num_frames) -> None:
        self.num_frames = np.asarray(num_frames, np.int64)

    def __len__(self) -> int:
        return len(self.num_frames)


def main() -> None:
    for rigs in (10, 200, 850):
        index = _Lengths([48] * (6 * rigs))
        sampler = MultiCameraClips([[6 * r + c for c in range(6)] for r in range(rigs)],
                                   shuffle=False, streams=True)
        plan = sampler.plan_epoch(index, epoch=0, batch_size=8)
        n = min(len(plan), 300)
        start = time.perf_counter()
        for b in range(n):
            plan.batch(b)
        print(f"{rigs} rigs: {(time.perf_counter() - start) / n * 1e3:.3f} ms a batch")


if __name__ == "__main__":
    main()

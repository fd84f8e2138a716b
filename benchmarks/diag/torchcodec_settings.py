"""Which torchcodec settings are fastest here: every combination of seek mode, batch API,
FFmpeg threads and resize location, timed in one process, interleaved round by round, on the
bench's random workload shape (128 uniformly random frames of W1 per batch, 224x224), with the
decoders kept open as the bench's adapters keep them. Also checks that each setting delivers
the exact mode's pictures (mean absolute difference at 224x224).

    PYTHONPATH=src:$TCSITE [SCALE=small] [THREADS=1,0] [WORKLOAD=random] \
        python benchmarks/diag/torchcodec_settings.py [ROUNDS] [OUT.json]
"""

import itertools
import json
import os
import sys
import time

import numpy as np
import torch

from vidloader.bench._batching import assemble
from vidloader.bench._datasets import load_index, prepare_dataset
from vidloader.bench._peers_cpu import TorchcodecSettings, _TorchcodecReader
from vidloader.bench._workloads import WORKLOADS, make_plan


def _reader(settings: TorchcodecSettings, geometry) -> _TorchcodecReader:
    reader = _TorchcodecReader(geometry)
    reader.settings = settings  # an instance attribute: one reader per setting
    return reader


def main(rounds: int = 3, out: str | None = None) -> None:
    torch.set_num_threads(1)  # as in a DataLoader worker: one core per worker
    workload = WORKLOADS[os.environ.get("WORKLOAD", "random")]
    dataset = prepare_dataset(workload.dataset, os.environ.get("SCALE", "small"))
    index = load_index(dataset)
    plan = make_plan(workload, index, dataset, batches=rounds + 1, seed=1)
    threads = [int(t) for t in os.environ.get("THREADS", "1,0").split(",")]
    grid = [TorchcodecSettings(seek, threads, api, native) for seek, threads, api, native in
            itertools.product(("exact", "approximate"), threads, ("indices", "played_at"),
                              (False, True))]
    readers = [_reader(s, workload.geometry) for s in grid]
    reference = None
    seconds = {i: [] for i in range(len(grid))}
    diffs = {}
    for r, bp in enumerate(plan.batches):  # batch 0 opens the files (untimed)
        for i in np.random.default_rng(r).permutation(len(grid)):
            t = time.perf_counter()
            got = assemble(bp, plan.index, workload.geometry, readers[i].decode)
            if r:
                seconds[i].append(time.perf_counter() - t)
            if r == 1 and i == 0:
                reference = got
        if r == 1:
            for i in range(len(grid)):
                got = assemble(bp, plan.index, workload.geometry, readers[i].decode)
                diffs[i] = float((got.float() - reference.float()).abs().mean())
    rows = []
    for i, s in enumerate(grid):
        fps = [bp_frames / t for bp_frames, t in zip([plan.batch_size] * rounds, seconds[i])]
        rows.append({**vars(s), "frames_per_s_median": float(np.median(fps)),
                     "frames_per_s": [round(f, 1) for f in fps],
                     "mean_abs_diff_vs_first": round(diffs[i], 3)})
        print(f"{s.seek_mode:11s} threads={s.num_ffmpeg_threads} {s.api:9s} "
              f"native_resize={s.native_resize!s:5s} {np.median(fps):7.1f} frames/s "
              f"diff {diffs[i]:.3f}", flush=True)
    if out:
        with open(out, "w") as f:
            json.dump({"workload": workload.name, "scale": os.environ.get("SCALE", "small"),
                       "rounds": rounds, "load_avg": os.getloadavg(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3, sys.argv[2] if len(sys.argv) > 2 else None)

"""One source tree's demo workload: uniform random frames, batch 128, 224x224, 2 workers,
persistent workers, 40 timed batches after 7; prints one JSON line. For bisecting a CPU
throughput regression across commits (session 7):

    git archive REV src | tar -x -C /tmp/REV
    PYTHONPATH=/tmp/REV/src python benchmarks/diag/regress_run.py /tmp/REV/src VIDEO_DIR REV
"""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, sys.argv[1])


def _decoded(loader) -> int:
    stats = getattr(loader, "decode_stats", None)
    return 0 if stats is None else getattr(stats, "decoded", 0)


def main() -> None:
    import vidloader

    paths = sorted(str(p) for p in Path(sys.argv[2]).glob("*.mp4"))
    index = vidloader.build_index(paths, num_workers=0, progress=False)
    loader = vidloader.VideoLoader(index, sampler=vidloader.RandomFrames(seed=0), batch_size=128,
                                   size=(224, 224), num_workers=2, persistent_workers=True)

    def endless():
        while True:
            yield from loader

    it = endless()
    t0 = time.perf_counter()
    next(it)
    first = time.perf_counter() - t0
    for _ in range(6):
        next(it)
    d0, t = _decoded(loader), time.perf_counter()
    for _ in range(40):
        next(it)
    seconds, decoded = time.perf_counter() - t, _decoded(loader) - d0
    print(json.dumps({"version": sys.argv[3], "first_batch_s": round(first, 2),
                      "frames_per_s": round(40 * 128 / seconds, 1),
                      "decoded_per_delivered": round(decoded / (40 * 128), 2) if decoded else None}),
          flush=True)
    it.close()
    loader.shutdown()


if __name__ == "__main__":
    main()

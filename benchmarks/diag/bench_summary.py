"""One line per run of the ``vidloader bench run`` JSONs under a folder (device scripts from
session 17 on; session12_peers.sh has the same lines inline, as they ran then).

Usage: ``python3 benchmarks/diag/bench_summary.py RESULTS_DIR``.
"""

from __future__ import annotations

import glob
import json
import sys


def fmt(v, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


def lines(results_dir: str) -> list[str]:
    out = []
    for path in sorted(glob.glob(f"{results_dir}/*/*.json")):
        with open(path) as f:
            report = json.load(f)
        for r in report["runs"]:
            run = path.rsplit("/", 2)[-2]  # the run's folder (what the script named it)
            head = f"{run:14s} {r['workload']:10s} {r['backend']:16s}"
            if r.get("status") != "ok":
                out.append(f"{head} {r.get('status')}: {r.get('reason', '')}")
                continue
            counts = r.get("decode_counts") or {}
            out.append(
                f"{head} {fmt(r['frames_per_s']):>7s} frames/s  decoded/delivered "
                f"{fmt(r.get('decoded_per_delivered'), '.2f'):>5s}  window {r['seconds']:.1f} s "
                f"{r['window_batches']} batches  NVDEC {fmt(r.get('nvdec_util_pct'))}%  "
                f"GPU {fmt(r.get('gpu_util_pct'))}%  CPU {fmt(r.get('cpu_util_pct'))}%  "
                f"peak GPU {fmt((r.get('peak_gpu_memory_bytes') or 0) / 2**20)} MiB  "
                f"first batch {r['first_batch_s']:.1f} s  tasks {counts.get('tasks', '-')}")
    return out


if __name__ == "__main__":
    print("\n".join(lines(sys.argv[1])))

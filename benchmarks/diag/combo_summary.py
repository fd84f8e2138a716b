"""One line per variant of the ``_combo_run`` JSONs in a folder (device scripts from session 22
on; session 21's scripts print the same lines inline, as they ran then).

Usage: ``python3 benchmarks/diag/combo_summary.py RESULTS_DIR``.
"""

from __future__ import annotations

import glob
import json
import sys


def lines(results_dir: str) -> list[str]:
    out = []
    for path in sorted(glob.glob(f"{results_dir}/*.json")):
        with open(path) as f:
            report = json.load(f)
        for workload, row in report.get("results", {}).items():
            for label, v in row.items():
                if "error" in v:
                    out.append(f"{workload:14s} {label:18s} error {v['error']}")
                    continue
                windows = [round(x) for x in v["frames_per_s_windows"]]
                decoded = v.get("decoded_per_delivered")
                out.append(
                    f"{workload:14s} {label:18s} median {v['frames_per_s']:7.0f} "
                    f"min {v['frames_per_s_min']:7.0f} windows {windows} "
                    f"nvdec {v.get('nvdec_util_pct') or 0:.0f}% "
                    f"decoded/delivered {'-' if decoded is None else format(decoded, '.2f')} "
                    f"peak GPU {(v.get('gpu_mem_peak_bytes') or 0) / 2**30:.1f} GiB "
                    f"host {(v.get('peak_host_memory_bytes') or 0) / 2**30:.2f} GiB")
    return out


if __name__ == "__main__":
    print("\n".join(lines(sys.argv[1])))

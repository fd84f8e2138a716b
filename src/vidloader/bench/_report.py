"""Benchmark reports: the environment, the ratio to the best peer, the text table, the JSON
file, the PNG bar plot (matplotlib, the ``bench`` extra; skipped without it) and the markdown
section for the README.
"""

from __future__ import annotations

import datetime
import json
import math
import os
from pathlib import Path

from .._utils._sysinfo import describe_machine, load_average
from ._peers import version_of

SCHEMA = "vidloader-bench/1"

#: Distributions whose versions every report records (missing ones say "not installed").
LIBRARIES = ("vidloader", "torch", "av", "numpy", "decord", "opencv-python-headless",
             "opencv-python", "torchcodec", "pynvvideocodec", "nvidia-dali-cuda120",
             "psutil", "matplotlib")


def environment(note: str = "") -> dict:
    """Machine and library facts, plus a free-text note (shared machine, load …)."""
    env = describe_machine()
    env["libraries"] = {name: version_of(name) for name in LIBRARIES}
    env["load_avg_at_start"] = load_average()
    env["note"] = note
    return env


def _is_peer(run: dict) -> bool:
    return (run.get("status") == "ok" and not run.get("ceiling")
            and not run["backend"].startswith("vidloader"))


def add_ratios(runs: list[dict]) -> str | None:
    """Set ``ratio_to_best_peer`` on every finished run; return the best peer's name.

    The best peer is the fastest finished backend that is neither vidloader nor a ceiling.
    """
    peers = [r for r in runs if _is_peer(r)]
    if not peers:
        return None
    best = max(peers, key=lambda r: r["frames_per_s"])
    for r in runs:
        if r.get("status") == "ok":
            r["ratio_to_best_peer"] = r["frames_per_s"] / best["frames_per_s"]
    return best["backend"]


def make_report(*, workload, dataset: dict, settings: dict, command: str, runs: list[dict],
                env: dict) -> dict:
    """The JSON document of one workload's runs."""
    best = add_ratios(runs)
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "workload": {"name": workload.name, "description": workload.description,
                     "batch_size": settings.get("batch_size") or workload.batch_size},
        "dataset": dataset, "settings": settings, "environment": env,
        "best_peer": best, "runs": runs,
    }


# -- formatting ------------------------------------------------------------------------------


def _bytes(n) -> str:
    if n is None:
        return "-"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _pct(x) -> str:
    return "-" if x is None else f"{x:.0f}%"


def _num(x, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


COLUMNS = ("backend", "frames/s", "x best peer", "decoded/delivered", "CPU", "other CPU",
           "GPU", "NVDEC", "peak host mem", "peak GPU mem")


def row(run: dict) -> list[str]:
    """One table row; a skipped or failed run shows its reason instead of figures."""
    name = run["backend"] + (" (ceiling)" if run.get("ceiling") else "")
    if run.get("status") != "ok":
        return [name, f"{run.get('status', '?')}: {run.get('reason', '')}"]
    return [name, _num(run["frames_per_s"], ",.0f"), _num(run.get("ratio_to_best_peer"), ".2f"),
            _num(run.get("decoded_per_delivered"), ".2f"), _pct(run.get("cpu_util_pct")),
            _pct(run.get("other_cpu_pct")), _pct(run.get("gpu_util_pct")),
            _pct(run.get("nvdec_util_pct")), _bytes(run.get("peak_host_memory_bytes")),
            _bytes(run.get("peak_gpu_memory_bytes"))]


def format_table(report: dict) -> str:
    """The report as a fixed-width text table with a title and notes."""
    rows = [row(r) for r in report["runs"]]
    full = [r for r in rows if len(r) == len(COLUMNS)]
    widths = [max(len(c), *(len(r[i]) for r in full)) if full else len(c)
              for i, c in enumerate(COLUMNS)]
    lines = [title(report), "  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths))]
    for r in rows:
        lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths)) if len(r) == len(COLUMNS)
                     else f"{r[0].ljust(widths[0])}  {r[1]}")
    lines.extend(notes(report))
    return "\n".join(lines)


def title(report: dict) -> str:
    ds, env = report["dataset"], report["environment"]
    gpus = env.get("gpus") or []
    gpu = f", {len(gpus)}x {gpus[0]['name']}" if gpus else ", no GPU"
    return (f"{report['workload']['name']}: {report['workload']['description']} | dataset "
            f"{ds['name']} ({ds['scale']}, {ds['videos']} videos) | {env.get('cpu')}, "
            f"{env.get('logical_cores')} cores{gpu} | {report['settings'].get('workers')} workers")


def notes(report: dict) -> list[str]:
    """Footnotes: what CPU % means, the load seen, and each peer's note."""
    out = ["CPU: the run's process tree, % of all cores; other CPU: the rest of the machine "
           "during the timed window (other users)."]
    out += [f"note: {r['note']}" for r in report["runs"] if r.get("note")]
    if report["environment"].get("note"):
        out.append(f"machine: {report['environment']['note']}")
    return out


# -- files -------------------------------------------------------------------------------------


def stem(report: dict) -> str:
    """File name stem: ``<workload>-<dataset>-<scale>``."""
    ds = report["dataset"]
    return f"{report['workload']['name']}-{ds['name']}-{ds['scale']}"


def write_json(report: dict, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    return path


def write_plot(report: dict, path: str | os.PathLike) -> Path | None:
    """A horizontal bar chart of frames/s; ``None`` when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: never needs a display
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    ok = [r for r in report["runs"] if r.get("status") == "ok"]
    other = [r for r in report["runs"] if r.get("status") != "ok"]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.45 * max(1, len(ok)) + 0.2 * len(other)))
    names = [r["backend"] + (" (ceiling)" if r.get("ceiling") else "") for r in ok]
    values = [r["frames_per_s"] for r in ok]
    colors = ["tab:blue" if r["backend"].startswith("vidloader") else
              "tab:gray" if r.get("ceiling") else "tab:orange" for r in ok]
    bars = ax.barh(names[::-1], values[::-1], color=colors[::-1])
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values[::-1]], padding=3)
    ax.set_xlabel("frames/s (higher is better)")
    ax.set_title(_short_title(report), fontsize=9)
    if other:
        text = "\n".join(f"{r['backend']}: {r.get('status')}: {r.get('reason', '')[:90]}"
                         for r in other)
        fig.text(0.01, 0.01, text, fontsize=6, va="bottom")
    ax.margins(x=0.15)
    fig.tight_layout(rect=(0, 0.06 * bool(other) + 0.03 * len(other), 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _short_title(report: dict) -> str:
    ds, env = report["dataset"], report["environment"]
    gpus = env.get("gpus") or []
    machine = f"{env.get('logical_cores')} cores" + (f", {gpus[0]['name']}" if gpus else "")
    return (f"{report['workload']['name']} | {ds['name']} {ds['scale']} ({', '.join(ds['sizes'])})"
            f" | {machine} | {report['settings'].get('workers')} workers")

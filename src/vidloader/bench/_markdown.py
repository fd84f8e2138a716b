"""A markdown performance section from benchmark JSON files, for the README.

Every figure links to the JSON file it comes from, so a reader can check the machine, the
command and the raw numbers behind it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from ._report import SCHEMA, add_ratios
from ._workloads import WORKLOADS


def load_reports(root: str | os.PathLike, *, recursive: bool = True) -> list[tuple[Path, dict]]:
    """Every benchmark report under ``root`` (in sub-folders too unless ``recursive=False``;
    other JSON files are ignored), by directory, then in the order of :data:`WORKLOADS`."""
    out = []
    for path in (Path(root).rglob if recursive else Path(root).glob)("*.json"):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(report, dict) and report.get("schema") == SCHEMA:
            out.append((path, report))
    order = {name: i for i, name in enumerate(WORKLOADS)}
    return sorted(out, key=lambda item: (str(item[0].parent),
                                         order.get(item[1]["workload"]["name"], len(order)),
                                         item[0].name))


def merge_run(reports: list[tuple[Path, dict]]) -> list[tuple[list[Path], dict]]:
    """One report per workload from the per-backend reports of one run (as
    ``benchmarks/gpu_run.sh`` writes them: each backend in its own process and JSON file, one
    after the other on the same machine and dataset). Ratios are recomputed across the merged
    runs, and each vidloader run gets ``ratio_to_ceiling`` where the run has a ceiling.

    Raises:
        ValueError: the reports do not share one dataset (digest) and machine.
    """
    keys = {(r["dataset"]["digest"], _machine(r)) for _, r in reports}
    if len(keys) > 1:
        raise ValueError(f"reports of different datasets or machines cannot be merged: {sorted(keys)}")
    by_workload: dict[str, list[tuple[Path, dict]]] = {}
    for path, report in reports:
        by_workload.setdefault(report["workload"]["name"], []).append((path, report))
    merged = []
    for items in by_workload.values():
        report = json.loads(json.dumps(items[0][1]))  # a deep copy: the first is the template
        report["runs"] = [dict(run, source=str(path)) for path, r in items for run in r["runs"]]
        report["command"] = "; ".join(r["command"] for _, r in items)
        report["best_peer"] = add_ratios(report["runs"])
        ceilings = [r for r in report["runs"] if r.get("ceiling") and r.get("status") == "ok"]
        for run in report["runs"]:
            if ceilings and run["backend"].startswith("vidloader") and run.get("status") == "ok":
                run["ratio_to_ceiling"] = run["frames_per_s"] / ceilings[0]["frames_per_s"]
        merged.append(([p for p, _ in items], report))
    return merged


def _machine(report: dict) -> str:
    env = report["environment"]
    gpus = env.get("gpus") or []
    gpu = f"{len(gpus)}x {gpus[0]['name']} (driver {env.get('gpu_driver')})" if gpus else "no GPU"
    return f"{env.get('cpu')}, {env.get('logical_cores')} logical cores, {gpu}"


def _link(text: str, target: str) -> str:
    return f"[{text}]({target})"


def _fmt(value, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _pct(value) -> str:
    return "–" if value is None else f"{value:.0f}%"


def _mib(value) -> str:
    return "–" if value is None else f"{value / 2**20:,.0f} MiB"


def _table(report: dict, href: str, base: Path | None = None) -> list[str]:
    runs = [r for r in report["runs"] if r.get("status") == "ok"]
    gpu = any(r.get("gpu_util_pct") is not None for r in runs)
    ceiling = any("ratio_to_ceiling" in r for r in runs)
    head = (["backend", "frames/s", "× best peer"] + (["× ceiling"] if ceiling else [])
            + ["decoded / delivered", "CPU (all cores)", "other CPU", "peak host mem"]
            + (["GPU", "NVDEC", "peak GPU mem"] if gpu else []))
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        name = f"**{r['backend']}**" if r["backend"].startswith("vidloader") else r["backend"]
        link = os.path.relpath(r["source"], base) if "source" in r and base else href
        cells = [name + (" (ceiling)" if r.get("ceiling") else ""),
                 _link(f"{r['frames_per_s']:,.0f}", link),
                 _link(_fmt(r.get("ratio_to_best_peer"), ".2f"), link)]
        if ceiling:
            cells.append(_fmt(r.get("ratio_to_ceiling"), ".2f"))
        cells += [_fmt(r.get("decoded_per_delivered"), ".2f"),
                  _pct(r.get("cpu_util_pct")), _pct(r.get("other_cpu_pct")),
                  _mib(r.get("peak_host_memory_bytes"))]
        if gpu:
            cells += [_pct(r.get("gpu_util_pct")), _pct(r.get("nvdec_util_pct")),
                      _mib(r.get("peak_gpu_memory_bytes"))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _section(path: Path | list[Path], report: dict, base: Path) -> list[str]:
    merged = isinstance(path, list)  # several per-backend files of one run (merge_run)
    path = path[0] if merged else path
    href = os.path.relpath(path, base)
    ds, w, st = report["dataset"], report["workload"], report["settings"]
    png = path.with_suffix(".png")
    plot = f" ([plot]({os.path.relpath(png, base)}))" if png.exists() else ""
    window = ("each backend in its own process, one after the other (timed windows in each "
              "JSON)" if merged else
              f"timed window of at least {st.get('batches')} batches or "
              f"{st.get('max_seconds') or 0:g} s, in whole delivery bursts")
    lines = [f"#### `{w['name']}`: {w['description']}", "",
             f"Dataset {ds['name']} at scale `{ds['scale']}`: {ds['videos']} videos "
             f"({', '.join(ds['sizes'])}, {', '.join(ds['codecs'])}, GOP "
             f"{'/'.join(map(str, ds['gop']))}); {st.get('workers')} workers; {window}{plot}.", ""]
    lines += _table(report, href, base)
    other = [r for r in report["runs"] if r.get("status") != "ok"]
    if other:
        lines += [""] + [f"- {r['backend']}: {r.get('status')} ({r.get('reason', '')})"
                         for r in other]
    return lines + ["", f"`{report['command']}`", ""]


def markdown_section(reports: Iterable[tuple[Path, dict]], *, base: str | os.PathLike = ".",
                     heading: str = "## Performance", preamble: bool = True) -> str:
    """The README section: one sub-heading per machine, one table per report.

    Args:
        reports: ``(json_path, report)`` pairs (see :func:`load_reports`).
        base: directory the README lives in (links are relative to it).
        heading: the section's heading line (none if empty).
        preamble: explain the columns under the heading.
    """
    base = Path(base).absolute()
    by_machine: dict[str, list[tuple[Path, dict]]] = {}
    for path, report in reports:
        path = [Path(p).absolute() for p in path] if isinstance(path, list) else Path(path).absolute()
        by_machine.setdefault(_machine(report), []).append((path, report))
    lines = ([heading, ""] if heading else []) + ([
             "Measured with `vidloader bench` on synthetic datasets (`vidloader.bench`); every "
             "figure links to the JSON holding the machine, the exact command and the raw "
             "numbers. *× best peer* divides by the fastest backend that is neither vidloader "
             "nor a decode-only ceiling. *Decoded / delivered* counts frames the decoder "
             "produced per frame handed to the model, where the backend reports it. *CPU* is "
             "the run's processes, *other CPU* the rest of the machine meanwhile (other "
             "users), both in % of all cores. See `benchmarks/README.md` for the method.", ""]
             if preamble else [])
    for machine, items in by_machine.items():
        note = items[0][1]["environment"].get("note")
        lines += [f"### {machine}", ""] + ([f"_{note}_", ""] if note else [])
        for path, report in items:
            lines += _section(path, report, base)
    return "\n".join(lines).rstrip() + "\n"

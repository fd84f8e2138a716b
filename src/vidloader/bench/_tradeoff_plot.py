"""The figure of ``vidloader bench tradeoff``: throughput against the design effect (left) and
against the samples one worker holds in flight (right), measured and predicted."""

from __future__ import annotations

from pathlib import Path

#: GopShuffle's in-block orders (``uniform``: filled markers; ``balanced``: hollow, dash-dot).
ORDERS = ("uniform", "balanced")

STYLES = {  # series -> (colour, marker, legend)
    "loader-L4": ("tab:blue", "o", "VideoLoader, 0 workers, lookahead 4"),
    "loader-Lpref": ("tab:orange", "s", "VideoLoader, 0 workers, lookahead ≈ 1 block"),
    "loader-uniform-L": ("tab:red", "*", "RandomFrames, lookahead 8/16/epoch"),
    "units": ("tab:green", "^", "block-aligned decode units (prototype)"),
    "loader-w2": ("tab:purple", "D", "VideoLoader, 2 workers"),
}


def _label(row: dict) -> str:
    if row["name"] == "SequentialFrames":
        return "seq"
    if row["name"] == "RandomFrames":
        return "uniform" if row["series"] != "loader-uniform-L" else f"uniform L={row['lookahead']}"
    return f"W={row['window']}" + (" bal" if row.get("order") == "balanced" else "")


def _gop_rows(results: list[dict], series: str, order: str, key: str) -> list[dict]:
    return sorted((r for r in results if r["series"] == series and r.get("order") == order),
                  key=lambda r: r[key])


def plot(results: list[dict], rho: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 8.5))
    for series, (color, marker, legend) in STYLES.items():
        for order in ORDERS:
            gop = _gop_rows(results, series, order, "window")
            if gop:
                _draw(left, gop, "deff", color, marker, f"GopShuffle {order}: {legend}",
                      balanced=order == "balanced")
        for r in results:
            if r["series"] == series and r.get("order") is None and series != "loader-uniform-L":
                shape = "X" if r["name"] == "SequentialFrames" else "P"
                left.scatter(r["deff"], r["fps_median"], marker=shape, s=70, color=color,
                             edgecolors="black", zorder=3)
                left.annotate(f"{_label(r)} ({series})", (r["deff"], r["fps_median"]), fontsize=6,
                              xytext=(4, -8), textcoords="offset points", color=color)
    uniform = sorted((r for r in results if r["name"] == "RandomFrames"
                      and r["series"] in ("loader-L4", "loader-uniform-L")),
                     key=lambda r: r["unit_samples_max"])
    if uniform:
        _draw(right, uniform, "unit_samples_max", "tab:red", "*",
              f"RandomFrames (exact, deff {uniform[0]['deff']:.2f}), VideoLoader lookahead 4..epoch")
    for series in ("units", "loader-L4", "loader-Lpref"):
        color, marker, legend = STYLES[series]
        for order in ORDERS:
            gop = _gop_rows(results, series, order, "unit_samples_max")
            if gop:
                _draw(right, gop, "unit_samples_max", color, marker,
                      f"GopShuffle {order}: {legend}", balanced=order == "balanced")
    left.set_xlabel("design effect  deff = 1 + (m̄_gop−1)·ρ_gop + (m̄_video−m̄_gop)·ρ_video"
                    f"\n(ρ_gop = {rho['gop']:.2f}, ρ_video = {rho['video']:.2f}; "
                    "effective batch = 64 / deff)   X: SequentialFrames, P: RandomFrames")
    left.set_title("throughput against statistical cost")
    right.set_xlabel("samples one worker holds in flight (largest decode unit)")
    right.set_title("throughput against memory (same runs)")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_ylabel("frames / s  (batch 64, 112×112, 2-core CPU)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    left.set_xticks([1, 1.5, 2, 3, 5, 7, 10, 15, 20])
    fig.suptitle("GopShuffle window W (uniform order: filled, balanced order: hollow, dash-dot) "
                 "against SequentialFrames (ceiling) and RandomFrames (exact)\n"
                 "solid / dash-dot = measured median, dotted = predicted from the plans "
                 "(rows never timed: predicted only)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _draw(ax, rows: list[dict], x: str, color: str, marker: str, legend: str,
          balanced: bool = False) -> None:
    style = {"linestyle": "-.", "markerfacecolor": "white"} if balanced else {}
    timed = [r for r in rows if r.get("fps_median") is not None]
    pred = [r for r in rows if r.get("fps_predicted") is not None]
    if timed:
        ax.plot([r[x] for r in timed], [r["fps_median"] for r in timed], marker=marker,
                color=color, label=legend, **style)
    ax.plot([r[x] for r in pred], [r["fps_predicted"] for r in pred], marker=marker,
            color=color, linestyle=":", markerfacecolor="none", alpha=0.6,
            label=None if timed else f"{legend} (predicted)")
    for r in timed or pred:
        y = r["fps_median"] if timed else r["fps_predicted"]
        ax.annotate(_label(r), (r[x], y), fontsize=6, xytext=(3, -9 if balanced else 3),
                    textcoords="offset points", color=color)

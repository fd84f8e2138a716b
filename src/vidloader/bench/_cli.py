"""``vidloader bench``: every benchmark of vidloader, one subcommand each (listed under
"commands" below; ``vidloader bench COMMAND --help`` describes one).

Without a subcommand the options are ``run``'s (``vidloader bench --workload random`` is
``vidloader bench run --workload random``, the form used before the subcommands). Examples::

    vidloader bench run --workload random --backends vidloader,naive,decord,opencv,torchcodec \\
        --dataset W1 --scale tiny --batches 20 --workers 2 --out benchmarks/results/cpu/
    vidloader bench table --results benchmarks/results/cpu --top-level > section.md
    python -m vidloader.bench ...     # the same, where the vidloader command is not on the PATH

Each subcommand imports what it measures (torch, a peer's library) only when it runs, so that
``vidloader --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import math
import sys
from collections.abc import Callable

from ..errors import VidloaderError
from ._backends import BACKEND_ALIASES, backend_names
from ._datasets import DATASETS, SCALES
from ._workloads import ALIASES, WORKLOADS

_RAW = argparse.RawDescriptionHelpFormatter
_USAGE = "%(prog)s [-h] [COMMAND] [options]"


def register_bench(sub) -> None:
    """Add the ``bench`` subcommand to an ``argparse`` sub-parser collection."""
    p = sub.add_parser("bench", help="benchmarks: vidloader against its peers, NVDEC sweeps "
                       "and probes, sampling trade-offs", description=__doc__, formatter_class=_RAW,
                       usage=_USAGE)
    _add_commands(p)


def main(argv: list[str] | None = None) -> int:
    """``python -m vidloader.bench``: the ``bench`` subcommand on its own."""
    parser = argparse.ArgumentParser(prog="python -m vidloader.bench", description=__doc__,
                                     formatter_class=_RAW, usage=_USAGE)
    _add_commands(parser)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except VidloaderError as exc:
        print(f"vidloader bench: error: {exc}", file=sys.stderr)
        return 2


def _handler(module: str) -> Callable[[argparse.Namespace], int]:
    """``run(args)`` of ``vidloader.bench.<module>``, imported when the command runs."""
    def handler(args: argparse.Namespace) -> int:
        return importlib.import_module(f"{__package__}.{module}").run(args)

    handler.module = module  # which command it runs, for tests and debugging
    return handler


def _add_commands(p: argparse.ArgumentParser) -> None:
    add_arguments(p)  # the form before subcommands: ``vidloader bench --workload ...``
    p.set_defaults(func=_handler("_run"))
    # prog: the subcommands' usage starts "vidloader bench sweep", not with _USAGE.
    sub = p.add_subparsers(dest="bench_command", metavar="COMMAND", prog=p.prog,
                           title="commands (default: run)")
    for name, module, add, summary in _COMMANDS:
        cmd = sub.add_parser(name, help=summary, formatter_class=_RAW,
                             description=f"{summary}.\n\n{inspect.cleandoc(add.__doc__)}")
        add(cmd)
        cmd.set_defaults(func=_handler(module))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every (workload, backend) pair runs in its own process (``--no-isolate``: in this one)
    after a warm-up as deep as the backend's prefetch; each workload's report (a table, a
    JSON file and a PNG plot) goes under ``--out``. See benchmarks/README.md."""
    workloads = ", ".join([*WORKLOADS, *ALIASES])
    backends = ", ".join([*backend_names(), *BACKEND_ALIASES, "all"])
    p.add_argument("--workload", default="random", help=f"comma-separated: {workloads}")
    p.add_argument("--backends", default="cpu", help=f"comma-separated: {backends}")
    p.add_argument("--dataset", choices=DATASETS, help="default: each workload's own")
    p.add_argument("--scale", choices=SCALES, default="tiny", help="dataset size (default tiny)")
    p.add_argument("--batches", type=int, default=20, help="timed batches (default 20)")
    p.add_argument("--warmup", type=int, default=2,
                   help="untimed batches first (default 2; raised per backend to its prefetch depth)")
    p.add_argument("--workers", type=int, default=None, help="workers per loader (default: cores)")
    p.add_argument("--batch-size", type=int, default=None, help="override the workload's")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="move every batch there, e.g. cuda")
    p.add_argument("--memory-budget", default=None,
                   help="VideoLoader(memory_budget=...) for the NVDEC and combo backends, "
                        "e.g. 3GiB (default: none)")
    p.add_argument("--out", default="benchmarks/results", help="directory for JSON and PNG")
    p.add_argument("--data-dir", default=None, help="dataset cache (default ~/.cache/vidloader/bench)")
    p.add_argument("--note", default="", help="free text stored with the environment")
    p.add_argument("--max-seconds", type=float, default=60.0,
                   help="end a backend's timed window after about this long (default 60)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run (default 900)")
    p.add_argument("--no-isolate", action="store_true", help="run backends in this process")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")


def _sweep_arguments(p: argparse.ArgumentParser) -> None:
    """On the GPU machine, over the W1 dataset at --scale: one JSON line per configuration
    (frames/s, decoded frames per delivered frame, NVDEC and GPU utilisation from nvidia-smi),
    all of them also in --out. It chooses defaults (decoder threads, frame cache,
    non-reference skipping, units queued on the decoders); the published figures come from
    ``run``."""
    p.add_argument("--out", required=True, help="JSON file of every configuration's result")
    p.add_argument("--scale", default="gpu-quick", choices=SCALES)
    p.add_argument("--data-dir", default="/tmp/bench-data")
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--warmup", type=int, default=48,
                   help="untimed batches: at least 3x the work queued ahead (4 units of 4)")
    p.add_argument("--ceiling-seconds", type=float, default=8.0)
    p.add_argument("--only", default="", help="comma-separated sampler names to run")
    p.add_argument("--configs", default="",
                   help="run these instead of the built-in list: comma-separated sampler:decoders"
                        "[:nvdec_option=int...], e.g. sequential:24,random:16:units_decoding=2")
    p.add_argument("--no-ceiling", action="store_true")
    p.add_argument("--repeat", type=int, default=1,
                   help="list the videos this many times (as run does), so that an epoch "
                        "holds the whole run: an epoch's end drains the pipeline")
    p.add_argument("--profile", action="store_true",
                   help="sample every thread's stack during each configuration")


def _probe_arguments(p: argparse.ArgumentParser) -> None:
    """Part 1 (facts): what PyNvVideoCodec's low-level API does with hand-built packets (pts,
    output latency, DLPack layout, reuse after a flush, reconfiguration, surface recycling).
    Part 2 (throughput) over synthetic 1080p H.264 videos: raw demuxer + decoder on 1 and 8
    threads, the NVDEC executor sequential and on random frames, with nvidia-smi's decoder
    utilisation."""
    p.add_argument("--out", default="nvdec_probe.json", help="JSON file of the results")
    p.add_argument("--videos", type=int, default=16)
    p.add_argument("--frames", type=int, default=75)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--skip-facts", action="store_true", help="part 2 only")


def _agreement_arguments(p: argparse.ArgumentParser) -> None:
    """Batches of the multicam-random workload (native size: no resize blurs the comparison)
    against vidloader's CPU backend, as a mean absolute difference per batch (0: identical; a
    wrong frame gives tens). Exits 1 if a backend that ran differs by more than --tolerance."""
    p.add_argument("--backends", default="naive,decord,opencv,torchcodec")
    p.add_argument("--scale", default="tiny", choices=SCALES)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--batches", type=int, default=3)
    p.add_argument("--tolerance", type=float, default=4.0)


def _tradeoff_arguments(p: argparse.ArgumentParser) -> None:
    """GopShuffle at several windows, in its two in-block orders, against SequentialFrames
    (the speed ceiling) and RandomFrames (exact uniform sampling): frames/s, decoded frames per
    delivered frame, design effect, intra-GOP correlation and the throughput predicted from
    the plans. Run from the repository root: it writes --json and --plot there."""
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="fewer windows and repeats")
    p.add_argument("--media", default="/tmp/vidloader_sampling_media")
    p.add_argument("--json", default="benchmarks/results/cpu/sampling_tradeoff.json")
    p.add_argument("--plot", default="docs/sampling_tradeoff.png")
    p.add_argument("--series", nargs="+",
                   help="measure only these series (loader-L4, loader-Lpref, loader-uniform-L, "
                        "loader-w2, units) and replace them in an existing --json")
    p.add_argument("--orders", nargs="+", choices=("uniform", "balanced"),
                   default=["uniform", "balanced"],
                   help="GopShuffle orders to measure (rows of the others are kept)")
    p.add_argument("--stats-only", action="store_true",
                   help="recompute statistics and planned costs; keep --json's timings")
    p.add_argument("--plot-only", action="store_true", help="redraw the plot from --json")


def _table_arguments(p: argparse.ArgumentParser) -> None:
    """Every figure links to the JSON it comes from. --merge-run treats every JSON under
    --results as one run whose backends were benched one by one (benchmarks/gpu_run.sh): one
    table per workload, with ratios across them. Prints the section on standard output."""
    p.add_argument("--results", default="benchmarks/results")
    p.add_argument("--base", default=".", help="directory of the README (links start here)")
    p.add_argument("--heading", default="## Performance")
    p.add_argument("--top-level", action="store_true", help="only the JSON directly in --results")
    p.add_argument("--no-preamble", action="store_true", help="tables only, no column notes")
    p.add_argument("--merge-run", action="store_true",
                   help="merge per-backend reports of one run (gpu_run.sh) by workload")


def _gop_cost_arguments(p: argparse.ArgumentParser) -> None:
    """Generates --videos synthetic sources with GOP max(--gops) and B-frames, re-encodes them
    with ``prepare_dataset`` at each of --gops, and measures each dataset's bytes on disk and
    random frames/s (RandomFrames, the same seed, batch and size). Writes --out (JSON) and
    prints a Markdown table with the speed-up and disk cost against the first GOP."""
    p.add_argument("--gops", default="250,30,8", help="comma-separated, first is the baseline")
    p.add_argument("--videos", type=int, default=6)
    p.add_argument("--frames", type=int, default=500, help="frames per video")
    p.add_argument("--width", type=int, default=320)
    p.add_argument("--height", type=int, default=240)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--size", type=int, default=112, help="frames resized to SIZE x SIZE")
    p.add_argument("--batches", type=int, default=10, help="timed batches")
    p.add_argument("--workers", type=int, default=None,
                   help="encoding processes (decoding runs in this process, on one core)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default="/tmp/vidloader-gop-cost")
    p.add_argument("--out", default="benchmarks/results/cpu/gop_cost/gop_cost.json")
    p.add_argument("--note", default="", help="free text stored with the environment")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _contender_names(text: str) -> list[str]:
    """``--contenders``: short names known to the JPEG workload (any case), none twice."""
    from ._images import JPEG_CONTENDERS

    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    choices = ", ".join(JPEG_CONTENDERS)
    if not names:
        raise argparse.ArgumentTypeError(f"no contender named in {text!r}; choose from {choices}")
    unknown = [name for name in names if name not in JPEG_CONTENDERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown contender(s) {', '.join(unknown)}; choose from {choices}")
    return list(dict.fromkeys(names))


def _images_arguments(p: argparse.ArgumentParser) -> None:
    """CIFAR-10 epoch (vidloader on --device against the seed's torchvision-style CPU
    pipeline) and a generated JPEG folder at 224² (Pillow workers, nvImageCodec, decode-only
    peers, DALI when installed). JSON per workload under --out."""
    p.add_argument("--workload", default="cifar,jpeg",
                   help="comma-separated: cifar, jpeg, resize (augmentation alone)")
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--batch-size", type=int, default=256, help="jpeg batch size (default 256)")
    p.add_argument("--batches", type=int, default=40, help="timed jpeg batches (default 40)")
    p.add_argument("--cpu-batches", type=int, default=20,
                   help="timed batches of the torchvision-style CIFAR reference (default 20)")
    p.add_argument("--images", type=int, default=5000, help="JPEGs to generate (default 5000)")
    p.add_argument("--copies", type=int, default=1,
                   help="hard links per generated JPEG, for epochs longer than the files "
                        "generated (default 1: none)")
    p.add_argument("--workers", type=int, default=None, help="Pillow workers (default: cores)")
    p.add_argument("--rounds", type=_positive, default=1,
                   help="jpeg on a GPU: run the GPU contenders this many times, the order reversed every "
                        "other round; each keeps its rates and their median, and the ratio to "
                        "DALI is taken within each round (default 1)")
    p.add_argument("--contenders", type=_contender_names, default=None, metavar="NAMES",
                   help="jpeg: comma-separated, the contenders to run, in the bench's own order "
                        "(default: all): pillow, vidloader, vidloader-workers, nvimgcodec, nvjpeg, "
                        "torchvision, dali. 'vidloader,dali' gives more rounds of the ratio in "
                        "the same time")
    p.add_argument("--host-ms", type=_non_negative_float, default=0.0,
                   help="jpeg: milliseconds the consumer works on the host after each batch, "
                        "standing in for a training step's host side (default 0: it only "
                        "counts). The loaders run beside it; the decode-alone rows decode on "
                        "the consumer's thread, so for them it follows each decode")
    p.add_argument("--host-work", choices=("torch", "python"), default="torch",
                   help="with --host-ms: small torch ops one after another (each lets go of the "
                        "GIL, as a model's do; default) or a pure-Python loop (the GIL given up "
                        "only at Python's switch interval: the worst case)")
    p.add_argument("--data-dir", default=None, help="default ~/.cache/vidloader/bench-images")
    p.add_argument("--resize-reps", type=int, default=5, help="timed batches per resize method")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads for the resize workload (default: torch's)")
    p.add_argument("--out", default="benchmarks/results/images")


#: (name, module holding ``run(args)``, options, one line): the subcommands of ``bench``.
_COMMANDS = [
    ("run", "_run", add_arguments,
     "vidloader against its peers on the same files, frames and batch shapes"),
    ("images", "_images", _images_arguments,
     "image loading: CIFAR-10 epoch and JPEG folder against their peers (issue 15)"),
    ("sweep", "_sweep", _sweep_arguments,
     'VideoLoader(backend="nvdec") settings beside the raw NVDEC ceiling (GPU machine)'),
    ("probe", "_probe", _probe_arguments,
     "PyNvVideoCodec's behaviour and NVDEC throughput, in one run (GPU machine)"),
    ("agreement", "_agreement", _agreement_arguments,
     "check that every backend of run delivers the planned frames"),
    ("tradeoff", "_tradeoff", _tradeoff_arguments,
     "GopShuffle's throughput against its statistical cost, beside the anchors (CPU)"),
    ("gop-cost", "_gop_cost", _gop_cost_arguments,
     "random-access speed-up of `vidloader prepare --gop N` against its disk cost (CPU)"),
    ("table", "_table", _table_arguments,
     "the README's performance section from the JSON files of run"),
]

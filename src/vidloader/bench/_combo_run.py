"""The combo against its parts, in one process run: CPU alone, NVDEC alone, both at once.

For each workload (W1 uniform random frames at 224², W4 Kinetics-like 16-frame clips with
stride 2 and a 112² crop) it runs ``VideoLoader`` with ``backend="cpu"``, ``"nvdec"`` and
``"combo"`` (and the static ``combo_share`` split) on the same dataset and writes one JSON:
frames/s of each, each executor's share of the combo's rows, CPU and NVDEC utilisation, and
``combo / (cpu + nvdec)``.

A variant ``A+B`` (e.g. ``cpu+nvdec``) runs variants ``A`` and ``B`` at once, each in a
process of its own, with their timed windows at the same moments: what the machine gives two
independent loaders sharing its cores, memory and GPU, against which the combo's coordination
is judged (``over_pair``), beside the sum of each alone (``over_sum``). A side ``A@N`` runs
under niceness ``N`` (``cpu@10+nvdec``: the CPU side as niced as the combo's CPU workers),
``A~R`` off the first ``R`` cores (``cpu~4+nvdec``).

Timing: a warm-up of ``--warmup-s`` seconds (and at least ``num_workers + prefetch`` batches, so the
staging slots are full and the window sees production, not a drain of what was made before),
then ``--windows`` timed windows of ``--window-s`` seconds each; frames/s is reported per
window, with the minimum and median. Runs on the GPU machine::

    python -m vidloader.bench._combo_run --scale gpu-quick --workers 16 --out combo.json
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import statistics
import time


def _frames_in(batch) -> int:
    f = batch["frames"]
    return f.shape[0] * (f.shape[1] if f.dim() == 5 else 1)


def _endless(loader):
    """The loader's batches, epoch after epoch (small datasets end before the windows do)."""
    while True:
        yield from loader


def _rows(loader) -> dict:
    return dict(loader.stats["rows_by_executor"])


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _measure(make_loader, *, warmup_s: float, windows: int, window_s: float,
             profile: bool = False, start_at: float | None = None) -> dict:
    """Frames/s of ``windows`` consecutive windows of one loader's steady state; with
    ``profile``, where the loader process's threads spent the timed windows
    (:class:`~vidloader.bench._stacks.StackSampler`, every 10 ms). ``start_at``: the warm-up
    also lasts until this ``time.time()`` (a pair's two processes time the same moments)."""
    from vidloader.bench._monitor import Monitor
    from vidloader.bench._stacks import StackSampler

    monitor = Monitor().start()
    t_created = time.perf_counter()
    loader = make_loader()
    it = _endless(loader)
    next(it)
    first_batch_s = time.perf_counter() - t_created
    plan = getattr(loader, "memory_plan", None)  # NVDEC's, with the decoder threads it chose
    t_warm, warm_batches = time.perf_counter(), 1
    while (time.perf_counter() - t_warm < warmup_s or warm_batches < loader.num_workers + loader.prefetch
           or (start_at is not None and time.time() < start_at)):
        next(it)
        warm_batches += 1
    _sync()
    late_s = None if start_at is None else time.time() - start_at
    rows0 = _rows(loader)
    decode0 = copy.copy(loader.decode_stats)  # a live counter: keep its values now
    steals0 = getattr(getattr(loader, "_pool", None), "steals", None)
    sampler = StackSampler(interval=0.01).start() if profile else None
    if sampler:
        sampler.phase = "timed"
    rates, gaps, t0 = [], [], time.monotonic()
    for _ in range(windows):
        start, frames = time.perf_counter(), 0
        last = start
        while time.perf_counter() - start < window_s:
            frames += _frames_in(next(it))
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
        _sync()
        rates.append(frames / (time.perf_counter() - start))
    t1 = time.monotonic()
    if sampler:
        sampler.stop()
    rows1 = _rows(loader)
    decode1 = copy.copy(loader.decode_stats)
    stats = dict(loader.stats)
    pool = getattr(loader, "_pool", None)
    idle = dict(getattr(pool, "idle_s", {}))  # the combo's dealing
    steals = getattr(pool, "steals", None)  # CPU units NVDEC took over (COMBO_STEAL), timed
    steals = None if steals is None or steals0 is None else steals - steals0
    it.close()
    loader.shutdown()
    monitor.stop()
    share = {k: rows1.get(k, 0) - rows0.get(k, 0) for k in rows1}
    total = sum(share.values()) or 1
    return {"frames_per_s": statistics.median(rates), "frames_per_s_min": min(rates),
            "frames_per_s_windows": rates, "window_s": window_s, "warmup_batches": warm_batches,
            "first_batch_s": first_batch_s,
            # a process's decoder threads, with nvdec_processes
            "nvdec_decoders": None if plan is None else plan["decoders"],
            **({} if plan is None else {"memory_plan": plan}),
            **({} if late_s is None else {"started_late_s": round(late_s, 3)}),
            # how evenly batches come: a combo delivering in bursts shows long gaps
            "batch_gap_ms": _gap_summary(gaps),
            "rows_by_executor_timed": share,
            "share_by_executor_timed": {k: v / total for k, v in share.items()},
            "cpu_fallback_files": len(stats["cpu_fallback_files"]),
            # frames decoded per frame delivered over the windows (units finished in them)
            "decoded_per_delivered": round((decode1.decoded - decode0.decoded)
                                           / max(1, decode1.delivered - decode0.delivered), 3),
            "combo_cpu_idle_s": {k: round(v, 2) for k, v in idle.items()},
            "combo_steals": steals,
            **({"profile": sampler.summary(top=8)} if sampler else {}),
            **monitor.summary(t0, t1)}


#: Times the ``W4-clips-head`` workload lists W4's videos, each repeat under hard links of its
#: own (as the bench's ``clips-head``), so that no cache keyed by path serves a clip twice
#: within ``HEAD_REPEATS × videos`` clips.
HEAD_REPEATS = 40
#: Times the ``W1-sequential`` and ``W1-relaxed`` workloads list W1's videos (gpu-quick: 100
#: videos of 60 frames, so an epoch of 20 repeats lasts ~50 s at 2,500 frames/s).
STREAM_REPEATS = 20


def _workloads():
    """Each workload: ``(dataset, loader arguments, index transform or None)``."""
    from vidloader import Clips, GopShuffle, Process, RandomFrames, SequentialFrames
    from vidloader.bench._workloads import HEAD_CLIPS, _linked_repeats

    clips_proc = Process(size=(112, 112), short_side=128, crop="random")
    return {
        "W1-random": ("W1", dict(sampler=RandomFrames(seed=0), batch_size=128, size=(224, 224)), None),
        # Issue 16 item 2 (the raw NVDEC ceiling): stream order and GopShuffle over W1 listed
        # STREAM_REPEATS times, so a window never spans an epoch's end (the bench's
        # repeat_index does the same).
        "W1-sequential": ("W1", dict(sampler=SequentialFrames(), batch_size=128, size=(224, 224)),
                          _listed_again),
        "W1-relaxed": ("W1", dict(sampler=GopShuffle(seed=0), batch_size=128, size=(224, 224)),
                       _listed_again),
        "W4-clips": ("W4", dict(sampler=Clips(sequence_length=16, stride=2, seed=0), batch_size=8,
                               processing=clips_proc), None),
        # SPDL's Kinetics setting (issue 16 item 4): each video's first 16 frames, once each.
        "W4-clips-head": ("W4", dict(sampler=Clips(seed=0, **HEAD_CLIPS), batch_size=8,
                                     processing=clips_proc),
                          lambda index: _linked_repeats(index, HEAD_REPEATS)),
        # accvlab's workload (issue 16 item 3): 8 rigs × 6 cameras a batch, stream order,
        # native size (the bench's multicam-stream); the sampler needs the rigs' positions.
        "W3-stream": ("W3", dict(batch_size=8, sampler_for=functools.partial(_rigs, order="stream")),
                      None),
        # The same with the rigs listed STREAM_REPEATS times: at the gpu scale an epoch is 60
        # batches (1.7 s), so W3-stream's windows time epoch restarts as much as the stream;
        # here a window lies inside one epoch, as in a dataset of many rigs.
        "W3-stream-long": ("W3", dict(batch_size=8, sampler_for=_repeated_stream_rigs),
                           _listed_again),
        # accvlab's random order (issue 16 item 3: >= 1,000 frames/s): uniform (rig, frame)
        # draws, 8 a batch, 6 cameras each, native size (the bench's multicam-random).
        "W3-random": ("W3", dict(batch_size=8, sampler_for=functools.partial(_rigs, order="random")),
                      None),
    }


def _rigs(index, dataset, *, order: str, repeats: int = 1):
    """The bench's multicam sampler (``order``: ``"stream"`` or ``"random"``) over
    ``dataset``'s rigs in ``index``, which lists the dataset's videos ``repeats`` times: each
    repeat's rigs at that repeat's positions."""
    from vidloader import VideoIndex
    from vidloader.bench._multicam import multicam_sampler
    from vidloader.bench._workloads import rig_positions

    n = len(index) // repeats
    rigs = rig_positions(index if repeats == 1 else VideoIndex(list(index)[:n]), dataset)
    return multicam_sampler([[p + k * n for p in rig] for k in range(repeats) for rig in rigs],
                            order=order)


def _repeated_stream_rigs(index, dataset):
    """The stream sampler over an index listed by :func:`_listed_again`."""
    return _rigs(index, dataset, order="stream", repeats=STREAM_REPEATS)


def _listed_again(index):
    """``index`` listed :data:`STREAM_REPEATS` times (the same files)."""
    from vidloader import VideoIndex

    return VideoIndex(list(index) * STREAM_REPEATS)


def _combo(patches: dict | None = None, **loader) -> tuple[dict, dict]:
    """A combo variant: ``(loader arguments, constants of _combo patched for its run)``."""
    return {"backend": "combo", **loader}, patches or {}


def _tap_off() -> bool:
    """Stands in for ``_status_tap.enabled`` in the ``nvdec-notap`` variant."""
    return False


def _decoders_past_the_cap(n: int) -> tuple[dict, dict]:
    """An NVDEC variant of ``n`` decoder threads, the cap (``MAX_DECODERS_PER_GPU``, read by
    the config and the decoder pool) raised to ``n`` for its run."""
    cap = {"pipeline._config:MAX_DECODERS_PER_GPU": n,
           "decoding.nvdec._pool:MAX_DECODERS_PER_GPU": n}
    return {"backend": "nvdec", "nvdec_decoders": n}, cap


#: Each variant: the loader's arguments, and constants patched for its run (diagnostics):
#: ``NAME`` of ``vidloader.pipeline._combo``, or ``module:NAME`` of ``vidloader.<module>``.
VARIANTS: dict[str, tuple[dict, dict]] = {
    "cpu": ({"backend": "cpu"}, {}),
    "nvdec": ({"backend": "nvdec"}, {}),
    "combo": _combo(),
    "combo-share-0.5": _combo(combo_share=0.5),
    "combo-share-0.4": _combo(combo_share=0.4),
    "combo-horizon0": _combo({"CPU_HORIZON_SAFETY": 0.0}),
    "combo-div2": _combo({"COMBO_DEMUX_DIVISOR": 2}),
    "combo-div8": _combo({"COMBO_DEMUX_DIVISOR": 8}),
    # the demux workers out of num_workers, as before session 11
    "combo-within": _combo({"COMBO_DEMUX_EXTRA": False}),
    # units of at least 8 rows (a whole W4 batch) instead of one clip
    "combo-unit8": _combo({"COMBO_MIN_UNIT_ROWS": 8}),
    # a longer window of staging slots (the default prefetch is 2): a batch waiting on a slow
    # CPU unit holds every later one back, and the combo's sides idle once the slots are full
    "cpu-pf16": ({"backend": "cpu", "prefetch": 16}, {}),
    "combo-pf16": _combo(prefetch=16),
    "combo-pf32": _combo(prefetch=32),
    "combo-pf64": _combo(prefetch=64),
    "combo-h0-pf16": _combo({"CPU_HORIZON_SAFETY": 0.0}, prefetch=16),
    "combo-h0-pf32": _combo({"CPU_HORIZON_SAFETY": 0.0}, prefetch=32),
    # a CPU worker holds one unit at a time (half the wait of a unit handed out behind another)
    "combo-1unit": _combo({"CPU_UNITS_PER_WORKER": 1}),
    "combo-h0-1unit": _combo({"CPU_UNITS_PER_WORKER": 1, "CPU_HORIZON_SAFETY": 0.0}),
    # a long window and one unit per CPU worker
    "combo-pf32-1unit": _combo({"CPU_UNITS_PER_WORKER": 1}, prefetch=32),
    "combo-pf64-1unit": _combo({"CPU_UNITS_PER_WORKER": 1}, prefetch=64),
    # more demux workers for NVDEC: half as many as num_workers, or as many
    "combo-h0-div2": _combo({"COMBO_DEMUX_DIVISOR": 2, "CPU_HORIZON_SAFETY": 0.0}),
    "combo-h0-div1": _combo({"COMBO_DEMUX_DIVISOR": 1, "CPU_HORIZON_SAFETY": 0.0}),
    # NVDEC, with room and nothing queued, takes over the slow CPU unit holding its batches back
    "combo-steal": _combo({"COMBO_STEAL": True}),
    "combo-h0-steal": _combo({"COMBO_STEAL": True, "CPU_HORIZON_SAFETY": 0.0}),
    # Is NVDEC short of CPU in the combo (session15-2: the machine 90-95% busy, NVDEC at half
    # its pace alone)? The CPU decoders at the lowest priority, or fewer of them.
    "combo-h0-nice19": _combo({"CPU_HORIZON_SAFETY": 0.0, "COMBO_CPU_NICE": 19}),
    "combo-h0-w12": _combo({"CPU_HORIZON_SAFETY": 0.0}, num_workers=12),
    "combo-h0-w8": _combo({"CPU_HORIZON_SAFETY": 0.0}, num_workers=8),
    # The CPU decoders kept off 0, 2 or 4 cores, left to the threads feeding NVDEC (session16-1:
    # beside a CPU loader, NVDEC alone fell to 54% of its pace, niced or not). Since session
    # 16 the default keeps one core per demux worker (4 at 16 workers).
    "combo-h0-reserve0": _combo({"CPU_HORIZON_SAFETY": 0.0, "COMBO_RESERVED_CORES": 0}),
    "combo-h0-reserve2": _combo({"CPU_HORIZON_SAFETY": 0.0, "COMBO_RESERVED_CORES": 2}),
    "combo-h0-reserve4": _combo({"CPU_HORIZON_SAFETY": 0.0, "COMBO_RESERVED_CORES": 4}),
    "combo-h0-reserve6": _combo({"CPU_HORIZON_SAFETY": 0.0, "COMBO_RESERVED_CORES": 6}),
    # As before session 15's two mends: the workers' liveness asked after every 2 ms wait,
    # and the monitor walking the machine's processes every 200 ms, both in the loader's
    # process (session15-3's profile).
    "nvdec-tree0": ({"backend": "nvdec"}, {"bench._monitor:CHILDREN_FILES": False}),
    # NVDEC on many small units (W4-clips-head, session17-1: NVDEC 13% busy, 2 of 16 cores):
    # more units queued on the decoders; units of one batch; more decoder threads; the
    # status tap off (its per-GOP hand-over to a reader thread).
    "nvdec-units8": ({"backend": "nvdec", "nvdec_options": {"units_decoding": 8}}, {}),
    "nvdec-units16": ({"backend": "nvdec", "nvdec_options": {"units_decoding": 16}}, {}),
    "nvdec-la1-units16": ({"backend": "nvdec", "lookahead": 1,
                           "nvdec_options": {"units_decoding": 16}}, {}),
    "nvdec-dec8": ({"backend": "nvdec", "nvdec_decoders": 8}, {}),
    "nvdec-notap": ({"backend": "nvdec"}, {"decoding.nvdec._status_tap:enabled": _tap_off}),
    # session17-3's profile of that workload: the decoder threads all in Python (the GIL), a
    # fifth of it copying each frame into its stack, a tenth putting frames into the frame
    # cache (no clip repeats there), a third converting stacks of 8 (two per 16-frame clip).
    "nvdec-stack16": ({"backend": "nvdec", "nvdec_options": {"stack_frames": 16}}, {}),
    "nvdec-nocache": ({"backend": "nvdec", "nvdec_options": {"frame_cache_bytes": 0}}, {}),
    "nvdec-stack16-nocache": ({"backend": "nvdec",
                               "nvdec_options": {"stack_frames": 16, "frame_cache_bytes": 0}}, {}),
    "nvdec-dec8-stack16-nocache": ({"backend": "nvdec", "nvdec_decoders": 8,
                                    "nvdec_options": {"stack_frames": 16, "frame_cache_bytes": 0}}, {}),
    "nvdec-dec4-stack16-nocache": ({"backend": "nvdec", "nvdec_decoders": 4,
                                    "nvdec_options": {"stack_frames": 16, "frame_cache_bytes": 0}}, {}),
    # session17-5: 16 → 8 → 4 decoder threads gave 2,024 → 2,318 → 2,865 frames/s there
    "nvdec-dec2-stack16-nocache": ({"backend": "nvdec", "nvdec_decoders": 2,
                                    "nvdec_options": {"stack_frames": 16, "frame_cache_bytes": 0}}, {}),
    "nvdec-dec4": ({"backend": "nvdec", "nvdec_decoders": 4}, {}),
    # the default before nvdec_decoders=None picked threads by frame size
    "nvdec-dec16": ({"backend": "nvdec", "nvdec_decoders": 16}, {}),
    "nvdec-dec4-nocache": ({"backend": "nvdec", "nvdec_decoders": 4,
                            "nvdec_options": {"frame_cache_bytes": 0}}, {}),
    # Several NVDEC loaders at once, each in its own process with a GIL of its own (run as
    # a pair "nvdec-w4+nvdec-w4+..."): does NVDEC's pace follow processes where it does not
    # follow threads (session17-3: the decoder threads GIL-bound)?
    "nvdec-w4": ({"backend": "nvdec", "num_workers": 4}, {}),
    "nvdec-w8": ({"backend": "nvdec", "num_workers": 8}, {}),
    # NVDEC in 2 / 4 / 6 / 8 worker processes of one loader (nvdec_processes, session 18)
    "nvdec-p2": ({"backend": "nvdec", "nvdec_processes": 2}, {}),
    "nvdec-p4": ({"backend": "nvdec", "nvdec_processes": 4}, {}),
    "nvdec-p6": ({"backend": "nvdec", "nvdec_processes": 6}, {}),
    "nvdec-p8": ({"backend": "nvdec", "nvdec_processes": 8}, {}),
    "nvdec-p4-dec8": ({"backend": "nvdec", "nvdec_processes": 4, "nvdec_decoders": 8}, {}),
    # session18-4: 4 processes of 8 decoders 1,221, of 4 2,943, 8 of 4 5,407: fewer threads
    # a process, more processes?
    "nvdec-p8-dec2": ({"backend": "nvdec", "nvdec_processes": 8, "nvdec_decoders": 2}, {}),
    "nvdec-p12-dec2": ({"backend": "nvdec", "nvdec_processes": 12, "nvdec_decoders": 2}, {}),
    "nvdec-p16-dec1": ({"backend": "nvdec", "nvdec_processes": 16, "nvdec_decoders": 1}, {}),
    "nvdec-p12": ({"backend": "nvdec", "nvdec_processes": 12}, {}),
    # W3-stream: GOPs of streams in worker processes (session 19), decoder threads chosen by
    # frame size as usual, or 4 each
    "nvdec-p3": ({"backend": "nvdec", "nvdec_processes": 3}, {}),
    # the NVDEC defaults until session 21 (stacks of 8, a 256 MiB frame cache), against the
    # defaults since (stacks of 16, no frame cache): "nvdec"
    "nvdec-old": ({"backend": "nvdec",
                   "nvdec_options": {"stack_frames": 8, "frame_cache_bytes": 256 << 20}}, {}),
    # session 21: the surface copies through cudaMemcpy2DAsync (the default) or copy_; more
    # decoder threads than the 16 allowed (the cap raised for the run)
    "nvdec-nomemcpy": ({"backend": "nvdec"}, {"decoding.nvdec._surface_copy:ENABLED": False}),
    "nvdec-dec24": _decoders_past_the_cap(24),
    "nvdec-dec32": _decoders_past_the_cap(32),
    # session21-7: stacks of 16 without the frame cache read W1 in stream order at 2,472
    # frames/s in one process against 1,837 with the defaults then (stacks of 8, the cache);
    # in 4 processes? (Since session 21 these are the defaults: "nvdec-p4" is the same, as
    # "nvdec-stack16-nocache" and "nvdec-nocache" are "nvdec".)
    "nvdec-p4-stack16-nocache": ({"backend": "nvdec", "nvdec_processes": 4,
                                  "nvdec_options": {"stack_frames": 16, "frame_cache_bytes": 0}}, {}),
    "nvdec-p6-dec4": ({"backend": "nvdec", "nvdec_processes": 6, "nvdec_decoders": 4}, {}),
    # W3-random is NVDEC-bound at 8 decoded per delivered frame (session 22): units of more
    # batches share more GOPs between samples of the same rig (a smaller dataset's effect).
    "cpu-la16": ({"backend": "cpu", "lookahead": 16}, {}),
    "nvdec-la16": ({"backend": "nvdec", "lookahead": 16}, {}),
    "nvdec-p4-la8": ({"backend": "nvdec", "nvdec_processes": 4, "lookahead": 8}, {}),
    "nvdec-p4-la16": ({"backend": "nvdec", "nvdec_processes": 4, "lookahead": 16}, {}),
    # session 23: GPU memory in worker processes grows with their decoder threads (each holds
    # NVDEC surfaces, a GOP stack and a conversion workspace); W3 at 1600×900 took 11-16 a
    # process (45-58 GiB in 4 processes). Fewer a process: the same pace in less memory?
    "nvdec-p4-dec4": ({"backend": "nvdec", "nvdec_processes": 4, "nvdec_decoders": 4}, {}),
    "nvdec-p4-dec2": ({"backend": "nvdec", "nvdec_processes": 4, "nvdec_decoders": 2}, {}),
    "nvdec-p4-la8-dec8": ({"backend": "nvdec", "nvdec_processes": 4, "lookahead": 8,
                           "nvdec_decoders": 8}, {}),
    "nvdec-p4-la8-dec4": ({"backend": "nvdec", "nvdec_processes": 4, "lookahead": 8,
                           "nvdec_decoders": 4}, {}),
    # one unit at a time a process (fewer staging slots: W3's are 207 MB each), and a budget
    "nvdec-p4-la8-units1": ({"backend": "nvdec", "nvdec_processes": 4, "lookahead": 8,
                             "nvdec_options": {"units_decoding": 1}}, {}),
    "nvdec-p4-units1": ({"backend": "nvdec", "nvdec_processes": 4,
                         "nvdec_options": {"units_decoding": 1}}, {}),
    "nvdec-p4-la8-24g": ({"backend": "nvdec", "nvdec_processes": 4, "lookahead": 8,
                          "memory_budget": "24GiB"}, {}),
    "nvdec-p4-dec16": ({"backend": "nvdec", "nvdec_processes": 4, "nvdec_decoders": 16}, {}),
    "combo-h0-old": _combo({"CPU_HORIZON_SAFETY": 0.0, "pipeline._pool:ALIVE_CHECK_SECONDS": 0.0,
                            "bench._monitor:CHILDREN_FILES": False}),
}

#: What runs without ``--variants``: each side alone, the combo, and seed 000's static splits.
DEFAULT_VARIANTS = ("cpu", "nvdec", "combo", "combo-share-0.5", "combo-share-0.4")


def _patch_target(key: str) -> tuple:
    """``(module, name)`` of a variant's patched constant (see :data:`VARIANTS`)."""
    import importlib

    module, _, name = key.rpartition(":")
    mod = importlib.import_module(f"vidloader.{module or 'pipeline._combo'}")
    if not hasattr(mod, name):
        raise SystemExit(f"variant patch {key!r}: {mod.__name__} has no {name}")
    return mod, name


def _gap_summary(gaps: list[float]) -> dict:
    """Median, 99th percentile and longest wait between consecutive batches, in ms, and
    the share of the timed windows spent in waits over 100 ms."""
    if not gaps:
        return {}
    ordered = sorted(gaps)
    long_s = sum(g for g in gaps if g > 0.1)
    return {"median": round(1e3 * statistics.median(ordered), 2),
            "p99": round(1e3 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
            "max": round(1e3 * ordered[-1], 2),
            "share_in_waits_over_100ms": round(long_s / sum(gaps), 3)}


def summary_lines(row: dict) -> list[str]:
    """A line per variant of one workload: frames/s (median and each window), each side's
    share, NVDEC steals of CPU units, why the CPU workers idled, CPU and NVDEC use, and the
    ratios to each side alone and to both at once (where measured)."""
    def ratios(v: dict) -> str:
        return "".join(f" {k} {v[k]:.3f}" for k in ("over_sum", "over_pair") if k in v)

    return [f"{label:16s} error: {v['error']}" if "error" in v else
            f"{label:16s} {v['frames_per_s']:7.0f} windows {[round(x) for x in v['frames_per_s_windows']]} "
            f"share {v['share_by_executor_timed']} steals {v.get('combo_steals')} "
            f"idle {v['combo_cpu_idle_s']} cpu {v.get('cpu_util_pct', 0):.0f}% "
            f"nvdec {v.get('nvdec_util_pct', 0):.0f}%{ratios(v)}" for label, v in row.items()]


def _run_variant(label: str, index, kwargs: dict, args, start_at: float | None = None) -> dict:
    """One variant measured in this process, its patched constants restored afterwards."""
    from vidloader import VideoLoader

    extra, patches = VARIANTS[label]
    targets = {k: _patch_target(k) for k in patches}
    saved = {k: getattr(*targets[k]) for k in patches}
    for k, v in patches.items():
        setattr(*targets[k], v)
    try:
        result = _measure(
            # persistent workers: a small dataset's epochs must not restart 16 processes
            lambda: VideoLoader(index, device=args.device, persistent_workers=True,
                                **{"num_workers": args.workers, **kwargs, **extra}),
            warmup_s=args.warmup_s, windows=args.windows, window_s=args.window_s,
            profile=args.profile, start_at=start_at)
    finally:
        for k, v in saved.items():
            setattr(*targets[k], v)
    settings = {**{k: v for k, v in extra.items() if k != "backend"}, **patches}
    result["settings"] = json.loads(json.dumps(settings, default=lambda v: getattr(v, "__name__", repr(v))))
    if start_at is not None:  # a pair's side: the niceness it ran at
        import os

        result["process_nice"] = os.nice(0)
        result["process_cores"] = sorted(os.sched_getaffinity(0))
    return result


def _pair_labels(label: str) -> list[str] | None:
    """``["a", "b@10"]`` for a pair label ``"a+b@10"`` (or its row key run again,
    ``"a+b@10#3"``), else ``None``."""
    label = label.partition("#")[0]
    return label.split("+") if "+" in label else None


def _side(side: str) -> tuple[str, int, int]:
    """``(variant, niceness, cores kept off)`` of one side of a pair ``NAME[@N][~R]``:
    ``"cpu@10~4"`` → ``("cpu", 10, 4)``: variant cpu at niceness 10, off the first 4 cores."""
    rest, _, reserved = side.partition("~")
    name, _, nice = rest.partition("@")
    return name, int(nice) if nice else 0, int(reserved) if reserved else 0


def _side_setup(side: str):
    """What a pair's child runs before it starts: its niceness and cores (see :func:`_side`)."""
    import os

    from vidloader.pipeline._combo import cpu_decoder_cores

    _, nice, reserved = _side(side)
    cores = cpu_decoder_cores(reserved) if reserved else None

    def setup() -> None:
        if nice:
            os.nice(nice)
        if cores:
            os.sched_setaffinity(0, cores)
    return setup


def _run_pair(labels: list[str], workload: str, args) -> dict:
    """Variants ``labels`` at once, each in a child process of this module, their timed
    windows starting at the same wall-clock moment (after every child's start-up and
    warm-up: ``--pair-slack-s`` plus ``--warmup-s`` from now)."""
    import os
    import subprocess
    import sys
    import tempfile

    start_at = time.time() + args.pair_slack_s + args.warmup_s
    with tempfile.TemporaryDirectory() as tmp:
        outs = [os.path.join(tmp, f"{i}.json") for i in range(len(labels))]
        common = ["--scale", args.scale, "--pair-slack-s", str(args.pair_slack_s), "--workers", str(args.workers), "--warmup-s", str(args.warmup_s),
                  "--window-s", str(args.window_s), "--windows", str(args.windows),
                  "--data-dir", args.data_dir, "--device", args.device, "--workloads", workload,
                  *(["--profile"] if args.profile else [])]
        children = []
        try:
            for label, out in zip(labels, outs):
                try:
                    children.append(subprocess.Popen(
                        [sys.executable, "-m", "vidloader.bench._combo_run", *common, "--variants",
                         _side(label)[0], "--start-at", repr(start_at), "--out", out],
                        preexec_fn=_side_setup(label)))
                except (OSError, subprocess.SubprocessError) as exc:  # e.g. @-5 without the right
                    raise RuntimeError(f"pair side {label!r} could not start: {exc}") from exc
            deadline = start_at + args.windows * args.window_s + PAIR_END_SLACK_S
            codes = _wait_all(children, deadline)
        finally:  # on an error, a timeout or a signal: no child goes on measuring
            _stop(children)
        if any(codes):
            raise RuntimeError(f"pair {'+'.join(labels)}: its processes exited {codes}")
        sides = {}
        for i, (label, out) in enumerate(zip(labels, outs)):
            with open(out) as f:
                side = json.load(f)["results"][workload][_side(label)[0]]
            sides[label if label not in sides else f"{label}#{i}"] = side
    windows = [sum(w) for w in zip(*(v["frames_per_s_windows"] for v in sides.values()))]
    return {"frames_per_s": statistics.median(windows), "frames_per_s_min": min(windows),
            "frames_per_s_windows": windows, "window_s": args.window_s,
            "sides": sides,
            "share_by_executor_timed": {k: v["frames_per_s"] / (sum(x["frames_per_s"] for x in sides.values()) or 1)
                                        for k, v in sides.items()},
            "combo_cpu_idle_s": {}, "combo_steals": None,
            "cpu_util_pct": sum(v.get("cpu_util_pct", 0) for v in sides.values()),
            "nvdec_util_pct": max(v.get("nvdec_util_pct", 0) for v in sides.values()),
            "started_late_s": {k: v.get("started_late_s") for k, v in sides.items()},
            "settings": {"pair": labels}}


#: Seconds a pair's processes get, after their last window was due to end, to stop and write
#: their results (a loader's shutdown, the JSON) before they are stopped as hung.
PAIR_END_SLACK_S = 120.0


def _wait_all(children: list, deadline: float) -> list[int]:
    """Exit codes of ``children``, waiting until ``deadline`` (``time.time()``) at most; the
    first to fail stops the wait (the others are stopped by the caller)."""
    while True:
        codes = [c.poll() for c in children]
        if all(code is not None for code in codes) or any(code for code in codes if code is not None):
            return [-1 if code is None else code for code in codes]
        if time.time() > deadline:
            raise RuntimeError(f"a pair's processes did not finish by their deadline (codes {codes})")
        time.sleep(0.2)


def _stop(children: list) -> None:
    """Terminate the children still running, then kill those that do not end in 10 s."""
    for c in children:
        if c.poll() is None:
            c.terminate()
    for c in children:
        try:
            c.wait(timeout=10)
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: it ignored SIGTERM
            c.kill()
            c.wait()


def _ratios(name: str, row: dict) -> None:
    """``over_sum`` (to cpu + nvdec alone) and ``over_pair`` (to both at once in two
    processes) of every combo variant and pair in ``row``."""
    total = row["cpu"]["frames_per_s"] + row["nvdec"]["frames_per_s"] if {"cpu", "nvdec"} <= row.keys() else None
    pairs = [v["frames_per_s"] for k, v in row.items()
             if _pair_labels(k) and "error" not in v and {_side(p)[0] for p in _pair_labels(k)} == {"cpu", "nvdec"}]
    pair = max(pairs, default=None)  # the best of the cpu+nvdec pairs measured
    for label, v in row.items():
        combo = (_pair_labels(label) is not None
                 or VARIANTS[label.partition("#")[0]][0]["backend"] == "combo")
        if not combo or "error" in v:
            continue
        if total:
            v["over_sum"] = v["frames_per_s"] / total
            print(name, label, "/ (cpu + nvdec) =", round(v["over_sum"], 3), flush=True)
        if pair and _pair_labels(label) is None:
            v["over_pair"] = v["frames_per_s"] / pair
            print(name, label, "/ (cpu + nvdec at once) =", round(v["over_pair"], 3), flush=True)


def main(argv=None) -> None:
    import torch

    from vidloader.bench._datasets import load_index, prepare_dataset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="gpu-quick")
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--warmup-s", type=float, default=4.0)
    ap.add_argument("--window-s", type=float, default=5.0)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--data-dir", default="/tmp/bench-data")
    ap.add_argument("--device", default="cuda", help="where batches go (cpu: a CPU-only dry run)")
    ap.add_argument("--workloads", default="W1-random,W4-clips")
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                    help="comma-separated, of: " + ", ".join(VARIANTS)
                    + "; or A+B: variants A and B at once, each in its own process")
    ap.add_argument("--out", default="combo.json")
    ap.add_argument("--profile", action="store_true",
                    help="sample the loader process's threads during the timed windows")
    ap.add_argument("--pair-slack-s", type=float, default=20.0,
                    help="seconds an A+B pair's processes get for imports and loader start-up "
                         "before their warm-up counts")
    ap.add_argument("--start-at", type=float, default=None, help=argparse.SUPPRESS)  # a pair's child
    args = ap.parse_args(argv)
    labels = args.variants.split(",")
    try:
        unknown = [p for v in labels for p in (_pair_labels(v) or [v])
                   if (_side(p)[0] if _pair_labels(v) else p) not in VARIANTS]
    except ValueError as exc:  # a side's niceness or cores not a number
        ap.error(f"a pair's side is NAME[@N][~R] with integers N and R: {exc}")
    if unknown:
        ap.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)} "
                 "(@N and ~R only on the sides of a pair A+B)")
    results = {}
    for name in args.workloads.split(","):
        dataset, kwargs, transform = _workloads()[name]
        prepared = prepare_dataset(dataset, args.scale, data_dir=args.data_dir)
        index = load_index(prepared)
        if transform is not None:
            index = transform(index)
        if "sampler_for" in kwargs:
            kwargs = dict(kwargs)
            kwargs["sampler"] = kwargs.pop("sampler_for")(index, prepared)
        row = {}
        for label in labels:
            pair = _pair_labels(label)
            runs = sum(1 for k in row if k.partition("#")[0] == label)
            key = label if not runs else f"{label}#{runs + 1}"  # a variant run again: #2, #3
            try:
                row[key] = (_run_pair(pair, name, args) if pair
                            else _run_variant(label, index, kwargs, args, start_at=args.start_at))
            except RuntimeError as exc:  # a pair that failed: the other variants still count
                if not pair:
                    raise
                row[key] = {"error": str(exc)}
            print(name, key, json.dumps(row[key]), flush=True)
        _ratios(name, row)
        results[name] = row
    for name, row in results.items() if args.start_at is None else ():  # a pair's child: no summary
        for line in summary_lines(row):
            print(name, "summary", line, flush=True)
    with open(args.out, "w") as f:
        json.dump({"scale": args.scale, "workers": args.workers, "window_s": args.window_s,
                   "windows": args.windows, "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                   "results": results}, f, indent=1)


if __name__ == "__main__":
    main()

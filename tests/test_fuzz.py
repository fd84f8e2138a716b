"""Fuzz test (issue 17, item 6): damaged copies of tiny valid MP4 files through
``build_index``, ``decode_frames`` and one loader epoch (``num_workers=0``, ``on_error="skip"``).

Each outcome must be one of: frames of the right shape, a typed :class:`VidloaderError`, a
rejection with a typed reason, or a counted skip; an intact file indexed beside the damaged
one is delivered whole and bit-exact. Any other exception fails the test, and a watchdog ends
the process (with every thread's traceback) if an example hangs.

CI runs :data:`EXAMPLES` examples (a few seconds, derandomised). A longer run::

    VIDLOADER_FUZZ_EXAMPLES=3000 VIDLOADER_FUZZ_LOG=benchmarks/results/reliability/fuzz.log \\
        python -m pytest -q tests/test_fuzz.py

appends an outcome tally to the log. Frames that decode without an error but differ from
the intact file's are counted (``decoded_differs``), not failed: FFmpeg conceals damage it
cannot see (README, Reliability).
"""

from __future__ import annotations

import collections
import faulthandler
import itertools
import json
import os
import platform
import shutil
import time

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import vidloader  # noqa: E402
from vidloader.errors import VidloaderError  # noqa: E402
from vidloader.synthetic import VideoSpec, make_video  # noqa: E402

from . import _mutate  # noqa: E402
from .media import reference_frames  # noqa: E402

EXAMPLES = int(os.environ.get("VIDLOADER_FUZZ_EXAMPLES", "24"))
LONG_RUN = "VIDLOADER_FUZZ_EXAMPLES" in os.environ
#: Seconds after which a stuck run is killed with a traceback (a hang is a failure too).
WATCHDOG_S = float(os.environ.get("VIDLOADER_FUZZ_WATCHDOG_S", "120" if not LONG_RUN else "3600"))

SEEDS = {
    "h264_bframes": VideoSpec(width=64, height=48, num_frames=12, gop=4, bframes=2, seed=31),
    "h264": VideoSpec(width=64, height=48, num_frames=12, gop=6, bframes=0, seed=32),
    "hevc": VideoSpec(codec="hevc", width=64, height=48, num_frames=10, gop=5, bframes=2, seed=33),
}


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, tuple[bytes, np.ndarray, str]]:
    """name -> (the intact file's bytes, its reference frames, an intact copy's path)."""
    root = tmp_path_factory.mktemp("fuzz_seeds")
    out = {}
    for name, spec in SEEDS.items():
        path = make_video(root / f"{name}.mp4", spec)
        out[name] = (path.read_bytes(), reference_frames(path), str(path))
    return out


def _byte_values(n: int):
    return st.binary(min_size=n, max_size=n)


_MUTATIONS = st.one_of(
    st.tuples(st.just("flip"), st.lists(st.integers(0, 2**31), min_size=1, max_size=16)),
    st.tuples(st.just("truncate"), st.floats(0.0, 0.999)),
    st.tuples(st.just("box_size"), st.integers(0, 63),
              st.one_of(st.sampled_from([0, 1, 7, 8, 9, 2**32 - 1]), st.integers(0, 2**32 - 1))),
    st.tuples(st.just("nal"), st.integers(0, 255), st.sampled_from(["length", "header", "payload"]),
              st.binary(min_size=1, max_size=64)),
)


def _apply(data: bytes, mutation: tuple) -> bytes:
    kind, *args = mutation
    if kind == "flip":
        return _mutate.flip_bits(data, args[0])
    if kind == "truncate":
        return _mutate.truncate(data, args[0])
    if kind == "box_size":
        return _mutate.set_box_size(data, *args)
    return _mutate.damage_nal(data, *args)


def _index(good: str, bad: str, tally: collections.Counter):
    index = vidloader.build_index([good, bad], num_workers=0, progress=False)
    assert good in index.paths, f"the intact file was not indexed: {index.rejected}"
    for r in index.rejected:
        assert not r.reason.startswith("unexpected"), f"untyped error while probing: {r.reason}"
        tally["rejected"] += 1
    tally["flagged"] += len(index.flagged)
    return index


def _decode(record, ref: np.ndarray, tally: collections.Counter) -> None:
    n = record.num_frames
    try:
        frames = vidloader.decode_frames(record.path, range(n), index_record=record)
    except VidloaderError as exc:
        tally[f"decode_error:{type(exc).__name__}"] += 1
        return
    assert frames.shape == (n, record.height, record.width, 3) and str(frames.dtype) == "torch.uint8"
    same = frames.shape == ref.shape and np.array_equal(frames.numpy(), ref)
    tally["decoded_equal" if same else "decoded_differs"] += 1


def _epoch(index, ref: np.ndarray, good: str, tally: collections.Counter) -> None:
    loader = vidloader.VideoLoader(index, batch_size=4, num_workers=0, on_error="skip",
                                   sampler=vidloader.SequentialFrames())
    seen: dict[tuple[int, int], np.ndarray] = {}
    for batch in loader:
        for img, v, f in zip(batch["frames"].numpy(), batch["video_index"], batch["frame_index"]):
            key = (int(v), int(f))
            assert key not in seen, f"sample {key} delivered twice"
            seen[key] = img
    g = index.paths.index(good)
    got = np.stack([seen.pop((g, f)) for f in range(index[g].num_frames)])  # all of it
    np.testing.assert_array_equal(got, ref)  # the intact neighbour is exact
    stats = loader.stats
    assert set(stats["skipped_files"]) <= {r.path for r in index if r.path != good}
    assert len(stats["skipped_files"]) == len(set(stats["skipped_files"]))
    assert len(seen) + stats["skipped_samples"] == index.total_frames - index[g].num_frames
    tally["epoch_skipped" if stats["skipped_samples"] else "epoch_whole"] += 1


def _write_log(path: str, tally: collections.Counter, examples: int, seconds: float) -> None:
    entry = {"examples": examples, "seconds": round(seconds, 1), "outcomes": dict(sorted(tally.items())),
             "machine": f"{platform.machine()} {os.cpu_count()} cores",
             "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")


def test_damaged_files_give_frames_typed_errors_or_counted_skips(seeds, tmp_path):
    tally: collections.Counter = collections.Counter()
    counter = itertools.count()

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=not LONG_RUN,
              suppress_health_check=list(HealthCheck))
    @given(name=st.sampled_from(sorted(SEEDS)), mutation=_MUTATIONS)
    # Found by the long run: a flipped codec tag left the probe an AttributeError on a stream
    # without a decoder; a flipped metadata byte, a UnicodeDecodeError in the CPU executor.
    @example(name="hevc", mutation=("flip", [2898920]))
    @example(name="h264", mutation=("flip", [183]))
    def one(name, mutation):
        data, ref, good = seeds[name]
        bad = tmp_path / f"bad{next(counter)}.mp4"
        bad.write_bytes(_apply(data, mutation))
        tally[f"kind:{mutation[0]}"] += 1
        index = _index(good, str(bad), tally)
        for record in index:
            if record.path != good:
                _decode(record, ref, tally)
        _epoch(index, ref, good, tally)
        bad.unlink()

    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    t0 = time.perf_counter()
    try:
        one()
    finally:
        faulthandler.cancel_dump_traceback_later()
        if os.environ.get("VIDLOADER_FUZZ_LOG"):
            _write_log(os.environ["VIDLOADER_FUZZ_LOG"], tally, EXAMPLES, time.perf_counter() - t0)
    assert sum(v for k, v in tally.items() if k.startswith("kind:")) >= EXAMPLES // 2  # it ran
    shutil.rmtree(tmp_path, ignore_errors=True)

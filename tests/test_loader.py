"""VideoLoader end to end on generated video: exactness, laws, resume, errors, shutdown hygiene."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

import vidloader
from vidloader import Clips, Process, RandomFrames, SequentialFrames, VideoLoader, WorkerError
from vidloader._utils._procs import worker_context
from vidloader.pipeline._messages import RowsFilled
from vidloader.pipeline._units import Part, first_batch_shares, whole_batch_units

from .media import (
    ArgsRecordingProcess,
    assert_each_frame_once_and_exact,
    collect_batches,
    echo_sum_worker,
    make_rotated_video,
    make_small_dataset,
    reference_frames,
    resumed_stream,
)

SIZE = (32, 48)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("loader_media")
    paths = make_small_dataset(root, n=5)
    index = vidloader.build_index(paths, num_workers=0, progress=False)
    refs = {k: reference_frames(r.path, SIZE) for k, r in enumerate(index)}
    full = {k: reference_frames(r.path) for k, r in enumerate(index)}
    return index, refs, full




def _children() -> set[int]:
    import multiprocessing

    return {p.pid for p in multiprocessing.active_children()}


def test_random_frames_are_exact_and_each_frame_once(dataset):
    index, refs, _ = dataset
    loader = VideoLoader(index, sampler=RandomFrames(seed=3), batch_size=16, size=SIZE, num_workers=0)
    batches = collect_batches(loader)
    for batch in batches:
        assert batch["frames"].shape[1:] == (*SIZE, 3) and batch["frames"].dtype == torch.uint8
    assert_each_frame_once_and_exact(batches, refs, index)
    assert loader.decode_stats.delivered > 0


def test_native_size_frames_are_bit_exact(dataset):
    index, _, full = dataset
    loader = VideoLoader(index, sampler=SequentialFrames(), batch_size=64, num_workers=0)
    for batch in loader:
        for img, v, f in zip(batch["frames"], batch["video_index"], batch["frame_index"]):
            np.testing.assert_array_equal(img.numpy(), full[int(v)][int(f)])


def test_same_stream_whatever_num_workers(dataset):
    index, _, _ = dataset
    runs = []
    for workers in (0, 2):
        loader = VideoLoader(index, sampler=RandomFrames(seed=11), batch_size=12, size=SIZE,
                             num_workers=workers, prefetch=2)
        runs.append(collect_batches(loader))
    assert len(runs[0]) == len(runs[1])
    for a, b in zip(*runs):
        for key in ("frames", "video_index", "frame_index"):
            assert torch.equal(a[key], b[key])


def test_clips_processing_and_named_outputs(dataset):
    index, refs, full = dataset
    processing = {
        "input": Process(size=SIZE, dtype="float32", normalized=True, layout="tchw"),
        "target": Process(index_map=[-1, 0, -1], layout="thwc"),
    }
    loader = VideoLoader(index, sampler=Clips(sequence_length=3, stride=2, step=4, seed=1),
                         batch_size=4, processing=processing, num_workers=0)
    batch = next(iter(loader))
    assert batch["input"].shape == (4, 3, 3, *SIZE) and batch["input"].dtype == torch.float32
    assert batch["target"].shape == (4, 1, 64, 96, 3)
    for b in range(4):
        v, frames = int(batch["video_index"][b]), batch["frame_index"][b].tolist()
        assert frames[1] - frames[0] == 2 and frames[2] - frames[1] == 2
        expect = torch.from_numpy(refs[v][frames]).permute(0, 3, 1, 2).float() / 255
        torch.testing.assert_close(batch["input"][b], expect)
        np.testing.assert_array_equal(batch["target"][b, 0].numpy(), full[v][frames[1]])
    loader.shutdown()


def test_labels_follow_videos(dataset):
    index, _, _ = dataset
    labels = [10 + k for k in range(len(index))]
    loader = VideoLoader(index, batch_size=8, size=SIZE, labels=labels, num_workers=0)
    batch = next(iter(loader))
    assert torch.equal(batch["label"], batch["video_index"] + 10)
    by_path = VideoLoader(index, batch_size=8, size=SIZE, num_workers=0,
                          labels=lambda p: int(p[-6:-4]) % 7)
    b2 = next(iter(by_path))
    assert b2["label"].dtype == torch.int64


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_continues_identically(dataset, workers):
    index, _, _ = dataset

    def make():
        return VideoLoader(index, sampler=RandomFrames(seed=5), batch_size=10, size=SIZE,
                           num_workers=workers)

    stream, full, _ = resumed_stream(make, after=4)
    assert len(stream) == len(full)
    for a, b in zip(stream, full):
        assert torch.equal(a["frames"], b["frames"]) and torch.equal(a["frame_index"], b["frame_index"])


def test_epochs_differ_and_set_epoch_replays(dataset):
    index, _, _ = dataset
    loader = VideoLoader(index, batch_size=10, size=SIZE, num_workers=0)
    e0 = collect_batches(loader)
    e1 = collect_batches(loader)
    assert not torch.equal(e0[0]["frame_index"], e1[0]["frame_index"])
    loader.set_epoch(0)
    again = collect_batches(loader)
    assert torch.equal(again[0]["frame_index"], e0[0]["frame_index"])


def test_resume_refuses_other_configuration(dataset):
    index, _, _ = dataset
    state = VideoLoader(index, batch_size=10, size=SIZE, num_workers=0).state_dict()
    other = VideoLoader(index, batch_size=12, size=SIZE, num_workers=0)
    with pytest.raises(vidloader.ConfigError, match="batch_size"):
        other.load_state_dict(state)


@pytest.fixture
def broken_index(tmp_path):
    """An index whose second video is damaged after indexing (decode-time failure)."""
    paths = make_small_dataset(tmp_path, n=3)
    index = vidloader.build_index(paths, num_workers=0, progress=False)
    data = bytearray(paths[1].read_bytes())
    mdat = data.find(b"mdat")
    data[mdat + 8 :] = os.urandom(len(data) - mdat - 8)  # keep the header, ruin the pictures
    paths[1].write_bytes(bytes(data))
    return index, str(paths[1])


@pytest.mark.parametrize("workers", [0, 2])
def test_bad_video_raises_worker_error_naming_file(broken_index, workers):
    index, bad = broken_index
    loader = VideoLoader(index, sampler=SequentialFrames(), batch_size=16, size=SIZE, num_workers=workers)
    with pytest.raises(WorkerError) as info:
        collect_batches(loader)
    assert bad in str(info.value)
    assert _children() == set()


def test_bad_video_skipped_and_counted(broken_index):
    index, bad = broken_index
    loader = VideoLoader(index, sampler=SequentialFrames(), batch_size=16, size=SIZE,
                         num_workers=2, on_error="skip")
    batches = collect_batches(loader)
    delivered = sum(len(b["frames"]) for b in batches)
    assert loader.stats["skipped_samples"] == index[1].num_frames
    assert delivered == index.total_frames - index[1].num_frames
    assert bad in loader.stats["skipped_files"]
    assert all(int(v) != 1 for b in batches for v in b["video_index"])


def _shm_entries() -> set[str]:
    # Named semaphores (sem.mp-*) belong to multiprocessing queues, which unlink them at
    # once; other processes on the machine may create some meanwhile, so they are not ours.
    if not os.path.isdir("/dev/shm"):
        return set()
    return {e for e in os.listdir("/dev/shm") if not e.startswith("sem.")}


def test_break_and_del_leave_no_process_or_shared_memory(dataset):
    index, _, _ = dataset
    shm_before = _shm_entries()
    loader = VideoLoader(index, batch_size=8, size=SIZE, num_workers=2)
    for i, _ in enumerate(loader):
        if i == 1:
            break
    assert _children() == set()
    persistent = VideoLoader(index, batch_size=8, size=SIZE, num_workers=2, persistent_workers=True)
    collect_batches(persistent, limit=2)
    assert len(_children()) == 2
    del persistent
    import gc

    gc.collect()
    assert _children() == set()
    time.sleep(0.2)
    assert _shm_entries() <= shm_before


def test_killed_worker_raises_instead_of_hanging(dataset):
    index, _, _ = dataset
    loader = VideoLoader(index, batch_size=4, size=SIZE, num_workers=2, prefetch=1)
    it = iter(loader)
    next(it)
    pool = loader._pool
    busy = next(w for w in range(2) if pool._held[w])  # a worker with a unit in hand
    held_at_kill = set(pool._held[busy])
    owed, received = [], set()  # what the pool held for it when the message was written
    in_progress, forget = pool._in_progress, pool._forget

    def spy_in_progress(worker):
        owed.append(bool(pool._held[worker]))
        return in_progress(worker)

    def spy_forget(msg):
        if isinstance(msg, RowsFilled):
            received.add((msg.batch_index, msg.row_start))
        return forget(msg)
    pool._in_progress, pool._forget = spy_in_progress, spy_forget
    os.kill(pool.procs[busy].pid, signal.SIGKILL)
    with pytest.raises(WorkerError, match=r"killed by signal 9") as info:
        for _ in it:
            pass
    # The message names the batch and the files the worker was filling (issue 17, item 5).
    # The worker may have sent every part it held before the signal landed (CI once saw it
    # in session 22): then it owed nothing, every part it held was received, and the message
    # names none.
    assert owed, "the death message did not ask what the worker was filling"
    if owed[-1]:
        assert re.search(r"while filling batch \d+ \(rows \d+-\d+, from .*\.mp4", str(info.value))
    else:
        assert held_at_kill <= received and "while filling" not in str(info.value)
    assert _children() == set()


def test_worker_arguments_travel_through_the_task_queue_not_the_start_pipe(monkeypatch):
    """Process arguments are written into a pipe the child reads only once it runs (spawned,
    after importing torch): over 64 KiB, the parent waited for each child in turn (45 s for
    16 workers on the H200). They come as the first task message; a 2 MB argument arrives
    whole."""
    from vidloader.pipeline._pool import WorkerProcesses

    monkeypatch.setattr(worker_context(), "Process", ArgsRecordingProcess)
    monkeypatch.setattr(ArgsRecordingProcess, "created_with", [])
    big = np.arange(1 << 18, dtype=np.int64)
    pool = WorkerProcesses(echo_sum_worker, [(i, big) for i in range(2)], 2)
    try:
        assert len(ArgsRecordingProcess.created_with) == 2
        for args in ArgsRecordingProcess.created_with:  # the target, the two queues, no inherited
            assert len(args) == 4 and args[3] is None, args
            assert not any(isinstance(a, (tuple, np.ndarray)) for a in args), args
        for i in range(2):
            pool.put(i, "sum?")
        got = sorted(tuple(pool.get()) for _ in range(2))
        assert got == [("sum", 0, int(big.sum())), ("sum", 1, int(big.sum()))]
    finally:
        pool.shutdown()
    assert _children() == set()


def test_ctrl_c_leaves_no_worker(dataset, tmp_path):
    index, _, _ = dataset
    index_path = tmp_path / "idx.npz"
    index.save(index_path)
    script = textwrap.dedent(f"""
        import os, signal, sys, vidloader
        # Ctrl-C's usual handler, even where this test was started with SIGINT ignored (a
        # shell's background job: Python then raises no KeyboardInterrupt)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        index = vidloader.VideoIndex.load({str(index_path)!r}, allow_outside_root=True)
        loader = vidloader.VideoLoader(index, batch_size=4, size=(32, 48), num_workers=2)
        try:
            for i, batch in enumerate(loader):
                if i == 0:
                    print(" ".join(str(p.pid) for p in loader._pool.procs), flush=True)
                    os.kill(os.getpid(), signal.SIGINT)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    lines = out.stdout.split("\n")
    assert "interrupted" in out.stdout, out.stderr
    time.sleep(0.5)
    for pid in map(int, lines[0].split()):
        assert not _process_running(pid)


def _process_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return "zombie" not in status.read().lower()
    except FileNotFoundError:
        return False


class _GopsOf10:
    """A record whose keyframes fall every 10 frames."""

    def keyframe_before(self, frame):
        return frame // 10 * 10


def _plan(videos, frames):
    from vidloader.sampling._base import BatchPlan

    frames = np.asarray(frames, np.int64).reshape(len(videos), -1)
    return BatchPlan(0, 7, np.asarray(videos, np.int64), frames, np.zeros(len(videos), np.uint64))


def test_the_first_batch_is_cut_into_whole_gops_of_about_equal_work():
    """Cut into contiguous row ranges, a GOP wanted by rows in two units was decoded by both
    (W1, 2 cores: 1,009 frames for the first batch against 817 with GOPs kept whole)."""
    rng = np.random.default_rng(0)
    videos, frames = rng.integers(0, 6, 64), rng.integers(0, 60, 64)
    units = first_batch_shares(_plan(videos, frames), [_GopsOf10()] * 6, 2)
    assert len(units) == 2 and all(p.batch == 7 for u in units for p in u)
    rows = [[r for p in u for r in range(p.row_start, p.row_stop)] for u in units]
    assert sorted(rows[0] + rows[1]) == list(range(64))  # every row once
    gops = [{(int(videos[r]), int(frames[r]) // 10 * 10) for r in rs} for rs in rows]
    assert not gops[0] & gops[1]  # no GOP in both units
    work = [sum(max(int(frames[r]) for r in rs if (int(videos[r]), int(frames[r]) // 10 * 10) == g) - g[1] + 1
                for g in gs) for gs, rs in zip(gops, rows)]
    assert abs(work[0] - work[1]) <= 10  # dealt largest first: within one GOP's work
    for u in units:  # parts are runs of adjacent rows
        assert all(a.row_stop < b.row_start for a, b in zip(u, u[1:]))


def test_workers_fill_the_first_batch_by_whole_gops(dataset, monkeypatch):
    """The loader's first units (one per worker) share no GOP, and together are batch 0."""
    from vidloader.pipeline._pool import ProcessPool

    index, refs, _ = dataset
    sent = []
    submit = ProcessPool.submit
    monkeypatch.setattr(ProcessPool, "submit", lambda self, w, task: (sent.append(task), submit(self, w, task))[1])
    loader = VideoLoader(index, sampler=RandomFrames(seed=3), batch_size=16, size=SIZE, num_workers=2)
    first = next(iter(loader))
    loader.shutdown()
    shares = [t for t in sent if t.plans[0].batch_index == 0][:2]
    assert len(shares) == 2 and all(p.batch_index == 0 for t in shares for p in t.plans)
    gops = [{(int(v), int(index[int(v)].keyframe_before(int(f))))
             for p in t.plans for v, f in zip(p.video_indices, p.frame_indices[:, 0])} for t in shares]
    assert gops[0] and gops[1] and not gops[0] & gops[1]
    assert sum(p.batch_size for t in shares for p in t.plans) == 16
    for img, v, f in zip(first["frames"], first["video_index"], first["frame_index"]):
        np.testing.assert_array_equal(img.numpy(), refs[int(v)][int(f)])


def test_the_first_batch_keeps_row_ranges_where_gops_are_too_few():
    # one GOP for every row: nothing to deal, the caller cuts rows
    assert first_batch_shares(_plan([0] * 8, [3] * 8), [_GopsOf10()], 2) is None
    assert first_batch_shares(_plan([0, 1, 2], [1, 2, 3]), [_GopsOf10()] * 3, 2) is None  # < 2 x ways rows
    assert first_batch_shares(_plan(range(8), range(8)), [_GopsOf10()] * 8, 1) is None  # one way
    # clips go with the GOP of their first frame, their work to their last frame
    clips = first_batch_shares(_plan([0, 0, 1, 1], [[0, 25], [1, 2], [5, 6], [30, 31]]), [_GopsOf10()] * 2, 2)
    assert [[(p.row_start, p.row_stop) for p in u] for u in clips] == [[(0, 2)], [(2, 4)]]
    units = list(whole_batch_units(0, 4, 4, ways=2, first_rows=4, first_shares=clips))
    assert units[:2] == clips and [p.batch for u in units[2:] for p in u] == [1, 2, 3]


@pytest.mark.parametrize("workers", [0, 2])
def test_lookahead_keeps_the_stream_and_decodes_less(dataset, workers):
    index, refs, _ = dataset
    runs, decoded = [], []
    for lookahead in (1, 4):
        loader = VideoLoader(index, sampler=RandomFrames(seed=2), batch_size=10, size=SIZE,
                             num_workers=workers, lookahead=lookahead)
        runs.append(collect_batches(loader))
        decoded.append(loader.decode_stats.decoded)
    for a, b in zip(*runs):
        assert torch.equal(a["frames"], b["frames"]) and torch.equal(a["frame_index"], b["frame_index"])
    for img, v, f in zip(runs[1][3]["frames"], runs[1][3]["video_index"], runs[1][3]["frame_index"]):
        np.testing.assert_array_equal(img.numpy(), refs[int(v)][int(f)])
    assert decoded[1] < decoded[0]


@pytest.mark.parametrize("workers", [0, 2])
def test_gop_shuffle_through_the_loader_is_exact_and_decodes_each_frame_once(dataset, workers):
    """Each block is one unit (a batch straddling two blocks is filled by both), and on CPU
    workers a block is cut by video over all of them: every GOP is decoded once, so decoded
    frames equal delivered frames, and the stream is the one whole-batch units give."""
    index, refs, _ = dataset
    sampler = vidloader.GopShuffle(window_gops=4, seed=0)
    loader = VideoLoader(index, sampler=sampler, batch_size=10, size=SIZE, num_workers=workers)
    plan = loader._epoch_plan(0)
    assert any(len(u) > 1 and u[0][1] > 0 for u in plan.decode_units())  # blocks cut batches
    batches = collect_batches(loader)
    delivered = assert_each_frame_once_and_exact(batches, refs, index)
    assert loader.decode_stats.decoded == loader.decode_stats.delivered == delivered
    whole = VideoLoader(index, sampler=sampler, batch_size=10, size=SIZE, num_workers=workers,
                        lookahead=3)  # explicit lookahead: units of whole batches
    for a, b in zip(batches, collect_batches(whole), strict=True):
        assert torch.equal(a["frames"], b["frames"]) and torch.equal(a["frame_index"], b["frame_index"])
    assert whole.decode_stats.decoded > loader.decode_stats.decoded


def test_gop_shuffle_loader_resumes_inside_a_block(dataset):
    index, _, _ = dataset
    sampler = vidloader.GopShuffle(window_gops=4, seed=1)
    full = collect_batches(VideoLoader(index, sampler=sampler, batch_size=10, size=SIZE, num_workers=2))
    loader = VideoLoader(index, sampler=sampler, batch_size=10, size=SIZE, num_workers=2)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    it.close()
    resumed = VideoLoader(index, sampler=sampler, batch_size=10, size=SIZE, num_workers=2)
    resumed.load_state_dict(state)
    for a, b in zip(full[3:], collect_batches(resumed), strict=True):
        assert torch.equal(a["frames"], b["frames"]) and torch.equal(a["video_index"], b["video_index"])


@pytest.mark.parametrize("decoders", [0, 17])
def test_nvdec_decoder_count_is_checked_when_the_loader_is_made(dataset, decoders):
    """Checked in the constructor: on first use it would surface only after the workers
    started, as a failed batch."""
    index, _, _ = dataset
    with pytest.raises(vidloader.ConfigError, match="nvdec_decoders must be in 1..16"):
        VideoLoader(index, backend="nvdec", nvdec_decoders=decoders, num_workers=0)


@pytest.fixture(scope="module")
def rotated(tmp_path_factory):
    root = tmp_path_factory.mktemp("rotated")
    return {d: make_rotated_video(root / f"rot{d}.mp4", d) for d in (0, 90, 180, 270)}


@pytest.mark.parametrize("degrees", [90, 180, 270])
@pytest.mark.parametrize("size", [None, (32, 24)])
def test_frames_come_upright_by_the_display_rotation(rotated, degrees, size):
    """As players (and FFmpeg's autorotate) show them: turned counter-clockwise by the display
    matrix's angle; ``size`` is the upright size, resized in the coded orientation."""
    path, turns = rotated[degrees], degrees // 90
    index = vidloader.build_index([path], num_workers=0, progress=False)
    assert index[0].rotation == degrees
    coded = None if size is None else (size if turns % 2 == 0 else size[::-1])
    want = np.rot90(reference_frames(path, coded), turns, axes=(1, 2))
    loader = VideoLoader(index, sampler=SequentialFrames(), batch_size=5, size=size, num_workers=0)
    (batch,) = collect_batches(loader)
    np.testing.assert_array_equal(batch["frames"].numpy(), want)
    got = vidloader.decode_frames(path, [4, 0, 2], size=size)
    np.testing.assert_array_equal(got.numpy(), want[[4, 0, 2]])


def test_autorotate_off_gives_frames_as_coded(rotated):
    path = rotated[90]
    index = vidloader.build_index([path], num_workers=0, progress=False)
    loader = VideoLoader(index, sampler=SequentialFrames(), batch_size=5, num_workers=0,
                         processing=Process(autorotate=False))
    (batch,) = collect_batches(loader)
    np.testing.assert_array_equal(batch["frames"].numpy(), reference_frames(path))
    got = vidloader.decode_frames(path, [1], autorotate=False)
    np.testing.assert_array_equal(got.numpy(), reference_frames(path)[[1]])


def test_upright_portrait_and_landscape_videos_share_a_batch_only_with_a_size(rotated):
    index = vidloader.build_index([rotated[0], rotated[90]], num_workers=0, progress=False)
    with pytest.raises(vidloader.ConfigError, match="different sizes"):
        VideoLoader(index, sampler=SequentialFrames(), batch_size=5, num_workers=0)
    loader = VideoLoader(index, sampler=SequentialFrames(), batch_size=5, size=(16, 16), num_workers=0)
    assert all(b["frames"].shape == (5, 16, 16, 3) for b in collect_batches(loader))


def test_warm_workers_get_whole_units_from_their_second_epoch_on(dataset, monkeypatch):
    """The ramp is for cold workers. Re-applied at every epoch of persistent workers, it
    halved the demo's throughput on a short epoch (2.94 decoded per delivered frame against
    1.46): GOPs are shared only within a unit."""
    from vidloader.pipeline._pool import InlinePool

    index, _, _ = dataset
    sizes, submit = [], InlinePool.submit
    monkeypatch.setattr(InlinePool, "submit",
                        lambda self, w, task: (sizes.append(len(task.plans)), submit(self, w, task))[1])
    loader = VideoLoader(index, sampler=SequentialFrames(), batch_size=2, size=SIZE, num_workers=0,
                         persistent_workers=True, lookahead=4)
    n = len(loader)
    assert n >= 9
    first = collect_batches(loader)
    cold = list(sizes)
    second = collect_batches(loader)
    assert cold[:3] == [1, 2, 4] and sum(cold) == n
    assert sizes[len(cold):] == [4] * (n // 4) + ([n % 4] if n % 4 else [])
    assert [b["frame_index"].tolist() for b in first] == [b["frame_index"].tolist() for b in second]
    loader.shutdown()


def test_units_split_the_first_batch_over_the_workers_then_ramp_up_to_lookahead():
    units = list(whole_batch_units(3, 30, 4, ways=2, first_rows=16))
    assert units[:2] == [[Part(3, 0, 8)], [Part(3, 8, 16)]]  # both workers fill batch 3 at once
    sizes = [len(u) for u in units[2:]]
    assert sizes[:6] == [1, 1, 2, 2, 4, 4] and max(sizes) == 4
    assert [p.batch for u in units[2:] for p in u] == list(range(4, 30))  # each batch once, in order
    assert [len(u) for u in whole_batch_units(0, 5, 4)] == [1, 2, 2]  # one way: no split

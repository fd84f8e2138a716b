"""Test media for the loader tests, generated with PyAV (never downloaded)."""

from __future__ import annotations

import os
from pathlib import Path

import av
import numpy as np

from vidloader._utils._procs import WorkerProcess
from vidloader.decoding.cpu._frame import swscale_flags
from vidloader.synthetic import VideoSpec, make_dataset

#: The swscale flags the CPU executor resizes with (BILINEAR, chroma at full resolution).
SCALE_FLAGS = swscale_flags("BILINEAR")


def small_specs(n: int = 6, *, width: int = 96, height: int = 64) -> list[VideoSpec]:
    """Tiny H.264 videos with B-frames, GOP 10, 20..45 frames (unequal lengths on purpose)."""
    return [
        VideoSpec(width=width, height=height, num_frames=20 + 5 * i, gop=10, bframes=2, seed=100 + i)
        for i in range(n)
    ]


def make_small_dataset(directory: Path, n: int = 6) -> list[Path]:
    return make_dataset(directory, small_specs(n), num_workers=1)


def reference_frames(path: str | Path, size: tuple[int, int] | None = None) -> np.ndarray:
    """Every frame of ``path`` decoded sequentially, in display order, RGB (resized by swscale
    with the CPU executor's flags)."""
    with av.open(str(path)) as c:
        frames = sorted(c.decode(c.streams.video[0]), key=lambda f: f.pts)
        if size is None:
            return np.stack([f.to_ndarray(format="rgb24") for f in frames])
        h, w = size
        return np.stack(
            [f.reformat(width=w, height=h, format="rgb24", interpolation=SCALE_FLAGS).to_ndarray() for f in frames]
        )


def make_rotated_video(path: Path, degrees: int, *, width: int = 64, height: int = 48,
                       frames: int = 5) -> Path:
    """An H.264 MP4 whose display matrix asks for ``degrees`` of rotation. Its pictures are
    gradients along both axes that change per frame, so a wrong turn or flip shows."""
    y, x = np.mgrid[0:height, 0:width]
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.set_display_rotation(degrees)
        for i in range(frames):
            pixels = np.stack([x * 255 // width, y * 255 // height, np.full_like(x, 40 * i)], -1)
            frame = av.VideoFrame.from_ndarray(pixels.astype(np.uint8), format="rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


def write_corrupt(path: Path, good: Path) -> Path:
    """A file whose header is fine but whose frame data is garbage (decoding fails or is wrong)."""
    data = bytearray(good.read_bytes())
    path.write_bytes(bytes(data[: len(data) // 3]))
    return path


def damage_slice_data(src: Path, dst: Path, which: int) -> int:
    """Copy ``src`` to ``dst`` with the interior of the largest NAL unit (the slice) of its
    ``which``-th non-key picture overwritten with random bytes, every length prefix kept (the
    test suite's helper overwrites from byte 8 of the packet on, which can break a later NAL's
    length prefix: then the Annex B filter refuses the packet, the damage is caught at demux,
    and concealment is never reached). Returns the picture's display index."""
    with av.open(str(src)) as c:
        packets = [(p.pos, p.size, p.pts, bytes(p)) for p in c.demux(c.streams.video[0])
                   if p.size and not p.is_keyframe]
    pos, _, pts, raw = packets[which]
    nals, off = [], 0
    while off + 4 <= len(raw):  # 4-byte AVCC length prefixes
        n = int.from_bytes(raw[off:off + 4], "big")
        nals.append((off + 4, n))
        off += 4 + n
    start, size = max(nals, key=lambda x: x[1])
    data = bytearray(src.read_bytes())
    lo, hi = pos + start + 4, pos + start + size  # keep the NAL header and the first slice bytes
    data[lo:hi] = np.random.default_rng(0).integers(0, 256, hi - lo, np.uint8).tobytes()
    dst.write_bytes(bytes(data))
    with av.open(str(src)) as c:
        all_pts = sorted(p.pts for p in c.demux(c.streams.video[0]) if p.size)
    return all_pts.index(pts)


def break_nal_length(src: Path, dst: Path, which: int, length: int = 1) -> None:
    """Copy ``src`` to ``dst`` with the 4-byte length prefix of the first NAL unit of its
    ``which``-th packet (decode order) overwritten with ``length``. The Annex B filter, and
    so NVDEC's demux, refuses that packet; FFmpeg's CPU decoder, reading the MP4 packets as
    they are, decodes all its pictures (with ``length=1``, on an H.264 file without B-frames)."""
    with av.open(str(src)) as c:
        pos = [p.pos for p in c.demux(c.streams.video[0]) if p.size][which]
    data = bytearray(src.read_bytes())
    data[pos:pos + 4] = length.to_bytes(4, "big")
    dst.write_bytes(bytes(data))


def collect_batches(loader, limit: int | None = None) -> list[dict]:
    """The batches of one pass over ``loader`` (the first ``limit`` when given)."""
    out = []
    for i, batch in enumerate(loader):
        out.append(batch)
        if limit is not None and i + 1 >= limit:
            break
    return out


def resumed_stream(make, after: int) -> tuple[list[dict], list[dict], dict]:
    """``(stream, full, state)``: the batches of a loader from ``make()`` stopped after
    ``after`` batches followed by those of a fresh one resumed from its ``state_dict``; the
    batches of an uninterrupted epoch; and the state."""
    full = collect_batches(make())
    first = make()
    head = collect_batches(first, limit=after)
    state = first.state_dict()
    first.shutdown()
    resumed = make()
    resumed.load_state_dict(state)
    return head + collect_batches(resumed), full, state


def assert_each_frame_once_and_exact(batches, refs: dict, index) -> int:
    """Every delivered frame equals its reference decode (``refs[video][frame]``) and the
    batches hold every frame of ``index`` exactly once; returns the frames delivered."""
    seen = []
    for batch in batches:
        for img, v, f in zip(batch["frames"], batch["video_index"], batch["frame_index"]):
            np.testing.assert_array_equal(img.numpy(), refs[int(v)][int(f)])
            seen.append((int(v), int(f)))
    assert sorted(seen) == [(v, f) for v, r in enumerate(index) for f in range(r.num_frames)]
    return len(seen)


def echo_sum_worker(start: tuple, task_q, result_q) -> None:
    """A spawned worker for pool tests: started with ``(worker_id, array)``, answers each
    task message with the sum of the array, until ``None``."""
    from vidloader.pipeline._messages import Ready

    worker_id, array = start
    result_q.put(Ready(worker_id))
    while task_q.get() is not None:
        result_q.put(("sum", worker_id, int(array.sum())))


class ArgsRecordingProcess(WorkerProcess):
    """A worker ``Process`` that records the arguments it was created with (in the parent)."""

    created_with: list = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        ArgsRecordingProcess.created_with.append(kwargs.get("args", ()))


def isolation_report_worker(start, task_q, result_q) -> None:
    """A worker for pool tests that reports what it inherited: ``(pid, parent pid, whether
    the module ``start`` names is imported, the file its ``__main__`` module ran, whether CUDA
    is initialised)``."""
    import os
    import sys

    import torch

    from vidloader.pipeline._messages import Ready

    result_q.put(Ready(0))
    result_q.put((os.getpid(), os.getppid(), start in sys.modules, getattr(sys.modules["__main__"], "__file__", None),
                  torch.cuda.is_initialized()))
    task_q.get()


def streaming_worker(start, task_q, result_q) -> None:
    """A worker for pool tests: ``start = (worker_id, count, size)``; on its first task, sends
    ``count`` messages ``(worker_id, k, payload of size bytes)`` at once (each larger than a
    pipe holds, so its queue's feeder is nearly always mid-message), then serves tasks until
    STOP."""
    from vidloader.pipeline._messages import Ready

    worker_id, count, size = start
    result_q.put(Ready(worker_id))
    task_q.get()
    for k in range(count):
        result_q.put((worker_id, k, bytes(size)))
    while task_q.get() is not None:
        pass


def flooding_worker(start, task_q, result_q) -> None:
    """A worker for pool tests that, once started, sends ``start`` messages of 1 MiB each (more
    than a pipe holds, as a demux worker's packets can be) and then serves tasks until STOP."""
    from vidloader.pipeline._messages import Ready

    result_q.put(Ready(0))
    for _ in range(start):
        result_q.put(b"x" * (1 << 20))
    while task_q.get() is not None:
        pass


def slot_writing_worker(start, task_q, result_q, slots) -> None:
    """Writes ``value`` into every byte of output ``name`` of slot ``k`` for each ``(k,
    name, value)`` task (``slots``, a ``SharedSlots``, inherited with the fork request);
    ``"fds"`` asks for the targets of its open descriptors; ``None`` stops it."""
    from vidloader.pipeline._messages import Ready

    arrays = slots.arrays()
    result_q.put(Ready(0))
    while (task := task_q.get()) is not None:
        if task == "fds":
            result_q.put(_fd_targets())
            continue
        k, name, value = task
        arrays[k][name][...] = value
        result_q.put("written")


def _fd_targets() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    return out

"""DALI's GPU video reader (``fn.readers.video``) as a peer of ``vidloader bench``.

DALI's reader takes no per-batch list of (video, frame) requests, but it does take a
``file_list`` whose every line is ``path label first_frame end_frame``
(``file_list_frame_num=True``) and, with ``random_shuffle=False``, reads the lines in order,
one sequence of ``sequence_length`` frames at ``stride`` per line when the line's range holds
exactly one (DALI's ``VideoLoader`` enumerates sequences ``s + 1 + (L - 1) * stride <= end``
from ``first_frame``). So the shared plan becomes such a list (:func:`dali_requests`):

- clips: one line per clip, ``sequence_length`` and ``stride`` the plan's;
- single frames in short runs (uniform random frames, ``GopShuffle``): one line per frame,
  ``sequence_length=1``;
- single frames in long runs (sequential reading): each run of consecutive frames of a video
  cut into sequences of ``L`` frames (``L`` the largest divisor of the runs' common length up
  to :data:`MAX_SEQUENCE`, 30 for W1's 60-frame videos), the way a DALI user reads whole
  videos, the last sequence of a run moved back to end inside the video, its extra frames
  dropped.

Each line's label is its position in the list, so the adapter checks that DALI delivered the
lines in order (``enable_frame_num`` echoes each line's first frame, checked too, but it is
the request, not what was decoded). DALI finds frame ``k`` by time, at the stream's start
plus ``k`` frame periods, where the index counts frames in display order: the two agree only
where the timestamps are evenly spaced, so a plan holding any other video is skipped
(:func:`uneven_timestamps`); the cuda tests check the delivered pixels against a full
decode. Frames are resized (and centre-cropped) by DALI on the GPU (``fn.resize``,
``fn.crop``), then cut back into the plan's batches.

DALI's reader seeks and flushes its one NVDEC decoder for every sequence (``read_file`` in
``video_loader.cc``: "we want to seek each time"), so a random frame costs a decode from its
keyframe. It reports no decode counts: ``decoded`` here is the least it must decode, from the
keyframe at or before each sequence's first frame to its last (a lower bound).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from ._peers import Job, Peer, import_or_skip, version_of
from ._peers_gpu import _need_cuda
from ._workloads import Geometry, Skip

#: DALI's distributions, newest CUDA first (the device machine has CUDA 13).
_DISTRIBUTIONS = ("nvidia-dali-cuda130", "nvidia-dali-cuda120", "nvidia-dali-cuda110")
#: Longest sequence a run of single frames is cut into.
MAX_SEQUENCE = 32
#: Runs of consecutive frames at least this long on average are read as sequences.
MIN_MEAN_RUN = 8
#: Sequence length for runs whose lengths share no divisor of at least 8.
DEFAULT_SEQUENCE = 16
#: Frames per DALI batch when single frames are read as sequences (about a plan batch).
_FRAMES_PER_DALI_BATCH = 128


@dataclasses.dataclass(frozen=True)
class DaliRequests:
    """The plan as DALI ``file_list`` lines.

    Attributes:
        mode (str): ``"clips"`` (a line per clip), ``"frames"`` (a line per frame) or
            ``"runs"`` (runs of consecutive frames cut into sequences).
        sequence_length (int): DALI's ``sequence_length``.
        stride (int): DALI's ``stride``.
        videos (np.ndarray): int64 ``[n]``, each line's video (index position).
        starts (np.ndarray): int64 ``[n]``, each line's first frame.
        keep (np.ndarray): int64 ``[n, 2]``, the ``[lo, hi)`` frames of each sequence that are
            plan rows (all of them, except where a run's last sequence was moved back).
        batch_size (int): sequences per DALI batch.
    """

    mode: str
    sequence_length: int
    stride: int
    videos: np.ndarray
    starts: np.ndarray
    keep: np.ndarray
    batch_size: int

    @property
    def span(self) -> int:
        """Frames from a sequence's first to its last, inclusive."""
        return 1 + (self.sequence_length - 1) * self.stride

    def file_list(self, index) -> str:
        """The ``file_list`` text: ``path label first end`` per line, label = line number;
        ``end - first`` is one span, so DALI makes exactly one sequence of the line."""
        return "".join(f"{index[v].path} {n} {s} {s + self.span}\n" for n, (v, s)
                       in enumerate(zip(self.videos.tolist(), self.starts.tolist())))

    def least_decoded(self, index) -> np.ndarray:
        """Per line, the frames DALI must decode at least: from the keyframe at or before the
        sequence's first frame to its last (it seeks for every sequence)."""
        out = np.empty(len(self.starts), np.int64)
        for v in np.unique(self.videos):
            mine = self.videos == v
            keys = np.asarray(index[int(v)].keyframes, np.int64)
            key = keys[np.searchsorted(keys, self.starts[mine], side="right") - 1]
            out[mine] = self.starts[mine] + self.span - key
        return out


def uneven_timestamps(record) -> str | None:
    """Why DALI's frame ``k`` (the stream's start plus ``k`` periods of its frame rate) would
    not be the index's frame ``k`` (display order) of ``record``, or ``None`` where they agree:
    every timestamp within a quarter period of ``pts[0] + k`` periods."""
    pts = np.asarray(record.pts, np.int64)
    if len(pts) < 2 or not record.fps:
        return None
    period = 1.0 / (float(record.fps) * float(record.time_base))  # ticks per frame
    off = np.abs(pts - (pts[0] + np.arange(len(pts)) * period))
    k = int(np.argmax(off))
    if off[k] <= max(1.0, 0.25 * period):
        return None
    return (f"frame {k} of {record.path} is at pts {int(pts[k])}, {off[k]:.0f} ticks from where "
            f"DALI seeks it ({pts[0] + k * period:.0f}: {record.fps:g} frames/s from pts "
            f"{int(pts[0])}); DALI's reader would deliver other frames than planned")


def dali_requests(batches: Sequence, index) -> DaliRequests:
    """The plan's batches as DALI ``file_list`` lines, in delivery order (see the module).

    Raises:
        Skip: clips whose frames are not evenly spaced, or a stride that changes between
            clips, a path DALI's list cannot hold (whitespace), or a video whose timestamps
            are not evenly spaced (:func:`uneven_timestamps`).
    """
    for r in sorted({int(v) for bp in batches for v in bp.video_indices}):
        if any(c.isspace() for c in index[r].path):
            raise Skip(f"DALI's file_list splits lines on whitespace: {index[r].path!r}")
        why = uneven_timestamps(index[r])
        if why:
            raise Skip(why)
    frames = np.concatenate([np.asarray(bp.frame_indices, np.int64) for bp in batches])
    videos = np.concatenate([np.asarray(bp.video_indices, np.int64) for bp in batches])
    rows_per_batch = int(frames.shape[0] // max(1, len(batches)))
    if frames.shape[1] > 1:
        return _clip_requests(videos, frames, rows_per_batch)
    return _frame_requests(videos, frames[:, 0], index, rows_per_batch)


def _clip_requests(videos, frames, rows_per_batch: int) -> DaliRequests:
    steps = np.diff(frames, axis=1)
    stride = int(steps[0, 0])
    if stride < 1 or np.any(steps != stride):
        raise Skip("DALI's reader takes clips of evenly spaced frames with one stride; this "
                   f"plan's clips step by {sorted(set(steps.ravel().tolist()))[:5]}")
    t = frames.shape[1]
    keep = np.tile(np.array([0, t], np.int64), (len(videos), 1))
    # rows of a clip plan are frames; DALI's batch counts clips
    return DaliRequests("clips", t, stride, videos, frames[:, 0].copy(), keep,
                        max(1, rows_per_batch))


def _runs(videos: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """``[k, 3]`` runs of consecutive frames of one video: ``(video, first, length)``."""
    new = np.ones(len(frames), bool)
    new[1:] = (videos[1:] != videos[:-1]) | (frames[1:] != frames[:-1] + 1)
    first = np.flatnonzero(new)
    lengths = np.diff(np.append(first, len(frames)))
    return np.stack([videos[first], frames[first], lengths], axis=1)


def run_sequence_length(lengths: np.ndarray) -> int:
    """``L`` for runs of these lengths: the largest divisor of their common length up to
    :data:`MAX_SEQUENCE` when that is at least 8, else :data:`DEFAULT_SEQUENCE`. The plan's
    first and last runs are cut by its ends, so they do not count."""
    inner = lengths[1:-1] if len(lengths) > 2 else lengths
    g = int(np.gcd.reduce(inner.astype(np.int64))) if len(inner) else 0
    best = max((d for d in range(1, MAX_SEQUENCE + 1) if g % d == 0), default=1) if g else 1
    return best if best >= 8 else DEFAULT_SEQUENCE


def _frame_requests(videos, frames, index, rows_per_batch: int) -> DaliRequests:
    runs = _runs(videos, frames)
    if len(frames) / len(runs) < MIN_MEAN_RUN:
        keep = np.tile(np.array([0, 1], np.int64), (len(frames), 1))
        return DaliRequests("frames", 1, 1, videos, frames.copy(), keep, max(1, rows_per_batch))
    # no longer than the plan's shortest video: every sequence must fit inside its video
    length = min(run_sequence_length(runs[:, 2]),
                 *(index[int(v)].num_frames for v in np.unique(runs[:, 0])))
    out_v, out_s, out_keep = [], [], []
    for v, first, n in runs.tolist():
        last_start = index[v].num_frames - length
        for a in range(first, first + n, length):
            hi = min(a + length, first + n)  # frames [a, hi) are plan rows
            start = min(a, last_start)
            out_v.append(v)
            out_s.append(start)
            out_keep.append((a - start, hi - start))
    return DaliRequests("runs", length, 1, np.asarray(out_v, np.int64), np.asarray(out_s, np.int64),
                        np.asarray(out_keep, np.int64),
                        max(1, _FRAMES_PER_DALI_BATCH // length))


def rebatch(sequences: Iterator[tuple[torch.Tensor, np.ndarray, np.ndarray]],
            requests: DaliRequests, batches: Sequence) -> Iterator[tuple[torch.Tensor, int]]:
    """Cut DALI's sequences back into the plan's batches.

    Args:
        sequences: ``(video [n, L, H, W, 3], labels [n], first_frames [n])`` per DALI batch.
        requests: what was asked, line by line.
        batches: the plan's batches (their row counts and shapes).

    Yields:
        ``(batch, lines)``: each plan batch, shaped as the plan's, and the lines consumed so
        far.

    Raises:
        RuntimeError: DALI delivered a line out of order, or a sequence from another frame,
            or stopped early.
    """
    want = iter(batches)
    bp = next(want, None)
    pending: list[torch.Tensor] = []
    held = line = 0
    for video, labels, firsts in sequences:
        for i in range(video.shape[0]):
            if bp is None:
                return
            if int(labels[i]) != line or int(firsts[i]) != int(requests.starts[line]):
                raise RuntimeError(
                    f"DALI delivered line {int(labels[i])} from frame {int(firsts[i])} where "
                    f"line {line} from frame {int(requests.starts[line])} was due")
            lo, hi = requests.keep[line].tolist()
            pending.append(video[i, lo:hi])
            held += hi - lo
            line += 1
            while bp is not None and held >= bp.frame_indices.size:
                out, pending = _take(pending, bp.frame_indices.size)
                held -= bp.frame_indices.size
                yield _shape(out, bp), line
                bp = next(want, None)
    if bp is not None:
        raise RuntimeError(f"DALI stopped after {line} of {len(requests.starts)} lines")


def _take(pending: list[torch.Tensor], rows: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The first ``rows`` frames of ``pending`` (``[n, H, W, 3]`` pieces), and the rest."""
    out = torch.cat(pending) if len(pending) > 1 else pending[0]
    rest = out[rows:]
    return out[:rows], ([rest] if rest.shape[0] else [])


def _shape(frames: torch.Tensor, bp) -> torch.Tensor:
    if bp.is_clip:
        return frames.reshape(bp.batch_size, bp.frame_indices.shape[1], *frames.shape[-3:])
    return frames.reshape(bp.batch_size, *frames.shape[-3:])


class DaliPeer(Peer):
    """NVIDIA DALI's ``fn.readers.video`` on the GPU, fed the plan as a ``file_list``."""

    name = "dali"
    library = _DISTRIBUTIONS[0]
    note = ("dali: DALI's GPU video reader (fn.readers.video, device gpu) over a file_list of "
            "the plan's sequences in order (one line per frame, per clip, or per sequence of a "
            "sequential run), fn.resize / fn.crop on the GPU; DALI seeks and flushes its decoder "
            "per sequence; decoded counts are a lower bound")

    def __init__(self) -> None:
        self._counts = {"decoded": 0, "delivered": 0}
        self._shape: dict = {}

    def check(self) -> None:
        _need_cuda()
        self.library = next((d for d in _DISTRIBUTIONS if version_of(d) != "not installed"),
                            _DISTRIBUTIONS[0])
        import_or_skip("nvidia.dali", self.library)
        import_or_skip("nvidia.dali.plugin.pytorch", self.library)

    def settings(self) -> dict:
        return {
            "version": version_of(self.library),
            "api": "fn.readers.video(device='gpu', file_list=<plan>, file_list_frame_num=True, "
                   "sequence_length=L, stride=S, random_shuffle=False, enable_frame_num=True, "
                   "pad_last_batch=True, name='reader'), DALIGenericIterator(reader_name="
                   "'reader', last_batch_policy=PARTIAL)",
            "file_list": "one line per clip (L, S the plan's), per frame when runs of "
                         f"consecutive frames are shorter than {MIN_MEAN_RUN} on average (L=1), "
                         "else each run cut into sequences of L frames (the largest divisor up "
                         f"to {MAX_SEQUENCE} of the runs' common length, {DEFAULT_SEQUENCE} "
                         "when it has none of 8 or more); label = line number, checked in order",
            "resize": "fn.resize on the GPU (linear, DALI's antialiasing): resize_x/resize_y "
                      "to the size, or resize_shorter then fn.crop at the centre",
            "pipeline": "batch: the plan's batch in clips or frames, 128 frames of sequences "
                        "otherwise; num_threads = cores, prefetch_queue_depth=2 (DALI's "
                        "defaults otherwise)",
            "decoded": "not reported by DALI: the least it must decode (each sequence from "
                       "its keyframe), a lower bound",
            **({"shape": self._shape} if self._shape else {}),
        }

    def counters(self) -> dict:
        return dict(self._counts)

    def pipeline(self, job: Job) -> tuple[int, int]:
        return 3, 1

    def batches(self, job: Job) -> Iterator[torch.Tensor]:
        requests = dali_requests(job.plan.batches, job.index)
        self._shape = {"mode": requests.mode, "sequence_length": requests.sequence_length,
                       "stride": requests.stride, "lines": int(len(requests.starts)),
                       "dali_batch": requests.batch_size}
        decoded = np.concatenate([[0], np.cumsum(requests.least_decoded(job.index))])
        for batch, lines in rebatch(self._sequences(job, requests), requests, job.plan.batches):
            self._counts["delivered"] += batch[..., 0, 0, 0].numel()
            self._counts["decoded"] = int(decoded[lines])
            yield batch

    def _sequences(self, job: Job, requests: DaliRequests):
        """``(video, labels, first_frames)`` per DALI batch, from DALI's reader."""
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        geometry: Geometry = job.workload.geometry
        with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="vidloader-dali-",
                                         delete=False) as f:
            f.write(requests.file_list(job.index))
            list_path = f.name

        @pipeline_def(batch_size=requests.batch_size, num_threads=os.cpu_count() or 1,
                      device_id=torch.cuda.current_device(), prefetch_queue_depth=2)
        def pipe():
            video, label, first = fn.readers.video(
                device="gpu", file_list=list_path, file_list_frame_num=True,
                sequence_length=requests.sequence_length, stride=requests.stride,
                random_shuffle=False, enable_frame_num=True, pad_last_batch=True,
                skip_vfr_check=True, dtype=types.UINT8, image_type=types.RGB, name="reader")
            if geometry.size is not None:
                video = fn.resize(video, resize_x=geometry.size[1], resize_y=geometry.size[0])
            elif geometry.short_side is not None:
                video = fn.resize(video, resize_shorter=geometry.short_side)
            if geometry.crop is not None:
                video = fn.crop(video, crop_h=geometry.crop[0], crop_w=geometry.crop[1])
            return video, label, first

        try:
            p = pipe()
            p.build()
            it = DALIGenericIterator(p, ["video", "label", "first"], reader_name="reader",
                                     auto_reset=False, last_batch_policy=LastBatchPolicy.PARTIAL)
            for (out,) in it:
                yield (out["video"], out["label"].reshape(-1).cpu().numpy(),
                       out["first"].reshape(-1).cpu().numpy())
        finally:
            os.unlink(list_path)


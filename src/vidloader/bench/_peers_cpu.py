"""CPU library peers: decord, OpenCV and torchcodec, one ``DataLoader`` worker per batch.

Each worker decodes a whole batch, every video's wanted frames in one sorted call (what the
libraries' documentation recommends), with one FFmpeg thread like vidloader's workers, and
keeps its files open between batches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import torch

from ._batching import FileCache, PlanDataset, center_crop, data_loader, resize_torch
from ._peers import Job, Peer, import_or_skip
from ._workloads import Geometry, Skip


class _BatchPeer(Peer):
    """Runs a reader class over :class:`PlanDataset` under a ``DataLoader``."""

    module = ""
    reader: type = object

    def check(self) -> None:
        import_or_skip(self.module, self.library)

    def batches(self, job: Job) -> Iterator[torch.Tensor]:
        dataset = PlanDataset(job.plan.batches, job.index, job.workload.geometry, self.reader)
        yield from data_loader(dataset, workers=job.workers, pin_memory=job.device == "cuda")


class _DecordReader:
    """``VideoReader(path, width, height)`` (resize inside FFmpeg), ``get_batch`` on sorted
    indices; one FFmpeg thread, like every other backend here."""

    def __init__(self, geometry: Geometry) -> None:
        import decord

        self.decord, self.geometry, self.files = decord, geometry, FileCache()

    def decode(self, record, frames: np.ndarray) -> np.ndarray:
        rh, rw = self.geometry.resized(record.height, record.width)
        same = (rh, rw) == (record.height, record.width)
        vr = self.files.get(record.path, lambda: self.decord.VideoReader(
            record.path, ctx=self.decord.cpu(0), width=-1 if same else rw,
            height=-1 if same else rh, num_threads=1))
        return center_crop(vr.get_batch(frames.tolist()).asnumpy(), self.geometry.crop)


class DecordPeer(_BatchPeer):
    name, library, module, reader = "decord", "decord", "decord", _DecordReader


class _OpenCvReader:
    """``cv2.VideoCapture``; ``CAP_PROP_POS_FRAMES`` seek unless the frame is the next one;
    BGR→RGB and ``cv2.resize`` after decoding."""

    def __init__(self, geometry: Geometry) -> None:
        import cv2

        cv2.setNumThreads(1)
        self.cv2, self.geometry = cv2, geometry
        self.files = FileCache(close=lambda state: state[0].release())

    def _open(self, path: str) -> list:
        cv2 = self.cv2
        cap = cv2.VideoCapture(path, cv2.CAP_FFMPEG, [cv2.CAP_PROP_N_THREADS, 1])
        if not cap.isOpened():
            raise RuntimeError(f"OpenCV cannot open {path}")
        return [cap, 0]  # capture, next frame it will read

    def decode(self, record, frames: np.ndarray) -> np.ndarray:
        cv2, state = self.cv2, self.files.get(record.path, lambda: self._open(record.path))
        rh, rw = self.geometry.resized(record.height, record.width)
        out = []
        for f in frames.tolist():
            if f != state[1]:
                state[0].set(cv2.CAP_PROP_POS_FRAMES, f)
            ok, bgr = state[0].read()
            if not ok:
                raise RuntimeError(f"OpenCV could not read frame {f} of {record.path}")
            state[1] = f + 1
            rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
            if rgb.shape[:2] != (rh, rw):
                rgb = cv2.resize(rgb, (rw, rh))
            out.append(center_crop(rgb, self.geometry.crop))
        return np.stack(out)


class OpenCvPeer(_BatchPeer):
    name, library, module, reader = "opencv", "opencv-python-headless", "cv2", _OpenCvReader

    def check(self) -> None:
        try:
            super().check()
        except Skip:
            self.library = "opencv-python"  # either wheel provides cv2
            super().check()


@dataclasses.dataclass(frozen=True)
class TorchcodecSettings:
    """How a torchcodec adapter configures ``VideoDecoder`` (recorded in the run's JSON).

    Attributes:
        seek_mode (str): ``"exact"`` (a scan of the file when the decoder is built, every
            index exact) or ``"approximate"`` (the container's metadata only).
        num_ffmpeg_threads (int): FFmpeg threads per decoder (0: FFmpeg decides).
        api (str): ``"indices"`` (``get_frames_at``) or ``"played_at"``
            (``get_frames_played_at`` with the frames' presentation times in seconds).
        native_resize (bool): resize and crop inside the decoder (``transforms=``, FFmpeg's
            bilinear antialiased scaler) instead of in torch after decoding.
    """

    seek_mode: str = "exact"
    num_ffmpeg_threads: int = 1
    api: str = "indices"
    native_resize: bool = False


class _TorchcodecReader:
    """``VideoDecoder(path, ...)`` per file, one batch call per video's sorted frames; resize
    inside the decoder or in torch afterwards, as :class:`TorchcodecSettings` say."""

    settings = TorchcodecSettings()

    def __init__(self, geometry: Geometry) -> None:
        from torchcodec.decoders import VideoDecoder

        self.cls, self.geometry, self.files = VideoDecoder, geometry, FileCache()

    def _open(self, record):
        s = self.settings
        return self.cls(record.path, stream_index=record.stream_index, seek_mode=s.seek_mode,
                        dimension_order="NHWC", num_ffmpeg_threads=s.num_ffmpeg_threads,
                        transforms=self._transforms(record) if s.native_resize else None)

    def _transforms(self, record) -> list | None:
        """The workload's resize then centre crop as decoder transforms (None: native size)."""
        from torchcodec.transforms import CenterCrop, Resize

        size = self.geometry.resized(record.height, record.width)
        out = [] if size == (record.height, record.width) else [Resize(size=size)]
        if self.geometry.crop is not None:
            out.append(CenterCrop(size=self.geometry.crop))
        return out or None

    def decode(self, record, frames: np.ndarray) -> torch.Tensor:
        dec = self.files.get(record.path, lambda: self._open(record))
        if self.settings.api == "played_at":
            # The middle of each frame's display interval: robust to rounding of pts/time base.
            pts = record.pts[frames].astype(np.float64)
            seconds = (pts + 0.5 * _frame_ticks(record)) * float(record.time_base)
            data = dec.get_frames_played_at(seconds=seconds.tolist()).data
        else:
            data = dec.get_frames_at(indices=frames.tolist()).data
        if self.settings.native_resize:
            return data
        return resize_torch(data, self.geometry)


def _frame_ticks(record) -> float:
    """Typical duration of one frame in time-base ticks (median pts step)."""
    steps = np.diff(np.sort(np.asarray(record.pts, np.int64)))
    return float(np.median(steps)) if len(steps) else 0.0


class _TorchcodecTunedReader(_TorchcodecReader):
    # Exact seek: the tips advise approximate mode for long videos of which few frames are
    # decoded, as it saves the scan when a decoder is built; the bench keeps its decoders
    # open, and on these short files approximate mode was not faster per batch
    # (results/cpu/torchcodec/settings-*.log). One FFmpeg thread: one decoder per core.
    settings = TorchcodecSettings(seek_mode="exact", num_ffmpeg_threads=1, api="indices",
                                  native_resize=True)


class _TorchcodecApproxReader(_TorchcodecReader):
    settings = dataclasses.replace(_TorchcodecTunedReader.settings, seek_mode="approximate")


class TorchcodecPeer(_BatchPeer):
    """torchcodec as first added: exact seek, one FFmpeg thread, resize in torch afterwards."""

    name, library, module, reader = "torchcodec", "torchcodec", "torchcodec.decoders", _TorchcodecReader

    def settings(self) -> dict:
        return {**dataclasses.asdict(self.reader.settings), "device": "cpu",
                "ffmpeg": _torchcodec_ffmpeg()}


def _torchcodec_ffmpeg() -> str | None:
    """The FFmpeg version torchcodec loaded (it runs on PyAV 18.1's FFmpeg 8 through a shim)."""
    try:
        from torchcodec import _core

        return str(_core.get_ffmpeg_library_versions().get("ffmpeg_version"))
    except Exception:  # not installed or not loadable: check() says why
        return None


class TorchcodecTunedPeer(TorchcodecPeer):
    """torchcodec configured as its performance tips say: batch ``get_frames_at``, resize and
    crop inside the decoder (``transforms=``), one FFmpeg thread per worker, exact seek for
    short videos (see :class:`_TorchcodecTunedReader`)."""

    name, reader = "torchcodec-tuned", _TorchcodecTunedReader
    note = ("torchcodec-tuned: VideoDecoder(seek_mode='exact', num_ffmpeg_threads=1, "
            "transforms=[Resize, CenterCrop]), get_frames_at per video")

    def check(self) -> None:
        super().check()
        import_or_skip("torchcodec.transforms", self.library)  # decoder transforms: >= 0.10


class TorchcodecApproxPeer(TorchcodecTunedPeer):
    """:class:`TorchcodecTunedPeer` with ``seek_mode="approximate"`` (no scan of the file)."""

    name, reader = "torchcodec-approx", _TorchcodecApproxReader
    note = "torchcodec-approx: torchcodec-tuned with seek_mode='approximate'"

"""CPU library peers: decord, OpenCV and torchcodec, one ``DataLoader`` worker per batch.

Each worker decodes a whole batch, every video's wanted frames in one sorted call (what the
libraries' documentation recommends), with one FFmpeg thread like vidloader's workers, and
keeps its files open between batches.
"""

from __future__ import annotations

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


class _TorchcodecReader:
    """``VideoDecoder(path, seek_mode="exact")``, ``get_frames_at`` (sorted), then resize."""

    def __init__(self, geometry: Geometry) -> None:
        from torchcodec.decoders import VideoDecoder

        self.cls, self.geometry, self.files = VideoDecoder, geometry, FileCache()

    def decode(self, record, frames: np.ndarray) -> torch.Tensor:
        dec = self.files.get(record.path, lambda: self.cls(
            record.path, seek_mode="exact", dimension_order="NHWC", num_ffmpeg_threads=1))
        return resize_torch(dec.get_frames_at(indices=frames.tolist()).data, self.geometry)


class TorchcodecPeer(_BatchPeer):
    name, library, module, reader = "torchcodec", "torchcodec", "torchcodec.decoders", _TorchcodecReader

"""GPU peers: PyNvVideoCodec (``SimpleDecoder`` and the raw demuxer + decoder ceiling) and DALI.

They run in the benchmark's main process (one CUDA context; no worker ever touches CUDA) and
import their library only when asked, so a CPU machine reports them as skipped.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import numpy as np
import torch

from ._batching import assemble, resize_torch
from ._peers import Job, Peer, import_or_skip
from ._workloads import Skip

#: Seconds a ceiling thread may stay silent before the run is declared stuck.
_CEILING_STALL_SECONDS = 120.0


def _need_cuda() -> None:
    if not torch.cuda.is_available():
        raise Skip("no CUDA GPU visible to torch")


def _hwc(x: torch.Tensor) -> torch.Tensor:
    """An RGB frame from DLPack as ``H×W×3`` (``RGB`` is HWC; a planar view is CHW)."""
    if x.dim() == 3 and x.shape[-1] == 3:
        return x
    if x.dim() == 3 and x.shape[0] == 3:
        return x.permute(1, 2, 0)
    if x.dim() == 2 and x.shape[0] % 3 == 0:  # (3H, W) planar
        return x.view(3, x.shape[0] // 3, x.shape[1]).permute(1, 2, 0)
    raise RuntimeError(f"unexpected RGB frame shape {tuple(x.shape)} from PyNvVideoCodec")


class PynvcSimplePeer(Peer):
    """``SimpleDecoder.get_batch_frames_by_index`` per file, one decoder reused through
    ``reconfigure_decoder``; RGB output, resized and cropped on the GPU with torch."""

    name, library = "pynvc-simple", "pynvvideocodec"

    def check(self) -> None:
        _need_cuda()
        self.nvc = import_or_skip("PyNvVideoCodec", self.library)

    def batches(self, job: Job) -> Iterator[torch.Tensor]:
        self._dec, self._path = None, None
        self._max = (max(r.width for r in job.index), max(r.height for r in job.index))
        geometry = job.workload.geometry
        for bp in job.plan.batches:
            out = assemble(bp, job.index, geometry, lambda rec, fr: self._decode(rec, fr, geometry))
            torch.cuda.synchronize()
            yield out

    def pipeline(self, job: Job) -> tuple[int, int]:
        return 1, 1  # synchronous, in this process

    def _decode(self, record, frames: np.ndarray, geometry) -> torch.Tensor:
        nvc = self.nvc
        if self._dec is None:
            self._dec = nvc.SimpleDecoder(
                record.path, gpu_id=0, use_device_memory=True, max_width=self._max[0],
                max_height=self._max[1], output_color_type=nvc.OutputColorType.RGB)
        elif self._path != record.path:
            torch.cuda.current_stream().synchronize()  # as NVIDIA's sample does
            self._dec.reconfigure_decoder(record.path)
        self._path = record.path
        got = self._dec.get_batch_frames_by_index(frames.tolist())
        if len(got) != len(frames):
            raise RuntimeError(f"SimpleDecoder returned {len(got)} of {len(frames)} frames "
                               f"of {record.path}")
        x = torch.stack([_hwc(torch.from_dlpack(f)) for f in got])  # copies: surfaces recycle
        return resize_torch(x, geometry)


class PynvcThreadsPeer(Peer):
    """The NVDEC ceiling: raw ``CreateDemuxer`` + ``CreateDecoder`` on N threads, every frame of
    the plan's files in stream order, no conversion, no resize. Yields frame counts."""

    name, library, ceiling = "pynvc-threads", "pynvvideocodec", True
    note = ("pynvc-threads: decode-only NVDEC ceiling (all frames of the plan's files in "
            "stream order, N threads with one reused decoder each, NV12 output, no colour "
            "conversion or resize); not a loader")

    def check(self) -> None:
        _need_cuda()
        self.nvc = import_or_skip("PyNvVideoCodec", self.library)

    def batches(self, job: Job) -> Iterator[int]:
        files = list(dict.fromkeys(job.index[int(v)].path
                                   for bp in job.plan.batches for v in bp.video_indices))
        per_batch = int(job.plan.batches[0].frame_indices.size)
        counts: queue.Queue = queue.Queue()
        stop = threading.Event()
        n = max(1, job.workers)
        # Thread k starts at file k and steps by n, so the threads share the files out.
        threads = [threading.Thread(target=self._work, args=(files[k::n] or files, counts, stop),
                                    daemon=True) for k in range(n)]
        for t in threads:
            t.start()
        try:
            yield from self._batches_of(counts, per_batch, len(job.plan.batches))
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=30)

    def pipeline(self, job: Job) -> tuple[int, int]:
        return 1, 1

    @staticmethod
    def _batches_of(counts: queue.Queue, per_batch: int, n: int) -> Iterator[int]:
        have = 0
        for _ in range(n):
            while have < per_batch:
                got = counts.get(timeout=_CEILING_STALL_SECONDS)
                if isinstance(got, BaseException):
                    raise got
                have += got
            have -= per_batch
            yield per_batch

    def _work(self, files: list[str], counts: queue.Queue, stop: threading.Event) -> None:
        decoders: dict = {}  # this thread's decoders, by (codec, width, height)
        try:
            while not stop.is_set():
                for path in files:
                    if stop.is_set():
                        return
                    self._decode_file(path, decoders, counts, stop)
        except BaseException as exc:  # hand it to the consumer, which raises it
            counts.put(exc)

    def _decode_file(self, path: str, decoders: dict, counts: queue.Queue,
                     stop: threading.Event) -> None:
        nvc = self.nvc
        demuxer = nvc.CreateDemuxer(path)
        key = (int(demuxer.GetNvCodecId()), demuxer.Width(), demuxer.Height())
        # Decoder creation costs ~0.1 s; a flushed decoder takes the next stream of the same
        # codec and size exactly (benchmarks/results/nvdec_bench_2026-11-21.json), so each
        # thread keeps one per (codec, size), as a real pipeline would.
        if key not in decoders:
            decoders[key] = nvc.CreateDecoder(gpuid=0, codec=demuxer.GetNvCodecId(),
                                              cudacontext=0, cudastream=0, usedevicememory=True)
        decoder = decoders[key]
        for packet in demuxer:
            n = len(decoder.Decode(packet))
            if n:
                counts.put(n)
            if stop.is_set():
                return
        n = len(decoder.Decode(nvc.PacketData()))  # an empty packet flushes the decoder
        if n:
            counts.put(n)


class DaliPeer(Peer):
    """NVIDIA DALI: reported as skipped, with the reason."""

    name, library = "dali", "nvidia-dali-cuda120"

    def check(self) -> None:
        _need_cuda()
        try:
            import nvidia.dali  # noqa: F401
        except ImportError:
            raise Skip("nvidia-dali is not installed") from None
        raise Skip(_DALI_CANNOT_RUN_THE_PLAN)

    def batches(self, job):
        # check() always skips, so the harness never gets here; say why if a caller does.
        raise Skip(_DALI_CANNOT_RUN_THE_PLAN)


_DALI_CANNOT_RUN_THE_PLAN = (
    "DALI's video readers take file lists with a fixed sequence length and stride, not an "
    "arbitrary per-batch list of (video, frame) requests (DALI #2604), so DALI cannot run the "
    "shared plan; no adapter yet"
)

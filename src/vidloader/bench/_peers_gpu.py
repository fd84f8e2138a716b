"""GPU peers: PyNvVideoCodec (``SimpleDecoder`` and the raw demuxer + decoder ceiling), SPDL's
NVDEC decoding and PyAV with FFmpeg's CUDA hwaccel (DALI's reader is in :mod:`._peers_dali`).

They run in the benchmark's main process (one CUDA context; no worker ever touches CUDA) and
import their library only when asked, so a CPU machine reports them as skipped. SPDL and PyAV
decode on a pool of threads of this process (both release the GIL while they demux and
decode), one task per video (or time window of a video) of a batch, several batches ahead.
"""

from __future__ import annotations

import abc
import collections
import math
import queue
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from fractions import Fraction

import numpy as np
import torch

from ._batching import FileCache, assemble, center_crop, group_by_video, output_shape, resize_torch
from ._peers import FramesAt, Job, Peer, import_or_skip, root_cause, version_of
from ._workloads import Geometry, Skip

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


# -- thread-pool peers: SPDL and PyAV with NVDEC ------------------------------------------------

#: Batches a thread-pool peer submits ahead of the one it assembles, at most.
_MAX_AHEAD = 32


def _runs(keyframes: np.ndarray, frames: np.ndarray, restart: int) -> list[tuple[int, int]]:
    """Split a video's sorted wanted ``frames`` into runs ``[a, b)``, each decoded in one pass
    from the keyframe at or before ``frames[a]``.

    A run goes on through the next wanted frame unless starting again from that frame's
    keyframe decodes fewer frames: ``frames[i] - keyframe(frames[i]) + restart`` against
    ``frames[i] - frames[i - 1]``, where ``restart`` is what a fresh start costs beyond the
    frames decoded (SPDL's demux margin past a window's end; a decoder's reorder delay).
    """
    if len(frames) == 0:
        return []
    kf = keyframes[np.searchsorted(keyframes, frames, side="right") - 1]
    out, start = [], 0
    for i in range(1, len(frames)):
        if kf[i] > frames[i - 1] and frames[i] - frames[i - 1] > frames[i] - kf[i] + restart:
            out.append((start, i))
            start = i
    out.append((start, len(frames)))
    return out


class _PoolPeer(Peer):
    """A GPU peer decoding on a pool of ``job.workers`` threads of this process.

    Every video of a batch is split into tasks by :meth:`_tasks`; :meth:`_decode` returns a
    task's wanted frames, resized and cropped, as a ``[n, H, W, 3]`` uint8 tensor on
    :attr:`device`, and how many frames it decoded for them. Batches are submitted up to
    :meth:`_ahead` ahead of the one being assembled, so the pool stays busy across batch
    boundaries (a sequential batch holds two or three videos: three tasks for 16 threads).
    """

    #: Where batches are assembled (tests on a CPU machine use ``"cpu"``).
    device = "cuda"

    def __init__(self) -> None:
        self._counts = {"decoded": 0, "delivered": 0, "tasks": 0}

    def check(self) -> None:
        _need_cuda()

    def counters(self) -> dict:
        return dict(self._counts)

    # -- what a subclass provides

    @abc.abstractmethod
    def _tasks(self, record, frames: np.ndarray) -> list[tuple[int, int]]:
        """``[a, b)`` slices of a video's sorted wanted frames, one task each."""

    @abc.abstractmethod
    def _decode(self, record, frames: np.ndarray, geometry: Geometry) -> tuple[torch.Tensor, int]:
        """One task: the wanted frames (sorted), resized, and the number of frames decoded."""

    def _start(self, job: Job) -> None:
        """Set up what the tasks share (in the main thread, before the first task)."""

    # -- the pool

    def _tasks_per_batch(self, job: Job) -> float:
        sample = job.plan.batches[:4]
        n = sum(len(self._tasks(job.index[v], frames))
                for bp in sample for v, frames, _, _ in group_by_video(bp))
        return max(1.0, n / max(1, len(sample)))

    def _ahead(self, job: Job) -> int:
        """Batches submitted beyond the one assembled: two cycles of the pool."""
        return min(_MAX_AHEAD, 2 * self._cycle(job))

    def _cycle(self, job: Job) -> int:
        """Batches the pool finishes while every thread runs one task."""
        return max(1, math.ceil(max(1, job.workers) / self._tasks_per_batch(job)))

    def pipeline(self, job: Job) -> tuple[int, int]:
        # The warm-up covers the batches submitted ahead, so none of the timed ones was
        # decoded while the pipeline filled.
        return self._ahead(job) + 1, self._cycle(job)

    def batches(self, job: Job) -> Iterator[torch.Tensor]:
        self._start(job)
        ahead = self._ahead(job)
        geometry = job.workload.geometry
        pending: collections.deque = collections.deque()
        plans = iter(job.plan.batches)
        pool = ThreadPoolExecutor(max(1, job.workers), thread_name_prefix=self.name)
        try:
            while True:
                while len(pending) <= ahead:
                    bp = next(plans, None)
                    if bp is None:
                        break
                    pending.append((bp, self._submit(pool, bp, job.index, geometry)))
                if not pending:
                    return
                bp, groups = pending.popleft()
                yield self._assemble(bp, groups, job.index, geometry)
        finally:
            for _, groups in pending:
                for _, _, futures in groups:
                    for f in futures:
                        f.cancel()
            # Tasks not started are dropped (those of the batch being assembled too, after an
            # error); running ones finish, so their decoders are released.
            pool.shutdown(wait=True, cancel_futures=True)

    def _submit(self, pool: ThreadPoolExecutor, bp, index, geometry: Geometry) -> list:
        groups = []
        for v, frames, rows, source in group_by_video(bp):
            rec = index[v]
            futures: list[Future] = [pool.submit(self._decode, rec, frames[a:b], geometry)
                                     for a, b in self._tasks(rec, frames)]
            groups.append((rows, source, futures))
        return groups

    def _assemble(self, bp, groups: list, index, geometry: Geometry) -> torch.Tensor:
        shape = output_shape(bp, index, geometry)
        rows_total = bp.batch_size * bp.frame_indices.shape[1]
        out = torch.empty((rows_total, *shape[-3:]), dtype=torch.uint8, device=self.device)
        decoded = tasks = 0
        for rows, source, futures in groups:
            parts = [f.result() for f in futures]
            decoded += sum(n for _, n in parts)
            tasks += len(parts)
            got = parts[0][0] if len(parts) == 1 else torch.cat([x for x, _ in parts])
            if got.shape[0] != int(source.max()) + 1:
                raise RuntimeError(f"{self.name}: a video's tasks gave {got.shape[0]} frames "
                                   f"for {int(source.max()) + 1} wanted")
            pick = torch.from_numpy(source).to(got.device)
            out[torch.from_numpy(rows).to(out.device)] = got[pick]
        self._counts["decoded"] += decoded
        self._counts["delivered"] += rows_total
        self._counts["tasks"] += tasks
        return out.view(shape)


def _resize_and_crop(x: torch.Tensor, geometry: Geometry, height: int, width: int) -> torch.Tensor:
    """``[n, h, w, 3]`` frames of a ``height × width`` video, already scaled by the decoder to
    ``h × w`` (or not at all), to the workload's output: the rest of the resize in torch
    (bilinear, antialiased, as :func:`resize_torch`), then the centre crop."""
    rh, rw = geometry.resized(height, width)
    if tuple(x.shape[1:3]) != (rh, rw):
        x = resize_torch(x, Geometry(size=(rh, rw)))
    return center_crop(x, geometry.crop).contiguous()


# -- SPDL -------------------------------------------------------------------------------------

#: SPDL's ``nv12_to_rgb(coeff=...)`` for a record's colour space; vidloader and swscale take
#: untagged video as BT.601 (SPDL's own default is BT.709).
_SPDL_COEFF = {"bt709": 1, "fcc": 4, "bt470bg": 5, "smpte170m": 6, "smpte240m": 7,
               "bt2020nc": 9, "bt2020_ncl": 9, "bt2020c": 10, "bt2020_cl": 10}
_SPDL_COEFF_UNTAGGED = 6
#: SPDL's demuxer reads this far past a window's end (B-frames may display later).
_SPDL_DEMUX_MARGIN_S = 0.3


def _spdl_window(record, first: int, last: int) -> tuple[Fraction, Fraction]:
    """The time window (seconds, exact) whose frames are ``first .. last`` of ``record``: SPDL
    keeps frames with ``start <= pts < end`` and seeks to ``start - 1 tick``, backwards, so
    decoding starts at the keyframe of ``first`` (one GOP earlier when ``first`` is itself a
    keyframe: the seek lands before it)."""
    tb = Fraction(record.time_base)
    return Fraction(int(record.pts[first])) * tb, Fraction(int(record.pts[last]) + 1) * tb


def _pynvc_ffmpeg_loaded() -> str | None:
    """The path of PyNvVideoCodec's bundled libavformat if this process mapped it.

    PyNvVideoCodec ships a demux-only ``libavformat.so.63`` and ``libavutil.so.61`` with the
    same sonames as the FFmpeg SPDL is given (PyAV 19's, through the shim): whichever is
    loaded first serves both, so SPDL would demux with PyNvVideoCodec's build.
    """
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "PyNvVideoCodec/libavformat" in line:
                    return line.split()[-1]
    except OSError:
        pass
    return None


def _even_up(n: int) -> int:
    return n + (n % 2)


class SpdlPeer(_PoolPeer):
    """Meta's SPDL 0.8 (``spdl-io``) decoding on NVDEC, one time window per task.

    SPDL has no NVDEC call that takes frame indices. For each run of wanted frames of a video
    in a batch (:func:`_runs`), a task demuxes the time window from the first wanted frame
    to the last (``spdl.io.demux_video(path, timestamp=(start, end))``; SPDL seeks back to
    the keyframe) and decodes it with ``decode_packets_nvdec``'s steps, scaled by NVDEC to
    the workload's resize size; the wanted frames are then picked by pts. ``decoded`` counts
    every packet demuxed, which NVDEC decodes: the frames before the first wanted one and
    SPDL's 0.3 s demux margin past the last.
    """

    name, library = "spdl", "spdl-io"
    note = ("spdl: SPDL 0.8 on NVDEC, one time window per task (demux_video from the first "
            "wanted frame's keyframe to the last wanted frame, decode_packets_nvdec's steps "
            "with NVDEC's scaler to the output size and the file's colour matrix), frames "
            "picked by pts; a thread pool of --workers threads")

    def check(self) -> None:
        _need_cuda()
        self.spdl = import_or_skip("spdl.io", self.library)
        utils = import_or_skip("spdl.io.utils", self.library)
        version = version_of(self.library)
        foreign = _pynvc_ffmpeg_loaded()
        if foreign:
            raise Skip(f"PyNvVideoCodec's own FFmpeg ({foreign}) is loaded in this process, "
                       "and SPDL would bind to its libavformat.so/libavutil.so: load SPDL's "
                       "FFmpeg first (spdl.io.utils.get_ffmpeg_versions())")
        try:
            utils.get_ffmpeg_versions()  # loads SPDL's FFmpeg extension
        except Exception as exc:
            raise Skip(f"spdl-io {version} finds no FFmpeg it can load ({root_cause(exc)}); "
                       "it needs FFmpeg's sonames on LD_LIBRARY_PATH (../shared/tools/"
                       "ffmpeg-shim.sh over PyAV's bundled FFmpeg)") from None
        if not utils.built_with_nvcodec():
            raise Skip(f"spdl-io {version} imports but its NVDEC extension does not load "
                       "(libcudart.so, libnvcuvid.so on LD_LIBRARY_PATH?)")

    def settings(self) -> dict:
        return {
            "version": version_of(self.library),
            "api": "spdl.io.demux_video(path, timestamp=(start, end)), then decode_packets_"
                   "nvdec's steps: apply_bsf(<codec>_mp4toannexb), nvdec_decoder(cuda_config, "
                   "codec, scale_width, scale_height).decode_packets, nv12_to_rgb(coeff, "
                   "sync=True), to_torch",
            "device_config": "cuda_config(device_index=<torch's device>, allocator=(torch.cuda."
                             "caching_allocator_alloc, caching_allocator_delete)); SPDL's default "
                             "stream (the per-thread default stream)",
            "threads": "--workers, one task (time window) at a time each; one NVDEC decoder per "
                       "thread, reused across files (nvdec_decoder(use_cache=True))",
            "window": "from the first wanted frame of a run (SPDL seeks back to its keyframe; "
                      "one GOP earlier when it is a keyframe) to the last; a new run where "
                      "restarting at the next keyframe decodes fewer frames, counting SPDL's "
                      f"{_SPDL_DEMUX_MARGIN_S} s demux margin past a window's end",
            "selection": "wanted frames picked by pts from the window's display-order "
                         "timestamps (VideoPackets.get_timestamps)",
            "resize": "NVDEC's scaler straight to the workload's resize size (even sizes; an "
                      "odd one is scaled to the next even size, then resized in torch), centre "
                      "crop in torch; the other GPU peers resize full frames in torch "
                      "(bilinear, antialiased)",
            "colour": "the file's matrix (BT.601 when untagged, as vidloader and swscale; "
                      "decode_packets_nvdec always uses BT.709), limited range, chroma "
                      "nearest-neighbour, SPDL's kernel",
            "ahead": f"batches submitted ahead: two cycles of the pool, at most {_MAX_AHEAD}",
        }

    def _start(self, job: Job) -> None:
        device = torch.cuda.current_device()
        self._config = self.spdl.cuda_config(
            device_index=device,
            allocator=(torch.cuda.caching_allocator_alloc, torch.cuda.caching_allocator_delete))

    def _tasks(self, record, frames: np.ndarray) -> list[tuple[int, int]]:
        margin = round(_SPDL_DEMUX_MARGIN_S * (record.fps or 30))
        return _runs(record.keyframes, frames, margin + 2)

    def _decode(self, record, frames: np.ndarray, geometry: Geometry) -> tuple[torch.Tensor, int]:
        spdl = self.spdl
        window = _spdl_window(record, int(frames[0]), int(frames[-1]))
        packets = spdl.demux_video(record.path, timestamp=window)
        # Display-order timestamps of the window's frames: what NVDEC will output, in order.
        # Read before decoding, which consumes the packets.
        shown = np.rint(np.asarray(packets.get_timestamps(), np.float64)
                        / float(record.time_base)).astype(np.int64)
        decoded = len(packets.get_timestamps(raw=True))
        codec = packets.codec
        if codec.name in ("h264", "hevc"):
            packets = spdl.apply_bsf(packets, f"{codec.name}_mp4toannexb")
        rh, rw = geometry.resized(record.height, record.width)
        scale = (rh, rw) != (record.height, record.width)
        decoder = spdl.nvdec_decoder(self._config, codec,
                                     scale_width=_even_up(rw) if scale else -1,
                                     scale_height=_even_up(rh) if scale else -1)
        nv12 = decoder.decode_packets(packets)
        rgb = spdl.nv12_to_rgb(nv12, device_config=self._config, sync=True,
                               coeff=_SPDL_COEFF.get(record.color_space, _SPDL_COEFF_UNTAGGED))
        x = spdl.to_torch(rgb)  # [k, 3, h, w]
        want = record.pts[frames].astype(np.int64)
        pos = np.searchsorted(shown, want)
        if (x.shape[0] != len(shown) or np.any(pos >= len(shown))
                or not np.array_equal(shown[np.minimum(pos, len(shown) - 1)], want)):
            raise RuntimeError(f"SPDL: the window {float(window[0]):.4f}-{float(window[1]):.4f} s "
                               f"of {record.path} gave {x.shape[0]} frames, {len(shown)} "
                               f"timestamps, not all of frames {frames.tolist()}")
        x = x[torch.from_numpy(pos).to(x.device)].permute(0, 2, 3, 1)
        return _resize_and_crop(x, geometry, record.height, record.width), decoded


# -- PyAV with NVDEC ----------------------------------------------------------------------------

#: Wanted frames uploaded and resized at once (a 1080p frame is 6 MB, 25 MB as floats).
_PYAV_UPLOAD_CHUNK = 8


def _bind_primary_context(device: int) -> None:
    """Make ``device``'s primary CUDA context, torch's, current on this thread.

    FFmpeg's ``current_ctx`` takes the thread's current context; a new thread has none until
    the CUDA runtime needs one. (``primary_ctx`` would retain it itself, but refuses a primary
    context already active with other flags than ``CU_CTX_SCHED_BLOCKING_SYNC``, as torch's.)
    """
    import ctypes

    cu = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    for call, args in (("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(dev), device)),
                       ("cuDevicePrimaryCtxRetain", (ctypes.byref(ctx), dev)),
                       ("cuCtxSetCurrent", (ctx,))):
        rc = getattr(cu, call)(*args)
        if rc:
            raise RuntimeError(f"{call} failed with CUresult {rc}")


class PyavNvdecPeer(_PoolPeer):
    """PyAV with FFmpeg's CUDA hwaccel (NVDEC): the video-dataloader exercise's GPU path.

    One task per video of a batch: open the file with ``av.open(path, hwaccel=HWAccel("cuda"))``,
    and for each run of wanted frames (:func:`_runs`) seek to the keyframe before the first
    and decode forward, as the exercise's CPU loader does. PyAV copies every decoded frame
    back to host memory (NV12); the wanted ones become RGB with swscale on the CPU, go to the
    GPU in chunks and are resized there with torch, as ``pynvc-simple``'s frames are.
    """

    name, library = "pyav-nvdec", "av"
    note = ("pyav-nvdec: PyAV with FFmpeg's CUDA hwaccel (NVDEC), seek + decode forward per "
            "video of a batch; every decoded frame comes back to host memory through PyAV, "
            "RGB by swscale on the CPU, then uploaded and resized in torch on the GPU; a thread "
            "pool of --workers threads")

    #: Frame formats PyAV handed back (``{"nv12"}`` when NVDEC decoded every frame).
    formats_seen: set

    def __init__(self) -> None:
        super().__init__()
        self.formats_seen = set()

    def check(self) -> None:
        _need_cuda()
        self.av = import_or_skip("av", self.library)
        try:
            from av.codec.hwaccel import HWAccel, hwdevices_available
        except ImportError:
            raise Skip(f"PyAV {version_of(self.library)} has no hwaccel API "
                       "(av.codec.hwaccel.HWAccel)") from None
        if "cuda" not in hwdevices_available():
            raise Skip(f"PyAV {version_of(self.library)}'s FFmpeg has no CUDA hwaccel "
                       f"(hwdevices: {', '.join(hwdevices_available()) or 'none'})")
        self._hwaccel_cls = HWAccel

    def settings(self) -> dict:
        return {
            "version": version_of(self.library),
            "decoder": "FFmpeg's native decoder with the CUDA hwaccel (NVDEC), through "
                       "av.open(path, hwaccel=...); not the h264_cuvid wrapper decoder",
            "hwaccel": "HWAccel(device_type='cuda', device=<torch's device>, "
                       "allow_software_fallback=False, options={'current_ctx': '1'})",
            "cuda_context": "FFmpeg uses torch's context (the device's primary context, made "
                            "current on each decoding thread) instead of creating one for "
                            "every file it opens; primary_ctx=1 fails once torch has started "
                            "CUDA (FFmpeg wants the primary context made with "
                            "CU_CTX_SCHED_BLOCKING_SYNC)",
            "download": "every decoded frame copied to host memory by PyAV (NV12; "
                        "is_hw_owned=False), wanted or not",
            "rgb": "VideoFrame.to_ndarray(format='rgb24') of the wanted frames (swscale, CPU)",
            "resize": f"torch on the GPU after upload in chunks of {_PYAV_UPLOAD_CHUNK} frames "
                      "(bilinear, antialiased), then centre crop, as pynvc-simple",
            "threads": "--workers threads (PyAV releases the GIL while it demuxes, decodes, "
                       "downloads and converts), one task per video of a batch; one FFmpeg "
                       "thread per decoder",
            "seek": "file opened per task (as the exercise opens per item); container.seek to "
                    "the keyframe at or before the first frame of each run, decode forward",
            "ahead": f"batches submitted ahead: two cycles of the pool, at most {_MAX_AHEAD}",
        }

    def _start(self, job: Job) -> None:
        self.formats_seen = set()
        self._hwaccel = self._make_hwaccel()

    def _make_hwaccel(self):
        self._device_index = torch.cuda.current_device()
        self._bound = threading.local()
        return self._hwaccel_cls(device_type="cuda", device=str(self._device_index),
                                 allow_software_fallback=False, options={"current_ctx": "1"})

    def _tasks(self, record, frames: np.ndarray) -> list[tuple[int, int]]:
        return [(0, len(frames))]  # one open file per video; runs are seeks inside it

    def _decode(self, record, frames: np.ndarray, geometry: Geometry) -> tuple[torch.Tensor, int]:
        av = self.av
        pts = record.pts[frames].astype(np.int64).tolist()
        chunks, pictures, decoded = [], [], 0
        if self._hwaccel is not None and not getattr(self._bound, "context", False):
            _bind_primary_context(self._device_index)  # for FFmpeg's current_ctx
            self._bound.context = True
        with av.open(record.path, hwaccel=self._hwaccel) as container:
            stream = container.streams[record.stream_index]
            stream.codec_context.thread_count = 1
            if self._hwaccel is not None and not stream.codec_context.is_hwaccel:
                raise RuntimeError(f"PyAV opened {record.path} without the CUDA hwaccel")
            for a, b in _runs(record.keyframes, frames, 2):
                container.seek(pts[a], stream=stream)  # backwards, to the keyframe at or before
                n = self._decode_run(container, stream, pts[a:b], pictures, chunks, geometry,
                                     record)
                decoded += n
        if pictures:
            chunks.append(self._upload(pictures, geometry, record))
        return (chunks[0] if len(chunks) == 1 else torch.cat(chunks)), decoded

    def _decode_run(self, container, stream, pts: list[int], pictures: list, chunks: list,
                    geometry: Geometry, record) -> int:
        frames = FramesAt(container, stream, pts)
        for frame in frames:
            self.formats_seen.add(frame.format.name)
            pictures.append(frame.to_ndarray(format="rgb24"))
            if len(pictures) == _PYAV_UPLOAD_CHUNK:
                chunks.append(self._upload(pictures, geometry, record))
                pictures.clear()
        return frames.decoded

    def _upload(self, pictures: list, geometry: Geometry, record) -> torch.Tensor:
        x = torch.from_numpy(np.stack(pictures)).to(self.device)
        return _resize_and_crop(x, geometry, record.height, record.width)


# -- torchcodec on CUDA -------------------------------------------------------------------------

#: Open torchcodec CUDA decoders each pool thread keeps (least recently used closed first):
#: each holds an NVDEC session and its frame pool, so 16 threads over 100 files must not
#: keep one per (thread, file).
TORCHCODEC_OPEN_PER_THREAD = 4


def least_decoded(keyframes: np.ndarray, frames: np.ndarray, after: int | None = None) -> int:
    """The frames a decoder that seeks to keyframes decodes for a video's sorted wanted
    ``frames``: the union of each frame's span from its keyframe. ``after``: the last frame
    the decoder decoded before this call; where it lies in the first frame's GOP, before that
    frame, the decoder goes on from there without a seek (torchcodec does), so the first span
    starts after it."""
    if len(frames) == 0:
        return 0
    frames = np.asarray(frames, dtype=np.int64)
    starts = keyframes[np.searchsorted(keyframes, frames, side="right") - 1].astype(np.int64)
    lo, hi = int(starts[0]), int(frames[0])
    if after is not None and lo <= after < hi:
        lo = after + 1
    total = 0
    for s, f in zip(starts[1:].tolist(), frames[1:].tolist()):
        if s > hi + 1:  # a new span: the last one is complete
            total += hi - lo + 1
            lo = s
        hi = max(hi, f)
    return total + hi - lo + 1


class _Opened:
    """A torchcodec decoder and the last frame it decoded."""

    def __init__(self, decoder) -> None:
        self.decoder, self.last = decoder, None


class TorchcodecCudaPeer(_PoolPeer):
    """torchcodec decoding on the GPU (``VideoDecoder(path, device="cuda")``, NVDEC behind
    FFmpeg's CUDA hwaccel), as its documentation shows: a few decoders kept open on each
    thread (:data:`TORCHCODEC_OPEN_PER_THREAD`), ``get_frames_at`` with a video's sorted
    wanted frames, frames left on the GPU and resized there with torch. torchcodec does not
    report what it decodes: ``decoded`` is estimated from the index (:func:`least_decoded`).

    Its CUDA builds come from PyTorch's own wheel index; the package index's wheels decode on
    the CPU only (``VideoDecoder(..., device="cuda")`` raises "Unsupported device: cuda"), so
    where no CUDA build is installed the run is skipped, its JSON saying why
    (``../shared/tools/README.md``: the GPU machine cannot reach that index)."""

    name, library = "torchcodec-cuda", "torchcodec"
    note = ("torchcodec-cuda: VideoDecoder(path, device='cuda', seek_mode='exact'), "
            "get_frames_at per video of a batch on a thread pool, resize in torch on the GPU; "
            "decoded frames estimated from the index (from each keyframe, or on from the "
            "decoder's last frame in the same GOP)")

    def check(self) -> None:
        _need_cuda()
        try:
            self.decoders = import_or_skip("torchcodec.decoders", self.library)
        except Skip as exc:
            raise Skip(f"{exc}; its CUDA builds come from PyTorch's wheel index (pip install "
                       f"torchcodec --index-url https://download.pytorch.org/whl/<cuda>), "
                       f"the package index's decode on the CPU only") from None

    def settings(self) -> dict:
        return {"version": version_of(self.library), "device": self.device, "seek_mode": "exact",
                "api": "get_frames_at(indices=sorted wanted frames), one call per video of a batch",
                "resize": "torch on the GPU (bilinear, antialiased), then centre crop",
                "threads": f"--workers threads, each keeping its {TORCHCODEC_OPEN_PER_THREAD} "
                           "most recently used decoders open",
                "decoded": "not reported by torchcodec: estimated from the index"}

    def _start(self, job: Job) -> None:
        self._local = threading.local()
        record = job.index[int(job.plan.batches[0].video_indices[0])]
        try:  # a CPU-only build refuses the device when a decoder is made
            probe = self._make(record)
        except Exception as exc:  # noqa: BLE001 - torchcodec raises RuntimeError / ValueError
            if "unsupported device" not in str(exc).lower():
                raise  # a missing file, no memory, an API change: a failed run, not a skip
            raise Skip(f"torchcodec {version_of(self.library)} does not decode on "
                       f"{self.device!r} here ({root_cause(exc)}): its CUDA builds come from "
                       "PyTorch's wheel index, not installed on this machine") from None
        del probe

    def _make(self, record):
        return self.decoders.VideoDecoder(record.path, stream_index=record.stream_index,
                                          device=self.device, seek_mode="exact",
                                          dimension_order="NHWC")

    def _opened(self, record) -> _Opened:
        files = getattr(self._local, "files", None)
        if files is None:
            files = self._local.files = FileCache(capacity=TORCHCODEC_OPEN_PER_THREAD)
        return files.get(record.path, lambda: _Opened(self._make(record)))

    def _tasks(self, record, frames: np.ndarray) -> list[tuple[int, int]]:
        return [(0, len(frames))]

    def _decode(self, record, frames: np.ndarray, geometry: Geometry) -> tuple[torch.Tensor, int]:
        opened = self._opened(record)
        data = opened.decoder.get_frames_at(indices=frames.tolist()).data
        decoded = least_decoded(record.keyframes, frames, after=opened.last)
        opened.last = int(frames[-1])
        out = _resize_and_crop(data.to(self.device), geometry, record.height, record.width)
        return out, decoded

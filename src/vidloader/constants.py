"""Bounds and defaults, set once here. Each is a number of items, bytes or seconds."""

from __future__ import annotations

#: Version of the on-disk index format written by :meth:`VideoIndex.save` (3: adds profile,
#: chroma format and coded size; 2: paths of videos under the index file's folder are stored
#: relative to it; versions 1 and 2 are read).
INDEX_FORMAT_VERSION = 4

#: Units of work decoded ahead of the consumer beyond one per worker (bounded prefetch).
DEFAULT_PREFETCH_PER_WORKER = 2

#: Seconds the loader waits on its result queue before checking that workers are alive.
QUEUE_POLL_SECONDS = 0.1

#: Seconds a worker is given to exit after being asked to, before it is terminated.
WORKER_JOIN_SECONDS = 5.0

#: Seconds to wait for a worker process to start and report ready.
WORKER_START_SECONDS = 120.0

#: Decoder threads per CPU decode (FFmpeg ``thread_count``); 0 lets FFmpeg choose.
DEFAULT_DECODER_THREADS = 1

#: Consecutive batches one worker plans and decodes together (GOP grouping across batches).
#: Staging memory is ``lookahead × (workers + prefetch − 1)`` batches.
DEFAULT_LOOKAHEAD_BATCHES = 4

#: Interpolation used by swscale when the decoder resizes (the resize pushdown).
DEFAULT_INTERPOLATION = "BILINEAR"

#: NVDEC decoders per GPU run on threads by the loader (the H200 has 7 NVDEC engines). Measured
#: through the loader on the H200 (benchmarks/results/gpu/sweep_*.json): 16 against 8 gave
#: 358 vs 209 random frames/s and 2147 vs 2038 sequential frames/s; each decoder costs GPU
#: memory (surfaces, and its thread's conversion buffers: ~1 GiB at 1080p).
DEFAULT_NVDEC_DECODERS = 16

#: Decoder threads allowed per GPU: data-center GPUs have up to 7 NVDEC engines, and each
#: decoder holds its own surfaces (tens of MiB at 1080p), so more threads only cost memory.
MAX_DECODERS_PER_GPU = 16

#: File extensions taken as videos when a folder is searched (``build_index``,
#: ``prepare_dataset``): the one list both use.
VIDEO_EXTENSIONS = (".mp4", ".mov", ".mkv", ".avi", ".webm", ".m4v")

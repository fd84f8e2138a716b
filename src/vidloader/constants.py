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
#: Staging memory is ``lookahead × (workers + prefetch − 1)`` batches (on the GPU, NVDEC in
#: separation mode binds only ``lookahead × units_decoding`` of them: ``pipeline/_memory.py``).
DEFAULT_LOOKAHEAD_BATCHES = 4

#: Interpolation used by swscale when the decoder resizes (the resize pushdown).
DEFAULT_INTERPOLATION = "BILINEAR"

#: NVDEC decoders per GPU run on threads by the loader (the H200 has 7 NVDEC engines). Measured
#: through the loader on the H200 (benchmarks/results/gpu/sweep_*.json): 16 against 8 gave
#: 358 vs 209 random frames/s and 2147 vs 2038 sequential frames/s; each decoder costs GPU
#: memory (surfaces, and its thread's conversion buffers: ~1 GiB at 1080p). The most the
#: loader picks by itself (``nvdec_decoders=None``): for 1080p and larger frames.
DEFAULT_NVDEC_DECODERS = 16

#: Demux workers of ``backend="nvdec"`` (separation mode) when ``num_workers`` is not given:
#: at most this many (fewer on a smaller machine). On the H200 with 16 cores, 8 ran W1 (1080p)
#: uniform random frames at 410 frames/s against 325 with 16 (4: 463), sequential reading at
#: 2,282 against 2,217 (4: 2,154) (``session20-4``), and W4's random clips and clips-head at
#: 2,314 / 2,712 against 2,187 / 2,693 (``session20-6``): the decoding process, not the demux,
#: needs the cores.
DEFAULT_NVDEC_DEMUX_WORKERS = 8

#: The fewest decoder threads the loader picks by itself, for small frames each decoded once.
#: Each delivered frame costs its decoder thread Python work under the GIL (copies, conversion
#: launches) whatever its size, and NVDEC time in proportion to its pixels and to the frames
#: decoded for it: where NVDEC's share is small, more threads only contend for the GIL. Session
#: 17 on the H200 (``benchmarks/results/gpu/session17-5``, ``-6``, ``-7``): on W4's clips from
#: each video's head (720p / 340p, each frame decoded once) 16 / 8 / 4 / 2 decoders gave
#: 1,481-1,854 / 2,318 / 2,426-2,865 / 1,893 frames/s; on W4's random clips (~6 decoded per
#: delivered) 16 / 4 gave 1,412 / 1,023; on W1's 1080p random frames 16 / 8 / 4 gave 317 / 252
#: / 159 (``pipeline._config.auto_nvdec_decoders``).
MIN_AUTO_NVDEC_DECODERS = 4

#: With ``nvdec_processes=K > 1`` and ``nvdec_decoders=None``, each process takes
#: ``ceil(PROCESS_DECODER_FACTOR × auto / K)`` decoder threads (at least
#: :data:`MIN_PROCESS_NVDEC_DECODERS`, at most ``auto``, the one-process choice): processes have
#: a GIL each, so together they keep the engines busy on about twice one process's threads,
#: and every thread holds NVDEC surfaces, a GOP stack and a conversion workspace (~0.5 GiB at
#: 1600×900). W3 at 1600×900 in 4 processes, H100 (``benchmarks/results/gpu/session23-2``):
#: stream order 11 / 8 / 4 / 2 threads a process gave 5,362 / 5,462 / 4,887 / 3,794 frames/s
#: in 44.8 / 38.9 / 31.1 / 27.2 GiB; random order (lookahead 8) 16 / 8 / 4 gave 1,120 / 1,113
#: / 1,030 in 58.4 / 39.2 / 28.7 GiB. SPDL's Kinetics setting (small frames, 4 threads in one
#: process) ran fastest as 12 processes of 2 (``session18-6``).
PROCESS_DECODER_FACTOR = 2
MIN_PROCESS_NVDEC_DECODERS = 2

#: Decoded frames an NVDEC decoder thread holds in one GOP stack before it converts them: a
#: GOP's wanted frames are copied out of the decoder's surfaces into a stack of at most this
#: many NV12 pictures, converted to RGB and written into the staging slots, and the next stack
#: begins. The conversion already ran in chunks of 8 (``_frame.RGB_CHUNK``); stacking a whole
#: GOP held every wanted frame of it at once (sequential W1: 16 threads x 30 frames x 3.1 MB,
#: 1.57 GiB at peak on the H100, ``benchmarks/results/gpu/session9-6``), and each thread's
#: CUDA stream kept that high-water mark in PyTorch's caching allocator for good.
#: Stacks of 16 with no frame cache read W1 (1080p) in stream order at 2,463-2,472 frames/s in
#: one process against 1,837-2,264 with stacks of 8 and a 256 MiB frame cache, the same on
#: uniform random frames (345 against 344; H200, ``benchmarks/results/gpu/session21-7`` and
#: ``session21-8``, alternated in ``session21-10``): fewer stacks per GOP are fewer hand-overs
#: to the sink and batch writes from Python, on decoder threads that contend for the GIL (a
#: stack still converts in chunks of ``_frame.RGB_CHUNK``). ``memory_budget`` lowers it;
#: ``nvdec_options["stack_frames"]`` sets it.
DEFAULT_STACK_FRAMES = 16

#: Decoder threads allowed per GPU: data-center GPUs have up to 7 NVDEC engines, and each
#: decoder holds its own surfaces (tens of MiB at 1080p), so more threads only cost memory.
MAX_DECODERS_PER_GPU = 16

#: File extensions taken as videos when a folder is searched (``build_index``,
#: ``prepare_dataset``): the one list both use.
VIDEO_EXTENSIONS = (".mp4", ".mov", ".mkv", ".avi", ".webm", ".m4v")

#: Open files a CPU executor keeps (LRU): consecutive tasks often hit the same video, and a
#: kept-open decoder can continue forward without reopening or seeking. A loader on a plan
#: of streams raises it to each worker's share of the rows (``pipeline/_loader.py``).
DEFAULT_MAX_OPEN_FILES = 4

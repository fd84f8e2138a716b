"""The GPU image pool: files decoded a batch at a time by nvImageCodec on its own thread and
CUDA stream, augmented as one batch on the consumer's stream.

Stages overlap. ``submit`` queues the unit's decodes on the decode thread at once; the
decode thread takes units in order, has nvImageCodec open each plan's files (a
``CodeStream`` from a path is read in C++, without the GIL; a batch-decoder object given
bytes gets them from reader threads instead), decodes the plan on the *decode stream* and
records an event. ``get`` takes the oldest unit's decoded images, makes the consumer's stream
wait for the event (a GPU-side wait: the host does not block), and launches the batched
crop/resize/normalize (:func:`~..images._batched.crop_resize_batch`) on the consumer's stream
into the slot. So while batch k is augmented, batch k+1 is already decoding, on the host
(nvImageCodec's parsing and Huffman work, which releases the GIL) and on the GPU (its own
stream); the scheduler keeps ``prefetch`` units submitted, so decoding runs up to that far
ahead.

Decoded images are kept alive until an event recorded after their augmentation has passed:
their memory belongs to the decoder's allocator, which may reuse it as soon as the tensors
are dropped, while the kernels reading them may still be queued.
"""

from __future__ import annotations

import collections
from concurrent.futures import ThreadPoolExecutor

import torch

from ._contract import BatchPool
from ._image_fill import fill_from_images, fill_task_messages, read_file
from ._messages import FillTask

_TORCH_DTYPES = {"uint8": torch.uint8, "float32": torch.float32, "float16": torch.float16}


def allocate_final_slots(config, num_slots: int, device: torch.device) -> list:
    """``num_slots`` dicts ``{"images": ...}`` already in the output's dtype and layout
    (``[B, 3, oh, ow]`` or ``[B, oh, ow, 3]``): normalisation happens in the augmentation's
    last kernel, so the collector only copies out (:attr:`BatchDecodePool.stages_final`)."""
    proc, (oh, ow) = config.proc, config.out_hw
    shape = (config.batch_size, 3, oh, ow) if proc.layout == "chw" else (config.batch_size, oh, ow, 3)
    return [{"images": torch.zeros(shape, dtype=_TORCH_DTYPES[proc.dtype], device=device)}
            for _ in range(num_slots)]


class _Streams:
    """The decode stream and its events on a GPU; no-ops on the CPU (a stand-in decoder)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device
        self.decode = torch.cuda.Stream(device) if self.cuda else None

    def decoding(self):
        """Context for the decode thread: the decoder orders its work on the decode stream."""
        import contextlib

        return torch.cuda.stream(self.decode) if self.cuda else contextlib.nullcontext()

    def record(self, stream=None):
        """An event at the current point of ``stream`` (default: the current stream)."""
        if not self.cuda:
            return None
        event = torch.cuda.Event()
        event.record(stream if stream is not None else torch.cuda.current_stream(self.device))
        return event

    def wait(self, event) -> None:
        """The consumer's stream waits (on the GPU) for ``event``."""
        if event is not None:
            torch.cuda.current_stream(self.device).wait_event(event)


#: Decode threads for nvImageCodec, each with its own decoder and CUDA stream, plans dealt to
#: them in turn. One: in one call on the H100 the JPEG loader ran 6,319 images/s on one lane,
#: 6,109 and 5,469 on two, 5,962 on three, each lane's decode slowing to ~60 ms a batch
#: against ~40 (``benchmarks/results/gpu/session9-10/jpeg_stages.log``): the decoders share
#: the hardware and nvImageCodec's own threads, so more lanes only contend.
NVIMGCODEC_LANES = 1


class _Lane:
    """A decode thread with its decoder and its CUDA stream."""

    def __init__(self, decoder, device: torch.device, number: int) -> None:
        self.decoder = decoder
        self.streams = _Streams(device)
        self.thread = ThreadPoolExecutor(1, thread_name_prefix=f"vidloader-decode-{number}")


class BatchDecodePool(BatchPool):
    """Batches decoded on the GPU by nvImageCodec in this process, decode overlapped with
    the previous batch's augmentation (module docstring).

    ``decoder`` stands in for nvImageCodec (anything with ``name`` and
    ``decode(list[bytes | None]) -> list[Tensor | None]``); on CPU tensors the same stages run
    on the same threads without streams.
    """

    #: Slots hold the finished output (dtype, normalisation, layout): the collector skips
    #: ``finalize``.
    stages_final = True

    def __init__(self, config, num_slots: int, decoder=None) -> None:
        from ..images._nvimgcodec import NvImageCodecDecoder

        device = config.device if config.device is not None else torch.device("cpu")
        self.config = config
        # A decoder object given by the user may not be thread-safe: one lane for it.
        decoders = ([decoder] if decoder is not None else
                    [NvImageCodecDecoder(device) for _ in range(NVIMGCODEC_LANES)])
        self.lanes = [_Lane(d, device, k) for k, d in enumerate(decoders)]
        self.decoder = decoders[0]
        self._next_lane = 0
        self.reader = ThreadPoolExecutor(config.reader_threads, thread_name_prefix="vidloader-read")
        self.streams = self.lanes[0].streams  # the consumer's side: waits and records
        self.slots = allocate_final_slots(config, num_slots, device)
        self._pending: collections.deque = collections.deque()  # (task, per-plan futures)
        self._done: collections.deque = collections.deque()
        self._in_use: collections.deque = collections.deque()  # (event, decoded images)

    @property
    def ways(self) -> int:
        return 1

    def submit(self, worker: int, task: FillTask) -> None:
        dataset = self.config.dataset
        decodes = []
        for plan in task.plans:
            # Plans are dealt to the lanes in turn; their futures stay in plan order.
            lane = self.lanes[self._next_lane]
            self._next_lane = (self._next_lane + 1) % len(self.lanes)
            paths = [dataset.path(i) for i in plan.video_indices.tolist()]
            if self._opens_files:  # the decoder reads the files itself, off the GIL
                decodes.append(lane.thread.submit(self._decode_files, lane, paths))
                continue
            reads = [self.reader.submit(read_file, path) for path in paths]
            decodes.append(lane.thread.submit(self._decode, lane, reads))
        self._pending.append((task, decodes))

    @property
    def _opens_files(self) -> bool:
        return callable(getattr(self.decoder, "decode_files", None))

    @staticmethod
    def _decode_files(lane: _Lane, paths: list[str]):
        """On a lane's thread: the plan's files, opened and decoded by its decoder on its
        stream; the images and an event marking their completion."""
        with lane.streams.decoding():
            images = lane.decoder.decode_files(paths)
            return images, lane.streams.record(lane.streams.decode)

    @staticmethod
    def _decode(lane: _Lane, reads: list):
        """On a lane's thread: the plan's files (read by the reader threads), decoded by its
        decoder on its stream; the images and an event marking their completion."""
        blobs = [f.result() for f in reads]
        with lane.streams.decoding():
            images = lane.decoder.decode(blobs)
            return images, lane.streams.record(lane.streams.decode)

    def get(self):
        while not self._done:
            task, decodes = self._pending.popleft()
            decodes = iter(decodes)

            def fill(plan, staging, decodes=decodes):
                images, ready = next(decodes).result()  # re-raises the decoder's error
                self.streams.wait(ready)
                out = fill_from_images(self.config, self.decoder.name, images, plan, staging)
                self._in_use.append((self.streams.record(), images))
                return out
            self._done.extend(fill_task_messages(fill, self.slots, task, self.decoder.name))
            self._release()
        return self._done.popleft()

    def _release(self) -> None:
        """Drop decoded images whose augmentation has run (all of them on the CPU)."""
        while self._in_use and (self._in_use[0][0] is None or self._in_use[0][0].query()):
            self._in_use.popleft()

    def shutdown(self) -> None:
        self.reader.shutdown(wait=True, cancel_futures=True)
        for lane in self.lanes:
            lane.thread.shutdown(wait=True, cancel_futures=True)
        if self.streams.cuda:
            torch.cuda.synchronize(self.streams.device)
        self._pending.clear()
        self._in_use.clear()
        self.slots = []

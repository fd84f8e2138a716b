"""The GPU image pool in worker processes (``num_workers > 0``; the in-process pool has been
the default since session 28): each worker decodes its batches (nvJPEG's hardware decoder for
baseline JPEGs, nvImageCodec for the rest: ``_nvimgcodec.gpu_image_decoder``) and augments
them on the GPU itself, into staging slots it shares with the loader's process through CUDA
IPC.

Since session 28 the decode lets go of the GIL for a whole batch, and one process ran ahead
of two workers (the workers' CUDA contexts take turns on the GPU): on the H200 20,838 /
20,331 / 19,133 images/s against 23,243 / 23,452 / 22,546 (``session28-13``). The workers
stay ahead where the training process's own Python holds the GIL (17,524 against 12,937
beside a pure-Python loop, ``session28-9``). What follows is the history that made them the
default from session 18 to 27.

Why processes: inside one process nvImageCodec's decode takes the GIL about 3.4 times an image
(each file's ``CodeStream``, each image's Python object, ``torch.as_tensor``) and the batched
augmentation is ~400 launches a batch from Python; the two halve each other, which held the
in-process pool (:class:`~._image_decode.BatchDecodePool`) at 6-8k images/s however many
threads decoded (session 17, ``benchmarks/results/gpu/session17-8``). Processes have a GIL
each: on the H200, two whole loaders in two processes gave 12,879 images/s against 6,251 for
one, and the decode alone 8,268 / 17,004 / 23,634 in 1 / 2 / 4 processes
(``benchmarks/results/gpu/session18-1``). This pool with 2 workers: 10,369 against 8,058 for
the in-process pool in the same call; 3-8 workers no faster (``session18-5``).

The hand-over, per slot:

- the loader's process allocates the slots (already in the output's dtype and layout) and
  their fences (:class:`~._slot_fences.SlotFences`); both reach each worker once, at its
  start (torch's reductions send CUDA IPC handles);
- ``submit`` records the fences of the task's slots on the consumer's stream and sends the
  task; the worker's stream waits for them on the GPU before writing the slots;
- the worker decodes, augments into the slot, waits for its own stream, then replies: the
  slot is complete when the message arrives, so the loader's process reads it on any stream.

A worker holds the decoded images until its stream is done with them: their memory belongs to
nvImageCodec's allocator, which may reuse it as soon as they are dropped.

On the CPU (a stand-in decoder, in tests) the same workers write into shared-memory slots,
with no events.
"""

from __future__ import annotations

import dataclasses
import functools
import queue
import signal
import threading
import traceback

import torch

from ._image_decode import _Streams, allocate_final_slots, close_decoder, index_orientations
from ._image_fill import fill_from_images, fill_task_messages, read_file
from ._messages import STOP, Failure, FillTask, Ready
from ._slot_fences import FencedWorkerPool, SlotFences

#: ``images._nvimgcodec``'s module settings that a worker's decoder takes from the loader's
#: process (a worker's copy of the module may predate a change made there).
NVIMGCODEC_SETTINGS = ("DECODER_OPTIONS", "DEFAULT_HW_LOAD", "CPU_THREADS", "BACKENDS",
                       "PACKED_JPEG_ENGINE")


def nvimgcodec_decoder(device: torch.device, settings: dict | None = None,
                       cuda_resize: str | None = None):
    """The workers' default decoder on ``device`` (``_nvimgcodec.gpu_image_decoder``), with
    ``settings`` (values of :data:`NVIMGCODEC_SETTINGS` by name) applied to the worker's
    module first, and the augmentation's ``images._batched.CUDA_RESIZE`` (a module-level
    function, so it travels to the workers by name)."""
    from ..images import _batched, _nvimgcodec

    for name, value in (settings or {}).items():
        setattr(_nvimgcodec, name, value)
    if cuda_resize is not None:
        _batched.CUDA_RESIZE = cuda_resize
    return _nvimgcodec.gpu_image_decoder(device)


def loader_nvimgcodec_decoder():
    """:func:`nvimgcodec_decoder` with this process's nvImageCodec and resize settings, for
    the workers."""
    from ..images import _batched, _nvimgcodec

    return functools.partial(nvimgcodec_decoder,
                             settings={name: getattr(_nvimgcodec, name) for name in NVIMGCODEC_SETTINGS},
                             cuda_resize=_batched.CUDA_RESIZE)


@dataclasses.dataclass(frozen=True)
class GpuImageWorkerStart:
    """A GPU image worker's arguments: the loader's config, the shared slots, per slot the
    inter-process event the consumer records once the slot's last batch is copied out
    (``None`` on the CPU), and ``make_decoder(device)``, a picklable callable."""

    worker_id: int
    config: object  # ImageLoaderConfig
    device: torch.device  # with its index: the loader's process resolved "cuda" to its GPU
    slots: list
    copied_out: list
    make_decoder: object
    read_ahead: bool = False  # see WORKERS_READ_AHEAD


#: A worker reads its batch's files itself and gives the decoder their bytes (``decode``),
#: rather than the paths (``decode_files``, nvImageCodec opening each file): with 2 workers
#: (then the default), 12,667 against 10,778 / 11,392 images/s (H100, ``session20-1``) and 9,544
#: against 8,931 (H200, ``session19-2``; with 4 workers 9,948 against 10,177 there). In one
#: process the paths stay (:class:`~._image_decode.BatchDecodePool`): reading there holds the
#: GIL that the augmentation needs (bytes 5,003 against paths 8,700, ``session20-1``).
WORKERS_READ_BYTES = True


#: Workers decode each batch into one flat buffer where the decoder can (``decodes_packed``)
#: and the index has every image's size, as the in-process pool's lanes do
#: (``_image_decode.PACKED_DECODE``).
WORKERS_PACKED = True


#: A worker reads the files of its next task on a thread of its own while it decodes and
#: augments the current one (nvImageCodec's decode releases the GIL), where it reads bytes
#: (:data:`WORKERS_READ_BYTES`). With 2 workers (then the default) and prefetch 2, alternated:
#: 13,720 / 13,321 against 11,771 / 11,879 images/s (H200, ``session26-3``); at prefetch 4
#: it made no difference (12,970 / 13,074 against 12,775 / 13,092). Read by each pool when
#: it is made.
WORKERS_READ_AHEAD = True


def reads_bytes(decoder) -> bool:
    """Whether a worker gives ``decoder`` the files' bytes (:data:`WORKERS_READ_BYTES`)."""
    return WORKERS_READ_BYTES and callable(getattr(decoder, "decode", None))


def decode_plan_files(decoder, paths: list[str], sizes=None, blobs: list | None = None,
                      orientations=None):
    """A worker's decode of one plan's files: their bytes to ``decoder.decode`` where the
    decoder has one (:data:`WORKERS_READ_BYTES`), else the paths to ``decode_files``; into
    one buffer (``decode_packed``, given the index's ``sizes``, and its ``orientations`` where
    given) where :data:`WORKERS_PACKED` and the decoder can. ``blobs``: the files' bytes, read
    ahead (:func:`read_ahead`)."""
    packed = WORKERS_PACKED and sizes is not None and getattr(decoder, "decodes_packed", False)
    packing = {} if orientations is None else {"orientations": list(orientations)}
    if reads_bytes(decoder):
        blobs = [read_file(path) for path in paths] if blobs is None else blobs
        return decoder.decode_packed(blobs, sizes, **packing) if packed else decoder.decode(blobs)
    return decoder.decode_packed(paths, sizes, **packing) if packed else decoder.decode_files(paths)


def gpu_image_worker_main(start: GpuImageWorkerStart, task_q, result_q) -> None:
    """Takes :class:`FillTask` s; decodes each plan's files, augments them into the shared
    slots on its own stream, waits for that stream, replies one list of
    :class:`~._messages.RowsFilled` per task (or a :class:`Failure`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the loader's to handle
    torch.set_num_threads(1)
    config, device = start.config, start.device
    try:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        decoder = start.make_decoder(device)
        streams = _Streams(device)
    except BaseException as exc:  # e.g. nvImageCodec missing: the loader raises it
        result_q.put(Failure(-1, -1, f"a GPU image worker could not start its decoder: {exc!r}",
                             traceback.format_exc()))
        return
    result_q.put(Ready(start.worker_id))
    if start.read_ahead and reads_bytes(decoder):
        tasks = read_ahead(task_q, config.dataset)
    else:
        tasks = ((task, None) for task in iter(task_q.get, STOP))
    try:
        for task, blobs in tasks:
            result_q.put(_fill_task(start, config, decoder, streams, task, blobs))
    finally:
        close_decoder(decoder)


def read_ahead(task_q, dataset):
    """``(task, bytes of its plans' files)`` in the order the tasks come, each task's files
    read on a thread of its own (``vidloader-read-ahead``) while the worker fills the one
    before (:data:`WORKERS_READ_AHEAD`); it reads at most two tasks ahead. A failure to list
    a task's files comes as the exception in place of its bytes; ends at ``STOP``, or raises
    what stopped the thread (the worker then dies, and the loader reports it)."""
    ready: queue.Queue = queue.Queue(maxsize=1)

    def reader():
        end = None  # what the worker raises after the last task: the thread's own failure
        try:
            while (task := task_q.get()) is not STOP:
                try:
                    blobs = [[read_file(dataset.path(i)) for i in plan.video_indices.tolist()]
                             for plan in task.plans]
                except Exception as exc:  # noqa: BLE001 - replied as the task's Failure
                    blobs = exc
                ready.put((task, blobs))
        except BaseException as exc:  # e.g. the task queue broke: the worker must end, not wait
            end = exc
        finally:
            ready.put((STOP, end))

    threading.Thread(target=reader, name="vidloader-read-ahead", daemon=True).start()
    while (item := ready.get())[0] is not STOP:
        yield item
    if item[1] is not None:
        raise item[1]


def _fill_task(start: GpuImageWorkerStart, config, decoder, streams: _Streams,
               task: FillTask, blobs: list | Exception | None = None) -> list:
    held = []  # the decoded images, alive until the stream is past the kernels reading them
    dataset = config.dataset
    read = iter(blobs) if isinstance(blobs, list) else None  # per plan, in the task's order
    orientations = index_orientations(dataset, decoder)

    def fill(plan, staging):
        if isinstance(blobs, Exception):
            raise blobs
        paths = [dataset.path(i) for i in plan.video_indices.tolist()]
        sizes = getattr(dataset, "sizes", None)
        images = decode_plan_files(decoder, paths,
                                   None if sizes is None else sizes[plan.video_indices],
                                   None if read is None else next(read),
                                   None if orientations is None else orientations[plan.video_indices])
        held.append(images)
        return fill_from_images(config, decoder.name, images, plan, staging)

    with streams.current():
        for slot_id in task.slot_ids:
            streams.wait(start.copied_out[slot_id])
        messages = fill_task_messages(fill, start.slots, task, decoder.name)
        done = streams.record(streams.own)
    if done is not None:
        done.synchronize()
    held.clear()
    return messages


class GpuImageProcessPool(FencedWorkerPool):
    """nvImageCodec decoding and GPU augmentation in ``config.num_workers`` processes, each
    filling whole batches into slots shared with this process (module docstring).

    ``make_decoder(device)``: each worker's decoder (default nvImageCodec); a module-level
    callable, as it travels to the workers by name.
    """

    #: Slots hold the finished output (dtype, normalisation, layout): the collector skips
    #: ``finalize``.
    stages_final = True

    def __init__(self, config, num_slots: int, make_decoder=nvimgcodec_decoder) -> None:
        import torch.multiprocessing  # noqa: F401 - registers the CUDA IPC reductions

        device = config.device if config.device is not None else torch.device("cpu")
        if device.type == "cuda" and device.index is None:  # "cuda": this process's GPU
            device = torch.device("cuda", torch.cuda.current_device())
        self.slots = allocate_final_slots(config, num_slots, device)
        if device.type != "cuda":
            for slot in self.slots:
                slot["images"].share_memory_()
        self.fences = SlotFences(len(self.slots), device)
        if make_decoder is nvimgcodec_decoder:  # this process's settings, not the workers' copy
            make_decoder = loader_nvimgcodec_decoder()
        self.make_decoder = make_decoder
        self.read_ahead = WORKERS_READ_AHEAD
        args = [GpuImageWorkerStart(i, config, device, self.slots, self.fences.events, make_decoder,
                                    read_ahead=self.read_ahead)
                for i in range(config.num_workers)]
        super().__init__(gpu_image_worker_main, args, config.num_workers, server="torch")

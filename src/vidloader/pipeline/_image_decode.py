"""The GPU image pool in the training process (the default for ``decoder="nvimgcodec"``
since session 28): files decoded a batch at a time on a few *lanes* (each its own decoder
and CUDA stream: nvJPEG's hardware decoder for the baseline JPEGs, nvImageCodec for the
rest, ``_nvimgcodec.gpu_image_decoder``; the batches dealt to the lanes in turn, each lane
decoding on a thread of its own, or taken by the first lane free, :data:`LANES_TAKE_ANY`),
then augmented as one batch on an augmentation thread with a stream of its own.

A lane decodes a batch: gives nvImageCodec the plan's files as read into shared memory by
reader processes (:data:`READER_PROCESSES`, where the batch is decoded packed; page-locked
on a GPU, :data:`PIN_READ_SLABS`), or else has
it open them (a ``CodeStream`` from a path is read in C++, without the GIL; a batch-decoder
object given bytes gets them from reader threads instead), optionally decoding only each
row's crop window (:data:`ROI_DECODE`), and
records an event. A lane takes the GIL as few times as it can (:data:`PHASED_DECODE`): which
JPEGs are cut short comes from the dataset's index rather than from reading each file's ends,
and where the index has every image's size the batch is decoded straight into one flat buffer
(:data:`PACKED_DECODE`, :class:`~..images._packed.PackedImages`) that the augmentation reads
in place; otherwise the decoded images become tensors on the augmentation thread, which makes
its launches from Python anyway.
The augmentation thread takes the batches in order, makes its stream wait for the lane's
event (a GPU-side wait), runs the batched crop/resize/normalize
(:func:`~..images._batched.crop_resize_batch`) into the batch's slot and records an event;
``get`` makes the consumer's stream wait for that one and hands the slot out. So the
consumer's thread, the training loop's, does no image work, and while one batch is
augmented the next ones decode: nvImageCodec's parsing and Huffman work release the GIL; the
augmentation's kernel launches hold it, so one thread does them all.

Before writing a slot, the augmentation's stream waits for an event recorded on the
consumer's stream when the batch was submitted: the slot's previous batch has been copied
out by then (on the stream current when the loader is iterated: a loop that switches streams
between batches must synchronise them itself, as with any CUDA tensor handed across
streams). Decoded images are kept alive until an event recorded after their augmentation
has passed: their memory belongs to the decoder's allocator (packed: torch's, on the lane's
stream), which may reuse it as soon as they are dropped, while the kernels reading them may
still be queued.
"""

from __future__ import annotations

import collections
import multiprocessing
import queue
import warnings
from concurrent.futures import ThreadPoolExecutor

import torch

from ._contract import BatchPool
from ._image_fill import (
    decode_regions,
    fill_from_images,
    fill_task_messages,
    plan_windows,
    read_file,
)
from ._messages import FillTask
from ._page_lock import pin_host_memory

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
    """A thread's own CUDA stream and events on a GPU; no-ops on the CPU (a stand-in
    decoder). ``priority``: the stream's (CUDA's convention: lower is sooner; 0 is the
    default, -1 high on current GPUs)."""

    def __init__(self, device: torch.device, priority: int = 0) -> None:
        self.cuda = device.type == "cuda"
        self.device = device
        self.own = torch.cuda.Stream(device, priority=priority) if self.cuda else None

    def current(self):
        """Context in which the thread's work is ordered on its own stream."""
        import contextlib

        return torch.cuda.stream(self.own) if self.cuda else contextlib.nullcontext()

    def record(self, stream=None):
        """An event at the current point of ``stream`` (default: the current stream)."""
        if not self.cuda:
            return None
        event = torch.cuda.Event()
        event.record(stream if stream is not None else torch.cuda.current_stream(self.device))
        return event

    def wait(self, event) -> None:
        """The current stream (the consumer's, or the augmentation thread's inside
        :meth:`current`) waits, on the GPU, for ``event``."""
        if event is not None:
            torch.cuda.current_stream(self.device).wait_event(event)


#: Decode lanes for nvImageCodec, each a thread with its own decoder and CUDA stream, batches
#: dealt to them in turn. With the augmentation on its own thread, four calls on the H200
#: (session13-4..6, whole images) gave one lane 7,463 / 7,266 / 7,849 / 7,243 images/s and
#: two 7,408 / 8,279 / 7,857 / 7,420: two by a small margin; three and four were slower.
#: With nvJPEG's hardware decoder called directly (``images/_nvjpeg.py``, which lets go of the
#: GIL for the whole decode), three lanes: 22,211 / 21,878 against two 20,712 / 19,988,
#: alternated (H200, ``benchmarks/results/gpu/session28-9``). Since the slabs are page-locked
#: and the reads shared out (session 30), two again: nvJPEG's call is host work that three
#: threads slow each other in (with three, one lane's 256 images took 22.5 ms of its call,
#: 20.9 ms of them CPU: ``session31-1``'s timeline; one thread alone spent 8.2-8.8 ms in
#: ``session30-9``). Alternated in one process (H200, any free lane taking the next batch,
#: ``session31-1``, four rounds): two lanes 25,074 / 26,055 / 24,945 / 23,286 images/s
#: against three 23,779 / 23,340 / 23,364 / 23,407. Two lanes dealt in turn 25,165 / 24,907 /
#: 26,001 / 22,953 and 26,008 / 25,711 / 23,718 against three lanes taking any free lane
#: 23,552 / 23,758 / 23,676 / 23,588 and 23,183 / 21,255 / 21,165 (``session31-7``, ``-11``).
NVIMGCODEC_LANES = 2

#: CUDA stream priority of the decode lanes (0: the default; -1: ahead of the augmentation's
#: kernels, which the GPU then runs between the decoder's). Session 17 found nvImageCodec's
#: decode 8× slower beside matrix products on another stream of the same GPU
#: (``session17-8``), but -1 did not help the loader: 5,867 / 6,637 images/s against 5,928 /
#: 6,407 at 0, alternated (H100, ``session24-4``; nvImageCodec may run its kernels on
#: internal streams of its own, ordered with the one it is given by events).
DECODE_STREAM_PRIORITY = 0

#: Decode only each row's crop window where the decoder can (``decode_files(..., regions=)``).
#: Off: in the same four calls it was slower in seven of eight pairs (e.g. two lanes 7,315 /
#: 6,248 / 7,051 / 6,453 against whole images 7,408 / 8,279 / 7,857 / 7,420): the hardware
#: decoder's time does not follow the pixels kept.
ROI_DECODE = False


#: Lanes take the GIL fewer times a file (module docstring): nvImageCodec decoders
#: (``decodes_in_phases``) are given the index's ``cut_short`` flags where the dataset has
#: them, and return their images for the augmentation thread to wrap as tensors. Session 17
#: found each GIL retake in a lane waits on the augmentation's launches (the decode at 0.6 of
#: its pace beside them); the lanes retook it about 7 times a file (the end-of-image check's
#: ``open``, ``fstat``, two ``pread`` and ``close``, the ``CodeStream``, the tensor), now once.
#: In one process: 7,594 / 8,504 / 8,709 images/s against 6,502 / 6,843 / 7,279 before,
#: alternated (H100, ``session24-5``).
PHASED_DECODE = True


#: Lanes decode each batch straight into one flat buffer where the decoder can
#: (``decodes_packed``: nvImageCodec 0.9) and the index has every image's size
#: (:class:`~..images._packed.PackedImages`): no tensor per image on the augmentation thread
#: and no ``torch.cat`` to pack them. Session 25's profile of this pool (H100, ``session25-1``):
#: the augmentation thread spent 24% of its time making those tensors. Not with
#: :data:`ROI_DECODE` (a region's size is not the index's).
PACKED_DECODE = True


#: Reader processes that read each batch's files into shared memory for the lanes
#: (:mod:`._image_readers`), where the lanes decode packed. Decoding bytes already read is
#: 1.5-2.1× decoding paths on one thread (H100, ``session25-4``), but reading them in this
#: process's threads takes the GIL the augmentation needs and was slower; processes do not.
#: Two readers against the lanes given paths, alternated: 13,602 / 15,814 against 10,156 /
#: 9,684 images/s (H200, ``session26-2``), at or above the lanes given every file's bytes from
#: memory (12,954 / 12,785, ``session26-1``); four readers 14,430 / 11,189. 0 turns them off.
READER_PROCESSES = 2

#: The reader processes also walk each file's JPEG header (``_jpeg_header.header_facts``)
#: for a decoder that takes the facts (nvJPEG's: ``takes_header_facts``), so the decode
#: lanes only compare them with the index. In session 29's timeline (H200, 3 lanes) a lane
#: spent ~6.6 ms a batch of 256 around nvJPEG's call, mostly that walk (5-9 µs a file on
#: the CPU machine, more under the GIL the lanes, the augmentation and the training loop
#: share); the readers have GILs of their own. Against the lanes walking them, alternated,
#: 3 lanes, 300 batches: 23,578 / 23,248 / 23,336 images/s against 22,903 / 19,995 / 23,024
#: (H200, ``session30-4``).
READERS_WALK_HEADERS = True


#: The reader processes' slabs are page-locked for CUDA (``cudaHostRegister``) where the pool
#: decodes on a GPU, as DALI hands its hardware decoder bitstreams in pinned memory (copied to
#: a pinned staging buffer where its input is not). A slab is then read into again only once
#: the decode's GPU work has passed (:meth:`~._image_readers.FileReaders.release`'s fence):
#: the copy from pinned memory may still be under way when nvJPEG returns. nvJPEG's decode
#: alone on one thread, bytes read beforehand (H200, ``session30-9``, two rounds): pinned
#: 31,035 / 29,088 / 30,370 / 30,244 images/s against pageable 21,084 / 24,959 / 25,930 /
#: 27,608 (its call 8.2-8.8 ms of host CPU a batch of 256 against 9.3-12.1); on three threads
#: ~29,000 either way, nvJPEG's limit on this GPU. In the loader, on a noisy machine, 21,131 /
#: 23,075 against 17,785 / 22,919 unpinned (one of two rounds apart).
PIN_READ_SLABS = True


#: Any free lane takes the next batch (a pool of lane threads, the lanes handed out as they
#: come free), instead of the batches dealt to the lanes in turn, where a batch can wait
#: behind a busy lane while another lane is idle. On with three lanes in session 30 on one
#: round (H200, ``session30-11``: 23,930 images/s against 23,399 dealt in turn). Off since
#: session 31: with two lanes, dealt in turn was ahead in both calls that alternated them in
#: one process (H200, medians of four and three rounds: 25,036 against 22,417 in
#: ``session31-7``, 25,711 against 22,705 in ``session31-11``), and in the bench against DALI
#: it ran 26,000-26,718 in all eight rounds (``session31-12``) where taking any free lane had
#: swung between 22,171 and 28,028 (``session31-11``). Why the free lane loses is not known;
#: the switch stays, tested both ways.
LANES_TAKE_ANY = False


def _in_daemonic_process() -> bool:
    """Whether this process is daemonic (a DataLoader's or a ``multiprocessing.Pool``'s
    worker), which may not have children."""
    return multiprocessing.current_process().daemon


def packs_batches(decodes_packed: bool) -> bool:
    """Whether the in-process GPU pool decodes each batch into one buffer: its decoder
    ``decodes_packed`` and :data:`PACKED_DECODE` is on, :data:`ROI_DECODE` off."""
    return PACKED_DECODE and not ROI_DECODE and decodes_packed


def starts_reader_processes(decodes_packed: bool, opens_files: bool) -> bool:
    """Whether the in-process GPU pool starts :data:`READER_PROCESSES` file readers: where its
    lanes decode packed (:func:`packs_batches`) from files (a decoder with ``decode_files``),
    outside a daemonic process (a DataLoader's or a ``multiprocessing.Pool``'s worker may not
    have children)."""
    return (READER_PROCESSES > 0 and packs_batches(decodes_packed) and opens_files
            and not _in_daemonic_process())


def reader_slabs(dataset, batch_size: int, num_slots: int, lanes: int) -> tuple[int, int]:
    """(count, bytes each) of the reader processes' slabs: one per batch in flight, and one
    more (the pool would wait for one otherwise), of :func:`._image_readers.slab_bytes`."""
    from . import _image_readers

    return num_slots + lanes + 1, _image_readers.slab_bytes(dataset, batch_size)


def close_decoder(decoder) -> None:
    """``decoder.close()`` where it has one (:class:`~..images._nvjpeg.NvJpegDecoder`)."""
    close = getattr(decoder, "close", None)
    if callable(close):
        close()


def _per_image(dataset, name: str):
    """The dataset's index array ``name`` (``ImageFolder``'s, one entry per image), or ``None``
    where it has none or not one per image (a subclass that filtered its files, say)."""
    found = getattr(dataset, name, None)
    if found is None or len(found) != len(dataset):
        return None
    return found


def index_orientations(dataset, decoder):
    """The dataset's EXIF orientations (``ImageFolder``'s, one per image) for a decoder whose
    packed decode takes them (``takes_orientations``), or ``None``."""
    return _per_image(dataset, "orientations") if getattr(decoder, "takes_orientations", False) else None


def _index_flags(dataset):
    """The dataset's ``cut_short`` flags (``ImageFolder``'s, one per image), or ``None`` where
    it has none or not one per image: the decoder then reads each file's ends itself."""
    return _per_image(dataset, "cut_short")


class _Lane:
    """A decoder with its CUDA stream, and the thread it decodes on where batches are dealt
    to the lanes in turn (:data:`LANES_TAKE_ANY` off: a pool's threads take the lanes
    otherwise; an unused executor starts no thread)."""

    def __init__(self, decoder, device: torch.device, number: int) -> None:
        self.decoder = decoder
        self.streams = _Streams(device, priority=DECODE_STREAM_PRIORITY)
        self.thread = ThreadPoolExecutor(1, thread_name_prefix=f"vidloader-decode-{number}")


class _Augmenter:
    """The augmentation thread with its CUDA stream, and the decoded images its queued kernels
    may still read."""

    def __init__(self, device: torch.device) -> None:
        self.streams = _Streams(device)
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="vidloader-augment")
        self.in_use: collections.deque = collections.deque()  # (event, decoded images)

    def keep(self, event, images) -> None:
        """Hold ``images`` until ``event`` has passed; let go of those already past."""
        while self.in_use and self.in_use[0][0].query():
            self.in_use.popleft()
        if event is not None:
            self.in_use.append((event, images))


class BatchDecodePool(BatchPool):
    """Batches decoded on the GPU in this process on :data:`NVIMGCODEC_LANES` lanes (each
    with a decoder from ``_nvimgcodec.gpu_image_decoder``), augmented on a thread of their
    own (module docstring).

    ``decoder`` stands in for nvImageCodec (anything with ``name`` and
    ``decode(list[bytes | None]) -> list[Tensor | None]``, or ``decode_files(paths)``, which
    is also given ``regions=`` where the decoder's ``decodes_regions`` is true); on CPU
    tensors the same stages run on the same threads without streams. A decoder whose
    ``decodes_in_phases`` is true (nvImageCodec's) is given ``tensors=False`` and, where the
    dataset has them, the index's ``cut_short=`` flags, and must have ``to_tensors(images)``
    (:data:`PHASED_DECODE`).
    """

    #: Slots hold the finished output (dtype, normalisation, layout): the collector skips
    #: ``finalize``.
    stages_final = True

    def __init__(self, config, num_slots: int, decoder=None) -> None:
        from ..images._nvimgcodec import gpu_image_decoder

        device = config.device if config.device is not None else torch.device("cpu")
        self.config = config
        # A decoder object given by the user may not be thread-safe: one lane for it.
        decoders = ([decoder] if decoder is not None else
                    [gpu_image_decoder(device) for _ in range(NVIMGCODEC_LANES)])
        self.lanes = [_Lane(d, device, k) for k, d in enumerate(decoders)]
        self.decoder = decoders[0]
        self._owns_decoders = decoder is None  # a user's decoder object is the user's to close
        # Read once: a loader's lanes and augmentation thread must agree for its whole life.
        self._phased = (PHASED_DECODE and self._opens_files
                        and getattr(self.decoder, "decodes_in_phases", False))
        self._packed = packs_batches(getattr(self.decoder, "decodes_packed", False))
        self._cut_short = _index_flags(config.dataset)
        self._orientations = index_orientations(config.dataset, self.decoder)
        # The readers walk each file's header where every lane's decoder takes the facts
        self._header_facts = READERS_WALK_HEADERS and all(
            getattr(lane.decoder, "takes_header_facts", False) for lane in self.lanes)
        self._next_lane = 0
        self._any_lane = None  # LANES_TAKE_ANY: (the lanes' thread pool, the free lanes)
        if LANES_TAKE_ANY and len(self.lanes) > 1:
            free = queue.SimpleQueue()
            for lane in self.lanes:
                free.put(lane)
            self._any_lane = (ThreadPoolExecutor(len(self.lanes), thread_name_prefix="vidloader-decode"),
                              free)
        self.augmenter = _Augmenter(device)
        self.reader = ThreadPoolExecutor(config.reader_threads, thread_name_prefix="vidloader-read")
        self.streams = _Streams(device)  # the consumer's side: records and waits
        self.slots = allocate_final_slots(config, num_slots, device)
        self.file_readers = self._start_readers(num_slots)
        self._unpin = (pin_host_memory(self.file_readers.slabs.buffer, self.streams.device,
                                       what="the file readers'",
                                       off="vidloader.pipeline._image_decode.PIN_READ_SLABS = False")
                       if PIN_READ_SLABS and self.file_readers is not None and self.streams.cuda
                       else None)
        self._pending: collections.deque = collections.deque()  # (task, per-plan futures)
        self._done: collections.deque = collections.deque()

    def _start_readers(self, num_slots: int):
        """:data:`READER_PROCESSES` file readers where the lanes decode packed from paths, or
        ``None``: none asked for, or in a daemonic process (a DataLoader's or a
        ``multiprocessing.Pool``'s worker may not have children), or they could not start
        (a warning says why; the lanes then open the files themselves)."""
        if not starts_reader_processes(getattr(self.decoder, "decodes_packed", False),
                                       self._opens_files):
            return None
        from . import _image_readers

        try:
            count, each = reader_slabs(self.config.dataset, self.config.batch_size, num_slots,
                                       len(self.lanes))
            return _image_readers.FileReaders(READER_PROCESSES, count, each)
        except Exception as exc:  # noqa: BLE001 - any start failure: the paths still work
            warnings.warn(f"vidloader: the GPU image pool could not start its {READER_PROCESSES} "
                          f"file reader processes ({exc!r}); nvImageCodec opens the files "
                          "itself instead (slower in one process: 9,700-10,200 against "
                          "13,600-15,800 images/s on an H200, session 26). Set "
                          "vidloader.pipeline._image_decode.READER_PROCESSES = 0 to skip them.",
                          RuntimeWarning, stacklevel=2)
            return None

    @property
    def ways(self) -> int:
        return 1

    def submit(self, worker: int, task: FillTask) -> None:
        dataset = self.config.dataset
        copied_out = self.streams.record()  # the slots' last batches, on the consumer's stream
        fills = []
        for slot_id, plan, start in zip(task.slot_ids, task.plans, task.row_starts):
            paths = [dataset.path(i) for i in plan.video_indices.tolist()]
            if self.file_readers is not None:
                source = (paths, self.file_readers.read(paths, headers=self._header_facts))
            elif self._opens_files:
                source = paths
            else:
                source = [self.reader.submit(read_file, path) for path in paths]
            if self._any_lane is not None:
                decoded = self._any_lane[0].submit(self._decode_on_free_lane, plan, source)
            else:
                lane = self.lanes[self._next_lane]
                self._next_lane = (self._next_lane + 1) % len(self.lanes)
                decoded = lane.thread.submit(self._decode, lane, plan, source)
            staging = self.slots[slot_id]["images"][start:start + plan.batch_size]
            fills.append(self.augmenter.thread.submit(self._augment, decoded, plan,
                                                      staging, copied_out))
        self._pending.append((task, fills))

    @property
    def slabs_page_locked(self) -> bool:
        """Whether the reader processes' slabs are page-locked for CUDA now
        (:data:`PIN_READ_SLABS`; until :meth:`shutdown` unlocks them)."""
        return self._unpin is not None

    @property
    def _opens_files(self) -> bool:
        return callable(getattr(self.decoder, "decode_files", None))

    def _decode_on_free_lane(self, plan, source):
        """:meth:`_decode` on the first lane free (:data:`LANES_TAKE_ANY`)."""
        free = self._any_lane[1]
        lane = free.get()
        try:
            return self._decode(lane, plan, source)
        finally:
            free.put(lane)

    def _decode(self, lane: _Lane, plan, source: list):
        """On a lane's thread: the plan's images (files opened by the decoder, or bytes from
        the reader threads), decoded on the lane's stream; with the windows, the regions
        decoded alone, an event marking the decode's end, and the lane. Phased
        (:data:`PHASED_DECODE`): nvImageCodec's images, for :meth:`_augment` to wrap; packed
        (:data:`PACKED_DECODE`): the batch in one buffer."""
        config = self.config
        windows = plan_windows(config, plan)
        regions = None
        sizes = config.dataset.sizes[plan.video_indices] if self._packed else None
        flags = (self._cut_short[plan.video_indices].tolist()
                 if self._phased and self._cut_short is not None else None)
        packing = {} if self._orientations is None else {
            "orientations": self._orientations[plan.video_indices].tolist()}
        with lane.streams.current():
            if self.file_readers is not None:
                images = self._decode_read(lane, sizes, flags, *source, **packing)
            elif self._opens_files:
                if ROI_DECODE and getattr(lane.decoder, "decodes_regions", False):
                    regions = decode_regions(config, plan, windows)
                options = {"regions": regions} if regions else {}
                if flags is not None:
                    options["cut_short"] = flags
                if self._packed:
                    images = lane.decoder.decode_packed(source, sizes, **options, **packing)
                else:
                    if self._phased:
                        options["tensors"] = False
                    images = lane.decoder.decode_files(source, **options)
            elif self._packed:
                images = lane.decoder.decode_packed([f.result() for f in source], sizes, **packing)
            else:
                images = lane.decoder.decode([f.result() for f in source])
            return images, windows, regions, lane.streams.record(lane.streams.own), lane

    def _decode_read(self, lane: _Lane, sizes, flags, paths: list[str], read, **packing):
        """A plan's files as the reader processes read them (``read``: a future), decoded
        packed (``packing``: the index's orientations, where given; the readers' header
        facts, where they walked the headers); the slab is given back once the decode has
        returned."""
        files = read.result()  # re-raises a reader's death (its slab is free again then)
        if files.facts is not None:
            packing["header_facts"] = files.facts
        try:
            return lane.decoder.decode_packed(self.file_readers.files(files, paths), sizes,
                                              cut_short=flags, **packing)
        finally:  # page-locked: free once the GPU is done with it (PIN_READ_SLABS)
            fence = lane.streams.record(lane.streams.own) if self.slabs_page_locked else None
            self.file_readers.release(files.slab, after=fence)

    def _augment(self, decoded, plan, staging: torch.Tensor, copied_out):
        """On the augmentation thread, in submission order: the decoded plan augmented into
        ``staging`` on this thread's stream; ``(valid, errors, done event)``."""
        images, windows, regions, ready, lane = decoded.result()  # re-raises the decoder's error
        stage = self.augmenter
        with stage.streams.current():
            stage.streams.wait(copied_out)
            stage.streams.wait(ready)
            try:
                if self._phased:  # after the waits: on this stream
                    images = lane.decoder.to_tensors(images)
                valid, errors = fill_from_images(self.config, self.decoder.name, images, plan,
                                                 staging, windows, regions)
            finally:  # kernels may be queued even when it raised: the images outlive them
                done = stage.streams.record(stage.streams.own)
                stage.keep(done, images)
        return valid, errors, done

    def get(self):
        while not self._done:
            task, fills = self._pending.popleft()
            fills = iter(fills)

            def fill(plan, staging, fills=fills):  # the rows are in the slot already
                valid, errors, done = next(fills).result()  # re-raises a stage's error
                self.streams.wait(done)
                return valid, errors
            self._done.extend(fill_task_messages(fill, self.slots, task, self.decoder.name))
        return self._done.popleft()

    def shutdown(self) -> None:
        # Cancel every stage's queued work first, so no thread goes on while another is
        # joined; then join them; then wait for the GPU before dropping any decoded image
        # (augmentation kernels may still be queued that read them).
        executors = [self.reader, *(lane.thread for lane in self.lanes), self.augmenter.thread,
                     *([self._any_lane[0]] if self._any_lane is not None else [])]
        for executor in executors:
            executor.shutdown(wait=False, cancel_futures=True)
        for executor in executors:
            executor.shutdown(wait=True)
        try:
            if self.streams.cuda:
                torch.cuda.synchronize(self.streams.device)
        finally:  # even after a CUDA error: the readers and the lock on their memory go
            try:
                if self.slabs_page_locked:  # after the GPU's last copy from the slabs
                    unpin, self._unpin = self._unpin, None
                    unpin()
            finally:
                if self.file_readers is not None:  # after the lanes: none waits on a read now
                    self.file_readers.close()
            if self._owns_decoders:  # nvJPEG's handles and buffers, freed now, not at exit
                for lane in self.lanes:
                    close_decoder(lane.decoder)
            self.augmenter.in_use.clear()
            self._pending.clear()
            self.slots = []

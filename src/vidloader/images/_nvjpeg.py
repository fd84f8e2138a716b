"""Batched JPEG decoding on nvJPEG's hardware decoder, called directly (``ctypes``), for the
packed batches of the GPU image pools.

Why not only nvImageCodec: its decode retakes the GIL about 2.6 times an image (a
``CodeStream`` per file, an ``Image`` per place, each constructor letting go of the GIL) and
spent 3.2-4.4 ms a batch of 256 around the decode itself on the H200
(``benchmarks/results/gpu/session27-1``); torchvision's ``decode_jpeg(device="cuda")``, which
calls nvJPEG's batched hardware decode as this module does, decoded 20,424 images/s against
nvImageCodec's 16,263 in the same call (``session26-9``). Here a batch is one
``nvjpegDecodeBatched`` call (``ctypes`` lets go of the GIL for it) writing every image
straight into its place in the batch's :class:`~._packed.PackedImages`; the per-image work
is a header walk in Python (:func:`~._jpeg_header.jpeg_header`).

What the hardware decoder is not given goes to nvImageCodec (:class:`NvJpegDecoder` is an
:class:`~._nvimgcodec.NvImageCodecDecoder`, which also does everything but the packed
decode): JPEGs other than interleaved 8-bit baseline YCbCr of 4:4:4, 4:2:2, 4:2:0 or 4:4:0
(progressive, gray, CMYK, RGB-coded, ...; :func:`~._jpeg_header.hardware_decodes`), files
that may need turning upright (the index's orientation, or without it an EXIF or XMP
segment), files cut short, files whose stored size is not their place's (the index is out of
date), and anything that is not a JPEG. nvImageCodec's ``DEFAULT_HW_LOAD`` and ``BACKENDS``
apply to those only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
import warnings

import numpy as np
import torch

from .._utils._files import read_file
from ..errors import BackendUnavailableError
from . import _nvimgcodec
from ._jpeg_header import FACT_FORMAT, UNKNOWN_FACTS, hardware_rows
from ._jpeg_header import header_facts as header_facts_of
from ._nvimgcodec import NvImageCodecDecoder, _cut_short, _placed
from ._packed import PackedImages

#: nvJPEG states a decoder uses in turn: a batch may be handed to nvJPEG while the one before
#: is still decoding on the GPU, and a state is reused only once its last batch is done.
STATES = 2

#: Images a batch that each nvJPEG state's hardware decoder is set up for when the decoder is
#: made (``nvjpegDecodeBatchedPreAllocate``, with 1×1 images as the size hint, as DALI does:
#: its comment reports the call puts the hardware decoder on a memory pool, ">20% for 8GPU
#: training"); 0 skips it. Larger batches and images still work: nvJPEG grows its buffers.
#: On the H200 it made no difference that two rounds could see (``session30-9``: decode
#: alone, pinned, one thread 31,035 / 30,244 images/s with it, 30,370 / 29,088 without; the
#: loader 21,131 / 23,075 with, 23,315 / 22,493 without); kept, as DALI does it.
PREALLOCATE_IMAGES = 256
_CSS_444 = 0

_STATUS = {0: "SUCCESS", 1: "NOT_INITIALIZED", 2: "INVALID_PARAMETER", 3: "BAD_JPEG",
           4: "JPEG_NOT_SUPPORTED", 5: "ALLOCATOR_FAILURE", 6: "EXECUTION_FAILED",
           7: "ARCH_MISMATCH", 8: "INTERNAL_ERROR", 9: "IMPLEMENTATION_NOT_SUPPORTED",
           10: "INCOMPLETE_BITSTREAM"}
_BACKEND_HARDWARE = 3
_OUTPUT_RGBI = 5
_FLAG_UPSAMPLING_WITH_INTERPOLATION = 32
_IMAGE_WORDS = 8  # nvjpegImage_t: unsigned char *channel[4]; size_t pitch[4]

_library = None
_library_lock = threading.Lock()


class NvJpegError(RuntimeError):
    """An nvJPEG call returned an error status."""


class NvJpegUnavailable(BackendUnavailableError):
    """nvJPEG's hardware decoder cannot be set up (libnvjpeg missing, a GPU without a hardware
    JPEG decoder, any failing set-up call): nvImageCodec's decoder serves instead
    (``_nvimgcodec.gpu_image_decoder``)."""


def _library_candidates() -> list[str]:
    """libnvjpeg's paths in the NVIDIA wheels (``nvidia-nvjpeg``: ``nvidia/cu13/lib`` for CUDA
    13, ``nvidia/nvjpeg/lib`` for 12), then the sonames for the system's search."""
    paths = []
    try:
        import nvidia

        for base in nvidia.__path__:
            paths += [os.path.join(base, "cu13", "lib", "libnvjpeg.so.13"),
                      os.path.join(base, "nvjpeg", "lib", "libnvjpeg.so.12")]
    except ImportError:
        pass
    return [p for p in paths if os.path.exists(p)] + ["libnvjpeg.so.13", "libnvjpeg.so.12"]


def load_library():
    """libnvjpeg as a ``ctypes`` library (once per process), its functions typed.

    Raises:
        NvJpegUnavailable: no libnvjpeg is found (``pip install 'vidloader[images-gpu]'``
            brings it with nvImageCodec).
    """
    global _library
    with _library_lock:
        if _library is None:
            _library = _typed(_open_library())
        return _library


def _open_library():
    tried = []
    for candidate in _library_candidates():
        try:
            return ctypes.CDLL(candidate)
        except OSError as exc:
            tried.append(f"{candidate}: {exc}")
    raise NvJpegUnavailable(
        "nvJPEG (libnvjpeg.so.13 or .12) was not found; it comes with nvImageCodec: pip install "
        "'vidloader[images-gpu]'. Tried: " + "; ".join(tried))


def _typed(lib):
    p, i, u = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
    signatures = {
        "nvjpegCreateEx": [i, p, p, u, p],
        "nvjpegDestroy": [p],
        "nvjpegJpegStateCreate": [p, p],
        "nvjpegJpegStateDestroy": [p],
        "nvjpegDecodeBatchedInitialize": [p, p, i, i, i],
        "nvjpegDecodeBatched": [p, p, p, p, p, p],
        "nvjpegGetProperty": [i, p],
    }
    optional = {  # libnvjpeg 11.5.1 and later
        "nvjpegDecodeBatchedPreAllocate": [p, p, i, i, i, i, i],
    }
    for name, args in signatures.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = args, ctypes.c_int
    for name, args in optional.items():
        function = getattr(lib, name, None)
        if function is not None:
            function.argtypes, function.restype = args, ctypes.c_int
    return lib


def preallocate(lib, handle, state, images: int) -> bool:
    """Set ``state``'s hardware decoder up for batches of ``images`` (see
    :data:`PREALLOCATE_IMAGES`); whether it was: not where ``images`` is 0, the library has
    no ``nvjpegDecodeBatchedPreAllocate`` or the call failed (nvJPEG then allocates as it
    decodes, as before)."""
    call = getattr(lib, "nvjpegDecodeBatchedPreAllocate", None)
    if images <= 0 or call is None:
        return False
    return call(handle, state, int(images), 1, 1, _CSS_444, _OUTPUT_RGBI) == 0


def _status_name(status: int) -> str:
    return f"NVJPEG_STATUS_{_STATUS.get(status, status)}"


def _check(status: int, call: str) -> None:
    if status != 0:
        raise NvJpegError(f"{call} failed: {_status_name(status)}")


def library_version() -> tuple[int, int, int]:
    """libnvjpeg's (major, minor, patch)."""
    lib = load_library()
    values = []
    for prop in range(3):
        value = ctypes.c_int()
        _check(lib.nvjpegGetProperty(prop, ctypes.byref(value)), "nvjpegGetProperty")
        values.append(value.value)
    return tuple(values)


class NvJpegDecoder(NvImageCodecDecoder):
    """:class:`~._nvimgcodec.NvImageCodecDecoder` whose packed decode gives the baseline
    JPEGs to nvJPEG's hardware decoder in one batched call (module docstring); everything
    else, and every other method, is nvImageCodec's.

    Args:
        device (torch.device): the GPU.
        fancy_upsampling (bool | None): interpolate chroma (``NVJPEG_FLAGS_UPSAMPLING_WITH_
            INTERPOLATION``, as libjpeg, Pillow and nvImageCodec do); default: as the
            nvImageCodec options say (``:fancy_upsampling=0`` repeats chroma samples, as DALI).
        **nvimgcodec: :class:`~._nvimgcodec.NvImageCodecDecoder`'s options, for the rest.

    Raises:
        BackendUnavailableError: nvImageCodec is not installed.
        NvJpegUnavailable: libnvjpeg is not installed, this GPU has no hardware JPEG decoder
            (nvJPEG's ``ARCH_MISMATCH``), or another set-up call failed.
    """

    name = "nvjpeg"
    #: Its packed decode takes ``header_facts``, made where the files were read.
    takes_header_facts = True

    def __init__(self, device: torch.device, *, fancy_upsampling: bool | None = None,
                 **nvimgcodec) -> None:
        if torch.device(device).type != "cuda":
            raise ValueError(f"NvJpegDecoder decodes on a CUDA device, not {device!r}")
        super().__init__(device, **nvimgcodec)
        self.decodes_packed = True  # its own packed decode, whatever nvImageCodec's version
        self._lib = load_library()
        if fancy_upsampling is None:  # as nvImageCodec's decoder does for the other files
            options = nvimgcodec.get("options")
            fancy = fancy_upsampling_in(_nvimgcodec.DECODER_OPTIONS if options is None else options)
        else:
            fancy = fancy_upsampling
        self._handle = ctypes.c_void_p()
        self._states: list = []  # [state, event of its last batch or None], used in turn
        with self._on_device():
            status = self._lib.nvjpegCreateEx(
                _BACKEND_HARDWARE, None, None,
                _FLAG_UPSAMPLING_WITH_INTERPOLATION if fancy else 0, ctypes.byref(self._handle))
            if status == 7:
                raise NvJpegUnavailable(
                    f"{torch.cuda.get_device_name(self.device)} has no hardware JPEG decoder "
                    "(nvJPEG: ARCH_MISMATCH); nvImageCodec's decoder serves instead "
                    "(vidloader.images._nvimgcodec.PACKED_JPEG_ENGINE = 'nvimgcodec')")
            _unavailable_unless(status, "nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE)")
            for _ in range(STATES):
                state = ctypes.c_void_p()
                _unavailable_unless(self._lib.nvjpegJpegStateCreate(self._handle, ctypes.byref(state)),
                                    "nvjpegJpegStateCreate")
                self._states.append([state, None])
            #: Whether every state's hardware decoder was set up ahead (:data:`PREALLOCATE_IMAGES`).
            self.preallocated = all([preallocate(self._lib, self._handle, state, PREALLOCATE_IMAGES)
                                     for state, _ in self._states])
        self._turn = 0
        #: Images of packed batches decoded by the hardware decoder here, and by nvImageCodec
        #: (or Pillow) because the hardware decoder does not take them or refused their batch.
        self.hardware_decoded = 0
        self.handed_on = 0
        #: Batches nvJPEG refused (decoded by nvImageCodec instead; a warning the first time).
        self.hardware_refused = 0

    def _on_device(self):
        """nvJPEG works on the calling thread's current CUDA device: :attr:`device` made it."""
        return torch.cuda.device(self.device) if self.device.type == "cuda" else contextlib.nullcontext()

    def close(self) -> None:
        """Wait for this decoder's batches, then free nvJPEG's states and handle; the decoder
        takes no packed batch after it. The GPU pools call it at shutdown; otherwise it runs
        when the decoder is collected, but not at interpreter exit (CUDA may be gone by
        then: the process's end frees them)."""
        lib, states, handle = getattr(self, "_lib", None), getattr(self, "_states", []), \
            getattr(self, "_handle", None)
        if lib is None or handle is None:
            return
        self._handle, self._states = None, []
        with self._on_device():
            for state, event in states:
                if event is not None:
                    event.synchronize()
                if state.value:
                    lib.nvjpegJpegStateDestroy(state)
            if handle.value:
                lib.nvjpegDestroy(handle)

    def __del__(self) -> None:
        if sys.is_finalizing():  # CUDA may be torn down already: leave it to the process's end
            return
        with contextlib.suppress(Exception):
            self.close()

    def decode_packed(self, sources: list, sizes: np.ndarray, *,
                      cut_short: list[bool] | None = None,
                      orientations: list[int] | None = None,
                      header_facts: np.ndarray | None = None) -> PackedImages | list:
        """As :meth:`NvImageCodecDecoder.decode_packed`: the batch in one buffer on torch's
        current stream, the files the hardware decoder takes (:func:`hardware_decodes`) by it
        in one call, the rest by nvImageCodec (then Pillow) and copied into their places; a
        list of tensors where some image does not fit its place.

        ``orientations``: per source the index's EXIF orientation (``ImageFolder.orientations``,
        Pillow's reading of EXIF and XMP); given, a file goes to the hardware decoder only
        where it is 1 (or 0, a tag with no orientation number, kept as stored). Without them
        a file with an APP1 segment (EXIF or XMP) goes to nvImageCodec, which applies an EXIF
        orientation (not an XMP one).

        ``header_facts``: int ``[B, 4]``, each source's
        :func:`~._jpeg_header.header_facts` where the files were read (the reader processes),
        ``UNKNOWN_FACTS`` rows where not; the header of those rows alone is walked here."""
        blobs = [_as_bytes(source) for source in sources]
        if cut_short is None:
            cut_short = [blob is None or _cut_short(blob) for blob in blobs]
        packed = PackedImages.allocate(sizes, self.device)
        ok = self._hardware_rows(packed, blobs, cut_short, orientations, header_facts)
        hardware, rest = np.flatnonzero(ok).tolist(), np.flatnonzero(~ok).tolist()
        if hardware and not self._decode_hardware(packed, blobs, hardware):
            rest = sorted(rest + hardware)  # refused (a corrupt file, say): nvImageCodec's
            hardware = []
        self.hardware_decoded += len(hardware)
        self.handed_on += len(rest)
        return self._hand_on(packed, blobs, rest)

    @staticmethod
    def _hardware_rows(packed: PackedImages, blobs: list, cut_short, orientations,
                       header_facts) -> np.ndarray:
        """bool ``[B]``: the rows the hardware decoder takes (:func:`hardware_decodes`), from
        the facts given, or from each header where none were (or for unknown rows)."""
        facts = np.full((len(blobs), 4), UNKNOWN_FACTS, np.int64)
        if header_facts is not None:  # one row a source: a broadcast row would skip the size check
            given = np.asarray(header_facts, np.int64)
            if given.shape != facts.shape:
                raise ValueError(f"header_facts is {given.shape}; {facts.shape} (a row a source) "
                                 "is needed")
            facts[:] = given
        if orientations is not None and len(orientations) != len(blobs):
            raise ValueError(f"{len(orientations)} orientations for {len(blobs)} sources")
        for row in np.flatnonzero(facts[:, FACT_FORMAT] < 0).tolist():
            if blobs[row] is not None:
                facts[row] = header_facts_of(blobs[row])
        upright = orientations is not None
        ok = hardware_rows(facts, packed.heights, packed.widths, upright=upright)
        ok &= np.array([blob is not None and not cut for blob, cut in
                        zip(blobs, cut_short, strict=True)], bool)
        if upright:  # the index says which files are turned: those go elsewhere
            ok &= np.isin(np.asarray(orientations, np.int64), (0, 1))
        return ok

    def _next_state(self):
        """The next of :data:`STATES` nvJPEG states, once its last batch has left the GPU:
        a state holds its batch's bitstreams and buffers until then (nvImageCodec and
        torchvision also wait for the previous batch before reusing theirs)."""
        if not self._states:
            raise RuntimeError("this NvJpegDecoder was closed; make a new one")
        entry = self._states[self._turn]
        self._turn = (self._turn + 1) % len(self._states)
        if entry[1] is not None:
            entry[1].synchronize()  # lets go of the GIL
            entry[1] = None
        return entry

    def _decode_hardware(self, packed: PackedImages, blobs: list, rows: list[int]) -> bool:
        """nvJPEG's batched hardware decode of ``rows`` into their places, on torch's current
        stream; ``False`` (and a warning the first time) when nvJPEG refuses the batch."""
        arrays = [np.frombuffer(blobs[row], np.uint8) if isinstance(blobs[row], bytes)
                  else np.ascontiguousarray(blobs[row], np.uint8) for row in rows]
        pointers = np.array([a.__array_interface__["data"][0] for a in arrays], np.uint64)
        lengths = np.array([a.nbytes for a in arrays], np.uint64)
        images = np.zeros((len(rows), _IMAGE_WORDS), np.uint64)
        index = np.asarray(rows)
        images[:, 0] = packed.pixels.data_ptr() + 3 * packed.starts[index]  # channel[0]
        images[:, 4] = 3 * packed.widths[index]  # pitch[0]: interleaved RGB rows
        stream = self._current_stream()
        entry = self._next_state()
        with self._on_device():
            status = self._lib.nvjpegDecodeBatchedInitialize(self._handle, entry[0], len(rows), 1,
                                                             _OUTPUT_RGBI)
            if status == 0:
                status = self._lib.nvjpegDecodeBatched(
                    self._handle, entry[0], pointers.ctypes.data, lengths.ctypes.data,
                    images.ctypes.data, 0 if stream is None else stream.cuda_stream)
            if stream is not None:  # a blocking event: its wait sleeps rather than spins
                entry[1] = stream.record_event(torch.cuda.Event(blocking=True))
        del arrays  # alive until here: nvJPEG copies the bitstreams during the call
        if status != 0:
            self._refused(status)
        return status == 0

    def _current_stream(self):
        """torch's current stream on :attr:`device` (``None`` off CUDA: a stand-in library)."""
        return torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None

    def _refused(self, status: int) -> None:
        self.hardware_refused += 1
        if self.hardware_refused == 1:
            warnings.warn(f"vidloader: nvJPEG's hardware decoder refused a batch "
                          f"({_status_name(status)}); such batches are "
                          "decoded by nvImageCodec instead (slower). A file in it may be "
                          "corrupt: decoder.hardware_refused counts them.", RuntimeWarning,
                          stacklevel=4)

    def _hand_on(self, packed: PackedImages, blobs: list, rows: list[int]):
        """``rows`` decoded by nvImageCodec (then Pillow) and copied into their places; a list
        of tensors where one does not fit (see :meth:`decode_packed`; a warning, once)."""
        if not rows:
            return packed
        handed = [blobs[r] for r in rows]
        decoded = dict(zip(rows, self._decoded_list(self._streams(handed, None), handed)))
        placed = _placed(packed, decoded)
        if isinstance(placed, list):
            row = next(r for r, x in decoded.items() if x is not None and not packed.fits(r, x))
            self._warn_stale_sizes(ValueError(
                f"image {row} of the batch is {tuple(decoded[row].shape[:2])}, its place "
                f"{(int(packed.heights[row]), int(packed.widths[row]))}"))
        return placed


def fancy_upsampling_in(options: str) -> bool:
    """Whether nvImageCodec's decoder ``options`` (space-separated ``module:key=value``) leave
    chroma interpolated: the last ``fancy_upsampling`` given for no module or an nvJPEG one
    (``nvjpeg_cuda_decoder``, ``nvjpeg_hw_decoder``), true by default as in nvImageCodec."""
    fancy = True
    for token in options.split():
        module, _, setting = token.rpartition(":")
        key, _, value = setting.partition("=")
        if key == "fancy_upsampling" and (not module or module.startswith("nvjpeg")):
            fancy = value.strip() not in ("0", "false", "False")
    return fancy


def _unavailable_unless(status: int, call: str) -> None:
    """A failure to set nvJPEG up: nvImageCodec's decoder serves instead."""
    if status != 0:
        raise NvJpegUnavailable(f"{call} failed: {_status_name(status)}; "
                                "nvImageCodec's decoder serves instead")


def _as_bytes(source):
    """A source's encoded bytes: a path read, bytes or a uint8 array kept; ``None`` (a file
    that could not be read) kept."""
    return read_file(source) if isinstance(source, str) else source

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
is a header walk in Python (:func:`jpeg_header`).

What the hardware decoder does not take goes to nvImageCodec (:class:`NvJpegDecoder` is an
:class:`~._nvimgcodec.NvImageCodecDecoder`, which also does everything but the packed
decode): JPEGs that are not baseline three-component ones (progressive, gray, CMYK), files
with an EXIF block (they may need turning upright), files cut short, files whose stored size
is not their place's (the index is out of date), and anything that is not a JPEG.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading

import numpy as np
import torch

from ..errors import BackendUnavailableError
from ._nvimgcodec import NvImageCodecDecoder, _cut_short
from ._packed import PackedImages

#: nvJPEG's chroma upsampling with interpolation (``NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION``,
#: libjpeg's "fancy upsampling", which Pillow and nvImageCodec's default do); ``False``:
#: chroma samples repeated, as DALI does.
FANCY_UPSAMPLING = True

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
    """libnvjpeg is missing, or the GPU has no hardware JPEG decoder: nvImageCodec's decoder
    serves instead (``_nvimgcodec.gpu_image_decoder``)."""


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
    for name, args in signatures.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = args, ctypes.c_int
    return lib


def _check(status: int, call: str) -> None:
    if status != 0:
        raise NvJpegError(f"{call} failed: NVJPEG_STATUS_{_STATUS.get(status, status)}")


def library_version() -> tuple[int, int, int]:
    """libnvjpeg's (major, minor, patch)."""
    lib = load_library()
    values = []
    for prop in range(3):
        value = ctypes.c_int()
        _check(lib.nvjpegGetProperty(prop, ctypes.byref(value)), "nvjpegGetProperty")
        values.append(value.value)
    return tuple(values)


_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def jpeg_header(data) -> tuple[int, int, int, int, bool] | None:
    """``(SOF marker, components, height, width, EXIF present)`` from a JPEG's header (bytes
    or a uint8 array of them), walking its segments to the frame header; ``None`` where it
    is not a JPEG or the header is cut or malformed."""
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    size = len(view)
    if size < 4 or view[0] != 0xFF or view[1] != 0xD8:
        return None
    at, exif = 2, False
    while at + 4 <= size:
        if view[at] != 0xFF:
            return None
        marker = view[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        length = (view[at + 2] << 8) | view[at + 3]
        if marker in _SOF_MARKERS:
            if at + 10 > size:
                return None
            height = (view[at + 5] << 8) | view[at + 6]
            width = (view[at + 7] << 8) | view[at + 8]
            return marker, view[at + 9], height, width, exif
        if marker == 0xE1 and bytes(view[at + 4:at + 10]) == b"Exif\x00\x00":
            exif = True
        if marker in (0xD9, 0xDA) or length < 2:  # end of image or scan before any frame
            return None
        at += 2 + length
    return None


def hardware_decodes(header, place: tuple[int, int], *, upright: bool = False) -> bool:
    """Whether a file of this :func:`jpeg_header` goes to the hardware decoder, into a place
    of ``(height, width)``: a baseline (SOF0) three-component JPEG whose stored size is the
    place's, and with no EXIF block unless it is known to be ``upright`` as stored (the
    index's orientation 1, or a tag with no orientation number); otherwise it may need
    turning, which nvImageCodec does."""
    return (header is not None and header[0] == 0xC0 and header[1] == 3
            and (upright or not header[4]) and (header[2], header[3]) == place)


class NvJpegDecoder(NvImageCodecDecoder):
    """:class:`~._nvimgcodec.NvImageCodecDecoder` whose packed decode gives the baseline
    JPEGs to nvJPEG's hardware decoder in one batched call (module docstring); everything
    else, and every other method, is nvImageCodec's.

    Args:
        device (torch.device): the GPU.
        fancy_upsampling (bool | None): interpolate chroma (default :data:`FANCY_UPSAMPLING`).
        **nvimgcodec: :class:`~._nvimgcodec.NvImageCodecDecoder`'s options, for the rest.

    Raises:
        BackendUnavailableError: nvImageCodec is not installed.
        NvJpegUnavailable: libnvjpeg is not installed, or this GPU has no hardware JPEG
            decoder (nvJPEG's ``ARCH_MISMATCH``).
    """

    name = "nvjpeg"

    def __init__(self, device: torch.device, *, fancy_upsampling: bool | None = None,
                 **nvimgcodec) -> None:
        if torch.device(device).type != "cuda":
            raise ValueError(f"NvJpegDecoder decodes on a CUDA device, not {device!r}")
        super().__init__(device, **nvimgcodec)
        self.decodes_packed = True  # its own packed decode, whatever nvImageCodec's version
        self._lib = load_library()
        fancy = FANCY_UPSAMPLING if fancy_upsampling is None else fancy_upsampling
        self._handle, self._state = ctypes.c_void_p(), ctypes.c_void_p()
        with self._on_device():
            status = self._lib.nvjpegCreateEx(
                _BACKEND_HARDWARE, None, None,
                _FLAG_UPSAMPLING_WITH_INTERPOLATION if fancy else 0, ctypes.byref(self._handle))
            if status == 7:
                raise NvJpegUnavailable(
                    f"{torch.cuda.get_device_name(self.device)} has no hardware JPEG decoder "
                    "(nvJPEG: ARCH_MISMATCH); use nvImageCodec's decoder "
                    "(vidloader.images._nvimgcodec.PACKED_JPEG_ENGINE = 'nvimgcodec')")
            _check(status, "nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE)")
            _check(self._lib.nvjpegJpegStateCreate(self._handle, ctypes.byref(self._state)),
                   "nvjpegJpegStateCreate")
        #: Images of packed batches decoded by the hardware decoder here, and by nvImageCodec
        #: (or Pillow) because the hardware decoder does not take them.
        self.hardware_decoded = 0
        self.handed_on = 0

    def _on_device(self):
        """nvJPEG works on the calling thread's current CUDA device: :attr:`device` made it."""
        return torch.cuda.device(self.device) if self.device.type == "cuda" else contextlib.nullcontext()

    def close(self) -> None:
        """Free nvJPEG's state and handle (also done when the decoder is collected)."""
        lib, state, handle = getattr(self, "_lib", None), getattr(self, "_state", None), \
            getattr(self, "_handle", None)
        if lib is None:
            return
        if state is not None and state.value:
            lib.nvjpegJpegStateDestroy(state)
        if handle is not None and handle.value:
            lib.nvjpegDestroy(handle)
        self._state = self._handle = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit the library may be gone
            self.close()

    def decode_packed(self, sources: list, sizes: np.ndarray, *,
                      cut_short: list[bool] | None = None,
                      orientations: list[int] | None = None) -> PackedImages | list:
        """As :meth:`NvImageCodecDecoder.decode_packed`: the batch in one buffer on torch's
        current stream, the baseline JPEGs (:func:`hardware_decodes`) by nvJPEG's hardware
        decoder in one call, the rest by nvImageCodec (then Pillow) and copied into their
        places; a list of tensors where some image does not fit its place.

        ``orientations``: per source the index's EXIF orientation (``ImageFolder.orientations``);
        a file with an EXIF block goes to the hardware decoder only where it is 1 (or 0, a tag
        with no orientation number, kept as stored), else to nvImageCodec."""
        blobs = [_as_bytes(source) for source in sources]
        if cut_short is None:
            cut_short = [blob is None or _cut_short(blob) for blob in blobs]
        upright = ([False] * len(blobs) if orientations is None
                   else [int(o) in (0, 1) for o in orientations])
        packed = PackedImages.allocate(sizes, self.device)
        hardware, rest = [], []
        for row, (blob, cut) in enumerate(zip(blobs, cut_short, strict=True)):
            place = (int(packed.heights[row]), int(packed.widths[row]))
            ok = blob is not None and not cut and hardware_decodes(jpeg_header(blob), place,
                                                                   upright=upright[row])
            (hardware if ok else rest).append(row)
        if hardware and not self._decode_hardware(packed, blobs, hardware):
            rest = sorted(rest + hardware)  # the call failed (a corrupt file): nvImageCodec's
            hardware = []
        self.hardware_decoded += len(hardware)
        self.handed_on += len(rest)
        return self._hand_on(packed, blobs, rest)

    def _decode_hardware(self, packed: PackedImages, blobs: list, rows: list[int]) -> bool:
        """nvJPEG's batched hardware decode of ``rows`` into their places; ``False`` when
        nvJPEG refuses the batch."""
        arrays = [np.frombuffer(blobs[row], np.uint8) if isinstance(blobs[row], bytes)
                  else blobs[row] for row in rows]
        pointers = np.array([a.__array_interface__["data"][0] for a in arrays], np.uint64)
        lengths = np.array([a.nbytes for a in arrays], np.uint64)
        images = np.zeros((len(rows), _IMAGE_WORDS), np.uint64)
        index = np.asarray(rows)
        images[:, 0] = packed.pixels.data_ptr() + 3 * packed.starts[index]
        images[:, 4] = 3 * packed.widths[index]
        cuda = self.device.type == "cuda"  # else a stand-in library (the CPU tests)
        stream = torch.cuda.current_stream(self.device).cuda_stream if cuda else 0
        with self._on_device():
            status = self._lib.nvjpegDecodeBatchedInitialize(self._handle, self._state,
                                                             len(rows), 1, _OUTPUT_RGBI)
            if status == 0:
                status = self._lib.nvjpegDecodeBatched(
                    self._handle, self._state, pointers.ctypes.data, lengths.ctypes.data,
                    images.ctypes.data, stream)
        del arrays  # alive until here: nvJPEG copies the bitstreams during the call
        return status == 0

    def _hand_on(self, packed: PackedImages, blobs: list, rows: list[int]):
        """``rows`` decoded by nvImageCodec (then Pillow) and copied into their places; a list
        of tensors where one does not fit (see :meth:`decode_packed`)."""
        if not rows:
            return packed
        decoded = self._decoded_list(self._streams([blobs[r] for r in rows], None),
                                     [blobs[r] for r in rows])
        fits = True
        for row, image in zip(rows, decoded):
            if image is None:
                packed.missing[row] = True
            elif packed.fits(row, image):
                packed[row].copy_(image)
            else:
                fits = False
        if fits:
            return packed
        by_row = dict(zip(rows, decoded))
        return [by_row[r] if r in by_row else packed[r] for r in range(len(packed))]


def _as_bytes(source):
    """A source's encoded bytes: a path read, bytes or a uint8 array kept; ``None`` (a file
    that could not be read) kept."""
    if isinstance(source, str):
        try:
            with open(source, "rb") as f:
                return f.read()
        except OSError:
            return None
    return source

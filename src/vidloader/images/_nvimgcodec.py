"""Batched image decoding on the GPU through nvImageCodec (extra ``images-gpu``): nvJPEG's
hardware decoder where the GPU has one, CUDA decoding beside it, its CPU backends for what
neither takes (PNG, CMYK JPEG), and Pillow for what no installed backend decodes."""

from __future__ import annotations

import warnings

import numpy as np
import torch

from .._utils._imports import require
from ._jpeg_ends import TAIL_BYTES, jpeg_cut_short, read_file_ends
from ._packed import PackedImages

#: Share of JPEGs offered to the hardware decoder first (DALI's ``hw_decoder_load``); the rest
#: go to the next backends (nvImageCodec's nvJPEG CUDA decoder is its ``HYBRID_CPU_GPU``
#: backend: Huffman decoding on the CPU below its ``hybrid_huffman_threshold``, 1e6 pixels,
#: CUDA above). 1.0 was DALI's fastest on the H200 (issue 15).
DEFAULT_HW_LOAD = 1.0

#: nvImageCodec's backends, in the order it tries them: the hardware JPEG decoder, GPU-only
#: decoders (none for JPEG in 0.9), nvJPEG's CUDA decoder (hybrid CPU/GPU), then the CPU
#: (PNG, CMYK JPEG).
BACKENDS = ("HW_GPU_ONLY", "GPU_ONLY", "HYBRID_CPU_GPU", "CPU_ONLY")

#: CPU threads of each decoder's own pool (nvImageCodec's ``max_num_cpu_threads``; 0: one per
#: core, its default).
CPU_THREADS = 0

#: nvImageCodec's decoder options for every decoder made without ``options=`` (its
#: space-separated ``:name=value`` entries, e.g. ``":fancy_upsampling=0"``, chroma upsampled
#: without interpolation, which DALI's decoder does by default).
DECODER_OPTIONS = ""

#: The decoder the GPU image pools make (:func:`gpu_image_decoder`): ``"nvjpeg"``, nvJPEG's
#: hardware decoder called directly for the packed batches' baseline JPEGs
#: (:class:`~._nvjpeg.NvJpegDecoder`, nvImageCodec for the rest), or ``"nvimgcodec"``,
#: nvImageCodec for everything. On the H200, alternated twice (``session28-1``, 150 batches
#: of 256, 224² random resized crop + flip + normalize): one process 20,198 / 20,510 images/s
#: against 12,973 / 12,312, two GPU workers 18,693 / 18,568 against 13,268 / 12,431; the
#: decode alone on two threads 31,569 / 31,539 / 31,957 against 16,182 / 15,576 / 16,599,
#: the pixels identical to nvImageCodec's (256 of 256 images).
PACKED_JPEG_ENGINE = "nvjpeg"

_engine_warned = False


def gpu_image_decoder(device: torch.device):
    """The GPU image pools' decoder on ``device``, per :data:`PACKED_JPEG_ENGINE`; where
    nvJPEG's hardware decoder cannot be set up (no libnvjpeg, a GPU without one, a failing
    set-up call: ``_nvjpeg.NvJpegUnavailable``), a warning (once) and nvImageCodec's. Off a
    CUDA device (stand-in pools in tests), nvImageCodec's."""
    global _engine_warned
    if PACKED_JPEG_ENGINE not in ("nvjpeg", "nvimgcodec"):
        raise ValueError(f"vidloader.images._nvimgcodec.PACKED_JPEG_ENGINE is "
                         f"{PACKED_JPEG_ENGINE!r}; expected 'nvjpeg' or 'nvimgcodec'")
    if PACKED_JPEG_ENGINE == "nvjpeg" and torch.device(device).type == "cuda":
        from ._nvjpeg import NvJpegDecoder, NvJpegUnavailable

        try:
            return NvJpegDecoder(device)
        except NvJpegUnavailable as exc:  # nvImageCodec missing: raised, naming the extra
            if not _engine_warned:
                _engine_warned = True
                warnings.warn(f"vidloader: nvJPEG's hardware decoder is not available ({exc}); "
                              "images are decoded by nvImageCodec alone", RuntimeWarning,
                              stacklevel=2)
    return NvImageCodecDecoder(device)


class NvImageCodecDecoder:
    """Decodes a batch of encoded images to upright RGB uint8 ``[H, W, 3]`` CUDA tensors.

    Args:
        device (torch.device): the GPU.
        hw_load (float | None): share of the batch offered to the hardware JPEG decoder
            (default :data:`DEFAULT_HW_LOAD`).
        options (str | None): nvImageCodec's decoder options, passed as they are (e.g.
            ``":fancy_upsampling=0"``; default :data:`DECODER_OPTIONS`).
        packed (bool): offer :meth:`decode_packed` (default ``True``; it needs
            ``DecodeParams(sample_format=)``, nvImageCodec 0.9, and is off on older versions
            whatever this says).

    Raises:
        BackendUnavailableError: nvImageCodec is not installed (``pip install
            'vidloader[images-gpu]'``).
    """

    name = "nvimgcodec"
    #: :meth:`decode_files` takes ``regions`` (see there).
    decodes_regions = True
    #: :meth:`decode_files` takes ``cut_short=`` and ``tensors=False``, and :meth:`to_tensors`
    #: finishes its output on another thread (the GPU pool's ``PHASED_DECODE``).
    decodes_in_phases = True
    #: :meth:`decode_packed` decodes a batch into one flat buffer (nvImageCodec 0.9 and later;
    #: the GPU pools' ``PACKED_DECODE``). Set per decoder in ``__init__``.
    decodes_packed = False
    #: :meth:`decode_packed` takes the index's EXIF ``orientations=`` (the pools pass them).
    takes_orientations = True

    def __init__(self, device: torch.device, *, hw_load: float | None = None, options: str | None = None,
                 packed: bool = True) -> None:
        nvimgcodec = require("nvidia.nvimgcodec", purpose="decoding images on the GPU")
        self._code_stream = nvimgcodec.CodeStream
        self._region = nvimgcodec.Region
        self.device = torch.device(device)
        hw_load = DEFAULT_HW_LOAD if hw_load is None else hw_load
        backends = [nvimgcodec.Backend(getattr(nvimgcodec.BackendKind, kind),
                                       load_hint=hw_load if kind == "HW_GPU_ONLY" else 1.0)
                    for kind in BACKENDS]
        options = DECODER_OPTIONS if options is None else options
        extra = {"options": options} if options else {}
        self._decoder = nvimgcodec.Decoder(device_id=self.device.index or 0, backends=backends,
                                           max_num_cpu_threads=CPU_THREADS, **extra)
        colors = nvimgcodec.ColorSpec  # SRGB since 0.5, RGB before
        spec = colors.SRGB if hasattr(colors, "SRGB") else colors.RGB
        #: Images nvImageCodec could not decode and Pillow did (see :meth:`_on_cpu`).
        self.cpu_fallbacks = 0
        self._params = nvimgcodec.DecodeParams(apply_exif_orientation=True, color_spec=spec,
                                               allow_any_depth=False)
        self._as_images = getattr(nvimgcodec, "as_images", None)
        self._stale_sizes_warned = False
        self._packed_params = _packed_params(nvimgcodec) if packed else None
        self.decodes_packed = self._packed_params is not None

    def decode(self, blobs: list[bytes | None]) -> list[torch.Tensor | None]:
        """One tensor per blob on :attr:`device`, ``None`` where a blob is ``None`` or could
        not be decoded. Ordered on torch's current stream. A JPEG that does not end with its
        end-of-image marker goes to Pillow (:func:`jpeg_cut_short`)."""
        return self._decoded_list(self._streams(blobs, None), blobs)

    def decode_files(self, paths: list[str], regions: list | None = None, *,
                     cut_short: list[bool] | None = None, tensors: bool = True) -> list:
        """:meth:`decode` of the files at ``paths``, opened by nvImageCodec itself: a
        ``CodeStream`` made from a path reads the file in C++ (84k files/s on one thread on
        the H100 machine, against 16k for Python's ``open``/``read``, whose per-file cost
        also held the GIL the augmentation needs). A file it cannot open or decode goes to
        Pillow, as in :meth:`decode`; ``None`` if that fails too. So does a JPEG whose last
        bytes lack its end-of-image marker (:func:`~._jpeg_ends.jpeg_cut_short`).

        ``cut_short``: per file, whether it is such a JPEG, as the dataset's index recorded
        it (``ImageFolder.cut_short``); without it each file's two ends are read here (an
        ``open`` and two small reads, each retaking the GIL).

        ``regions``: per file ``None`` or ``(top, left, bottom, right)`` in the stored
        pixels (end exclusive): only that window is decoded (nvImageCodec's region of
        interest; on the H200 no faster than whole images, see the pool's ``ROI_DECODE``).
        Callers check the shape they get: a file decoded by Pillow is whole.

        ``tensors=False``: nvImageCodec's images are returned as they come (Pillow's as
        tensors), for :meth:`to_tensors` on another thread: the decode then takes the GIL
        once a file fewer."""
        streams = self._streams(paths, cut_short)
        if regions is not None:
            streams = [self._crop(cs, r) for cs, r in zip(streams, regions)]
        return self._decoded_list(streams, paths, tensors=tensors)

    def _decoded_list(self, streams: list, sources: list, *, tensors: bool = True) -> list:
        """nvImageCodec's decode of ``streams`` (``None``: not for it), then Pillow's of every
        source it left undecoded (``None`` where a source is ``None`` or Pillow fails too)."""
        todo = [i for i, cs in enumerate(streams) if cs is not None]
        out: list = [None] * len(streams)
        if todo:  # else every source goes to Pillow (or is None)
            self._decode_into(out, todo, [streams[i] for i in todo], tensors=tensors)
        for i, source in enumerate(sources):
            if out[i] is None and source is not None:
                out[i] = self._on_cpu(source)
        return out

    def decode_packed(self, sources: list, sizes: np.ndarray, *,
                      cut_short: list[bool] | None = None,
                      orientations: list[int] | None = None) -> PackedImages | list:
        """The batch decoded into one flat buffer (:class:`~._packed.PackedImages`) on torch's
        current stream, each image at the place its upright size (``sizes``, int ``[B, 2]``,
        from the dataset's index) gives it: no tensor per image, no copy to pack them.

        ``sources``: file paths (opened by nvImageCodec) or bytes, or uint8 numpy arrays of
        them (``None`` for a file that could not be read); mixed as they come. ``cut_short`` as in :meth:`decode_files`; without it each
        source's ends are checked (a slice of bytes, two small reads of a file).
        ``orientations`` (the index's) are not needed here: nvImageCodec reads each file's
        EXIF orientation itself (:class:`~._nvjpeg.NvJpegDecoder` uses them). A row
        nvImageCodec cannot decode goes to Pillow, as in :meth:`decode`, and is copied into
        its place; it is ``missing`` when Pillow fails too.

        The index may be out of date (files changed since indexing). An image smaller than
        its place is decoded again by Pillow; an image larger than its place makes
        nvImageCodec refuse the whole call, and the batch is then decoded as
        :meth:`decode_files` does (a warning, once per decoder). Either way a batch whose
        images do not all have the index's sizes comes back as a list of tensors, which the
        pools also take."""
        streams = self._streams(sources, cut_short)
        packed = PackedImages.allocate(sizes, self.device)
        todo = [i for i, cs in enumerate(streams) if cs is not None]
        redo = [i for i, cs in enumerate(streams) if cs is None]
        if todo:
            stream = torch.cuda.current_stream(self.device).cuda_stream
            cuda = packed.device.type == "cuda"
            places = self._as_images([_BufferPart(packed.pointer(i), int(packed.heights[i]),
                                                  int(packed.widths[i]), cuda) for i in todo],
                                     cuda_stream=stream)
            try:
                decoded = self._decoder.decode([streams[i] for i in todo], images=places,
                                               params=self._packed_params, cuda_stream=stream)
            except ValueError as exc:  # an image larger than its place ("too small")
                self._warn_stale_sizes(exc)
                return self._decoded_list(streams, sources)
            redo += [i for i, image in zip(todo, decoded) if not packed.fits(i, image)]
        return self._redo_on_cpu(packed, sources, sorted(redo))

    def _warn_stale_sizes(self, exc: Exception) -> None:
        if not self._stale_sizes_warned:
            self._stale_sizes_warned = True
            warnings.warn(f"an image is not the size the dataset's index says ({exc}): files "
                          f"changed since they were indexed. Batches holding such "
                          "files are decoded image by image into separate tensors (slower); "
                          "index the folder again.", RuntimeWarning, stacklevel=3)

    def _streams(self, sources: list, cut_short: list[bool] | None) -> list:
        """Per source (a path, bytes or a uint8 array of them, or ``None``) its
        ``CodeStream``, or ``None`` for what goes to Pillow: a JPEG cut short (``cut_short``,
        the index's flags, or else its ends read here) or a source nvImageCodec cannot
        open."""
        if cut_short is None:
            cut_short = [source is None or _cut_short(source) for source in sources]
        return [None if cut else self._open(s) if isinstance(s, str) else self._parse(s)
                for s, cut in zip(sources, cut_short, strict=True)]

    def _redo_on_cpu(self, packed: PackedImages, sources: list, rows: list[int]):
        """Pillow's decode of ``rows`` copied into their places; see :meth:`decode_packed`."""
        return _placed(packed, {i: None if sources[i] is None else self._on_cpu(sources[i])
                                for i in rows})

    def to_tensors(self, decoded: list | PackedImages) -> list[torch.Tensor | None] | PackedImages:
        """:meth:`decode_files`' ``tensors=False`` output as tensors on :attr:`device` (a
        gray image's one channel broadcast to three); what is a tensor or ``None`` already is
        kept, and so are packed images."""
        if isinstance(decoded, PackedImages):
            return decoded
        return [x if x is None or isinstance(x, torch.Tensor) else self._tensor(x) for x in decoded]

    def _tensor(self, image) -> torch.Tensor:
        t = torch.as_tensor(image, device=self.device)
        return t.expand(*t.shape[:2], 3) if t.shape[2] == 1 else t

    def _open(self, path: str):
        try:
            return self._code_stream(path)
        except Exception:  # noqa: BLE001 - nvImageCodec raises RuntimeError subclasses
            return None

    def _crop(self, stream, region):
        if stream is None or region is None:
            return stream
        try:
            return stream.get_sub_code_stream(region=self._region(*region))
        except Exception:  # noqa: BLE001 - a region it refuses: decode the whole image
            return stream

    def _decode_into(self, out: list, todo: list[int], streams: list, *, tensors: bool = True) -> None:
        """Decode ``streams`` on torch's current stream into ``out[todo[k]]`` (as tensors, or
        nvImageCodec's images)."""
        stream = torch.cuda.current_stream(self.device).cuda_stream
        images = self._decoder.decode(streams, params=self._params, cuda_stream=stream)
        for i, image in zip(todo, images):
            if image is not None:
                out[i] = self._tensor(image) if tensors else image

    def _on_cpu(self, blob) -> torch.Tensor | None:
        """A blob (or file) nvImageCodec did not decode (a format none of its installed
        backends takes, e.g. PNG without its OpenCV extension), decoded by Pillow and copied
        to the GPU;
        ``None`` if Pillow cannot decode it either (the file is then skipped or raises per
        ``on_error``). Counted in :attr:`cpu_fallbacks`. ``blob``: a path, bytes, or a uint8
        array of them (a reader's slab)."""
        from ..errors import CorruptImageError
        from ._pillow import decode_image

        if not isinstance(blob, (str, bytes)):
            blob = bytes(blob)
        try:
            array, _ = decode_image(blob)
        except CorruptImageError:
            return None
        self.cpu_fallbacks += 1
        return torch.from_numpy(array).to(self.device)

    def _parse(self, blob: bytes | None):
        """The blob's ``CodeStream`` (nvImageCodec 0.9 decodes only those), or ``None`` when
        its header cannot be parsed (not an image, cut short)."""
        if blob is None:
            return None
        try:
            return self._code_stream(blob)
        except Exception:  # noqa: BLE001 - nvImageCodec raises RuntimeError subclasses
            return None



def _placed(packed: PackedImages, decoded: dict):
    """Images decoded apart (``decoded``: row to tensor, ``None`` where nothing decoded it)
    copied into their places in ``packed``, a row with none marked missing; ``packed``, or
    where one does not fit its place the batch as a list of tensors."""
    for row, image in decoded.items():
        if image is None:
            packed.missing[row] = True
        elif packed.fits(row, image):
            packed[row].copy_(image)
    if all(x is None or packed.fits(row, x) for row, x in decoded.items()):
        return packed
    return [decoded[row] if row in decoded else packed[row] for row in range(len(packed))]


def _packed_params(nvimgcodec):
    """nvImageCodec's ``DecodeParams`` for :meth:`NvImageCodecDecoder.decode_packed`, or
    ``None`` where this version cannot decode into given places (before 0.9)."""
    formats = getattr(nvimgcodec, "SampleFormat", None)
    if getattr(nvimgcodec, "as_images", None) is None or formats is None:
        return None
    colors = nvimgcodec.ColorSpec
    spec = colors.SRGB if hasattr(colors, "SRGB") else colors.RGB
    # Three channels whatever the file (a gray JPEG's one is repeated, as Pillow's
    # convert("RGB") does): each image's bytes then follow from its size alone.
    try:
        return nvimgcodec.DecodeParams(apply_exif_orientation=True, color_spec=spec,
                                       allow_any_depth=False, sample_format=formats.I_RGB)
    except TypeError:  # 0.7 and 0.8 have as_images and SampleFormat, not this
        return None


def decodes_packed_here() -> bool:
    """Whether :class:`NvImageCodecDecoder` decodes packed with the nvImageCodec installed
    here (0.9 and later); ``False`` where none is installed."""
    import importlib

    try:  # as require() imports it (``from nvidia import`` would read a stale attribute)
        nvimgcodec = importlib.import_module("nvidia.nvimgcodec")
    except ImportError:
        return False
    return _packed_params(nvimgcodec) is not None


class _BufferPart:
    """An ``[H, W, 3]`` uint8 place at ``pointer`` in a torch buffer, described by the array
    interface nvImageCodec's ``as_images`` reads (CUDA's; numpy's for a host buffer, as a
    stand-in decoder in the tests has). A plain object rather than a torch view: on the H100,
    making these and ``as_images`` of them cost 1.0 + 4.0 µs an image, a torch view and
    ``as_images`` of views 3.7 + 9.1 µs (``benchmarks/results/gpu/session25-3/probe.log``)."""

    def __init__(self, pointer: int, height: int, width: int, cuda: bool) -> None:
        interface = {"shape": (height, width, 3), "typestr": "|u1", "data": (pointer, False),
                     "strides": None, "version": 3}
        setattr(self, "__cuda_array_interface__" if cuda else "__array_interface__", interface)


def _cut_short(source) -> bool:
    """:func:`~._jpeg_ends.jpeg_cut_short` of a path (its two ends read), or of bytes or a
    uint8 array of them (two slices)."""
    if isinstance(source, str):
        return jpeg_cut_short(*read_file_ends(source))
    return jpeg_cut_short(bytes(source[:2]), bytes(source[-TAIL_BYTES:]))

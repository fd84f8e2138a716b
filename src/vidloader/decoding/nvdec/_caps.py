"""What this GPU's NVDEC decodes, and which indexed videos it can therefore take.

Two parts, kept apart on purpose:

* :class:`NvdecCaps`: per ``(codec, chroma format, bit depth)``, whether NVDEC decodes it and
  the coded sizes it accepts. :func:`query_nvdec_caps` asks the driver through PyNvVideoCodec's
  ``GetDecoderCaps`` (run it in the GPU process: each call creates a CUDA context); where that
  is unavailable it falls back to :func:`table_nvdec_caps`, a table per GPU generation.
* :func:`nvdec_decodability`: a pure function of the index records and a caps object (numpy
  and strings only; no CUDA, no PyNvVideoCodec, no pipeline), so a scheduler can route files
  NVDEC cannot decode to the CPU, in any process, for 100k records in well under a second.

Reasons name the codec and profile in words ("H.264 High 10 (10-bit 4:2:0): NVDEC cannot
decode H.264 above 8 bits"), never an FFmpeg decoder library.

``GetDecoderCaps(gpuid, codec, chromaformat, bitdepth)`` returns (PyNvVideoCodec 2.2.4,
``PyNvDecoder.cpp``) a dict with ``codec_id, chromaformat_id, bitdepth, supported,
num_decoder_engines, width_max, height_max, mb_num_max, width_min, height_min``. Note that
2.2.4 queries GPU 0 whatever ``gpuid`` says (``cuDeviceGet(&dev, 0)``): on a machine of mixed
GPUs the caps of GPU 0 are reported.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ...index._codecs import codec_name, display_name

log = logging.getLogger(__name__)

#: Codecs vidloader's NVDEC path demuxes and decodes, with their ``cudaVideoCodec`` names.
NVDEC_CODECS = {"h264": "H264", "hevc": "HEVC", "av1": "AV1", "vp9": "VP9"}
#: Chroma formats vidloader's NVDEC path converts (NV12 and P016 surfaces are 4:2:0).
NVDEC_CHROMA = ("420",)
#: Bit depths vidloader's NVDEC path converts: 8 (NV12 surfaces) and 10/12 (P016 surfaces).
NVDEC_BIT_DEPTHS = (8, 10, 12)

_CHROMA_IDS = {"400": 0, "420": 1, "422": 2, "444": 3}
_CHROMA_WORDS = {"400": "monochrome", "420": "4:2:0", "422": "4:2:2", "444": "4:4:4",
                 "440": "4:4:0", "411": "4:1:1", "rgb": "RGB"}

Key = tuple[str, str, int]  # (codec, chroma format, bit depth)


@dataclasses.dataclass(frozen=True)
class CodecCaps:
    """NVDEC's limits for one ``(codec, chroma format, bit depth)``.

    Attributes:
        supported (bool): NVDEC decodes it at all.
        min_width, min_height, max_width, max_height (int): coded size limits (0: unknown).
        max_macroblocks (int): most 16×16 blocks per picture (0: unknown).
    """

    supported: bool
    min_width: int = 0
    min_height: int = 0
    max_width: int = 0
    max_height: int = 0
    max_macroblocks: int = 0


@dataclasses.dataclass(frozen=True)
class NvdecCaps:
    """What one GPU's NVDEC decodes (see the module docstring).

    Attributes:
        gpu (str): the GPU's name, or the generation a table stands for.
        source (str): ``"driver"`` (``GetDecoderCaps``) or ``"table:<generation>"``.
        entries (Mapping): ``(codec, chroma format, bit depth) -> CodecCaps``; a key that is
            missing was not asked about, which :meth:`get` treats as not supported.
        engines (int): NVDEC engines on the GPU (0: unknown).
    """

    gpu: str
    source: str
    entries: Mapping[Key, CodecCaps]
    engines: int = 0

    def get(self, codec: str, chroma: str, bit_depth: int) -> CodecCaps:
        return self.entries.get((codec, chroma, int(bit_depth)), _UNSUPPORTED)

    def describe(self) -> list[str]:
        """One line per supported entry, for logs and the device script."""
        out = [f"NVDEC caps of {self.gpu} ({self.source}, {self.engines or '?'} engines)"]
        for (codec, chroma, bits), c in sorted(self.entries.items()):
            state = (f"{c.min_width}x{c.min_height}..{c.max_width}x{c.max_height}"
                     if c.supported else "not supported")
            out.append(f"  {display_name(codec)} {bits}-bit {_CHROMA_WORDS.get(chroma, chroma)}: {state}")
        return out


_UNSUPPORTED = CodecCaps(False)


# -------------------------------------------------------------------------------------------
# The table, per GPU generation
#
# Sources: NVIDIA Video Codec SDK, NVDEC Application Note (SDK 12.2 and 13.0), table "NVDEC
# Hardware Capabilities": the column "Turing/GA100/Hopper" has H.264 Baseline/Main/High (not
# High10/High422: Blackwell only), HEVC Main/Main10 and HEVC 4:4:4 (not 4:2:2: Blackwell only),
# VP9 Profile 0, and *no* AV1 Main Profile decoding (AV1 is listed for GA10x/Ada and
# Blackwell). The NVDEC programming guide's decoder table adds HEVC 12-bit and VP9 10/12-bit
# 4:2:0 on these GPUs. Sizes: H.264 48x16..4096x4096 and HEVC 144x144..8192x8192 (max 65536
# and 262144 macroblocks) are what GetDecoderCaps returned on the H200 (driver 580,
# docs/nvdec.md); VP9 and AV1 128x128..8192x8192 are the programming guide's, not measured.
# The driver's answer (query_nvdec_caps) always wins over this table.

_H264 = dict(min_width=48, min_height=16, max_width=4096, max_height=4096, max_macroblocks=65536)
_BIG = dict(max_width=8192, max_height=8192, max_macroblocks=262144)
_HEVC = dict(min_width=144, min_height=144, **_BIG)
_VPX = dict(min_width=128, min_height=128, **_BIG)


def _table(*, h264_hi: bool, hevc_422: bool, av1: bool) -> dict[Key, CodecCaps]:
    t: dict[Key, CodecCaps] = {("h264", "420", 8): CodecCaps(True, **_H264)}
    for bits in (8, 10, 12):
        t[("hevc", "420", bits)] = CodecCaps(True, **_HEVC)
        t[("hevc", "444", bits)] = CodecCaps(True, **_HEVC)
        t[("vp9", "420", bits)] = CodecCaps(True, **_VPX)
        t[("hevc", "422", bits)] = CodecCaps(hevc_422 and bits > 8, **_HEVC)
        t[("h264", "422", bits)] = CodecCaps(h264_hi and bits <= 10, **_H264)
    t[("h264", "420", 10)] = CodecCaps(h264_hi, **_H264)
    for bits in (8, 10):
        t[("av1", "420", bits)] = CodecCaps(av1, **_VPX)
    return t


#: Generation -> table. ``turing`` stands for Turing, GA100 (A100) and Hopper (H100/H200).
GENERATION_TABLES = {
    "turing": _table(h264_hi=False, hevc_422=False, av1=False),
    "ampere": _table(h264_hi=False, hevc_422=False, av1=True),  # GA10x and Ada
    "blackwell": _table(h264_hi=True, hevc_422=True, av1=True),
}


def gpu_generation(name: str, capability: tuple[int, int]) -> str:
    """The :data:`GENERATION_TABLES` key for a GPU (name as torch gives it, compute capability).

    Hopper (9.x) and GA100 (8.0, the A100) share Turing's NVDEC; other Ampere (8.6, 8.7) and
    Ada (8.9) have AV1; Blackwell is 10.x and 12.x. Older GPUs get Turing's table (optimistic
    there: the driver's answer is what counts)."""
    major, minor = capability
    if major >= 10:
        return "blackwell"
    if major == 8 and minor != 0:
        return "ampere"
    return "turing"


def table_nvdec_caps(generation: str, *, gpu: str | None = None) -> NvdecCaps:
    """The caps of a GPU generation from :data:`GENERATION_TABLES` (no GPU needed)."""
    if generation not in GENERATION_TABLES:
        raise ValueError(f"unknown GPU generation {generation!r}; one of {sorted(GENERATION_TABLES)}")
    return NvdecCaps(gpu or generation, f"table:{generation}", dict(GENERATION_TABLES[generation]))


# -------------------------------------------------------------------------------------------
# Asking the driver


def default_queries() -> list[Key]:
    """The ``(codec, chroma, bits)`` :func:`query_nvdec_caps` asks about by default: what
    vidloader's NVDEC path can convert (4:2:0, 8/10/12-bit), for every codec it demuxes."""
    return [(c, ch, b) for c in NVDEC_CODECS for ch in NVDEC_CHROMA for b in NVDEC_BIT_DEPTHS
            if not (c == "av1" and b == 12)]


def needed_queries(records: Iterable[Any]) -> list[Key]:
    """The distinct ``(codec, chroma, bits)`` of ``records`` that vidloader's NVDEC path could
    take, and their lower bit depths (to ask the driver about just those)."""
    keys = {(codec_name(r.codec), r.chroma_format, int(r.bit_depth)) for r in records}
    # Lower depths of the same codec too: a reason then says "above 8 bits" where it applies.
    keys |= {(c, ch, b) for c, ch, bits in keys for b in NVDEC_BIT_DEPTHS if b < bits}
    return sorted(k for k in keys if k[0] in NVDEC_CODECS)


def query_nvdec_caps(nvc: Any = None, *, gpu: int = 0, queries: Sequence[Key] | None = None) -> NvdecCaps:
    """This GPU's NVDEC caps: ``GetDecoderCaps`` for each of ``queries`` (default:
    :func:`default_queries`), else the table of the GPU's generation.

    Call it in the process that owns the GPU: it initialises CUDA (each ``GetDecoderCaps``
    call creates and destroys a context). Defensive about the binding: a query that raises or
    answers without ``supported`` falls back to the table's entry for that key.

    Args:
        nvc: the imported PyNvVideoCodec module (imported here if ``None``).
        gpu: CUDA device index.
        queries: the keys to ask about (e.g. :func:`needed_queries` of the dataset).
    """
    import torch

    name = torch.cuda.get_device_name(gpu)
    generation = gpu_generation(name, torch.cuda.get_device_capability(gpu))
    table = GENERATION_TABLES[generation]
    if nvc is None:
        try:
            import PyNvVideoCodec as nvc  # noqa: N813
        except ImportError:
            nvc = None
    get_caps = getattr(nvc, "GetDecoderCaps", None)
    entries: dict[Key, CodecCaps] = {}
    engines, asked = 0, 0
    for key in queries if queries is not None else default_queries():
        raw = _ask_once(nvc, get_caps, gpu, key) if get_caps is not None else None
        if raw is None:
            entries[key] = table.get(key, _UNSUPPORTED)
            continue
        asked += 1
        engines = max(engines, int(raw.get("num_decoder_engines", 0) or 0))
        entries[key] = CodecCaps(
            bool(raw["supported"]), int(raw.get("width_min", 0) or 0), int(raw.get("height_min", 0) or 0),
            int(raw.get("width_max", 0) or 0), int(raw.get("height_max", 0) or 0),
            int(raw.get("mb_num_max", 0) or 0),
        )
    source = "driver" if asked == len(entries) and asked else (
        f"table:{generation}" if not asked else f"driver+table:{generation}")
    return NvdecCaps(name, source, entries, engines)


#: The driver's answers, by (GPU, codec, chroma, bits): they do not change while the process
#: runs, and each loader used to ask again at construction.
_ANSWERS: dict[tuple[int, int, Key], tuple[object, dict | None]] = {}
#: Free GPU memory below which the driver is not asked. PyNvVideoCodec 2.2.4's
#: ``GetDecoderCaps`` crashed the process (segmentation fault) on an H100 whose memory another
#: tensor had taken (``benchmarks/results/gpu/session8-6/cuda_tests.log``): a typed error
#: beats a dead process.
CAPS_MIN_FREE_BYTES = 64 << 20


def _ask_once(nvc, get_caps, gpu: int, key: Key) -> dict | None:
    """:func:`_ask`, once per process for each GPU and kind of video.

    Raises:
        GpuMemoryError: less than :data:`CAPS_MIN_FREE_BYTES` of the GPU is free.
    """
    # Keyed by the binding too (tests swap in stand-ins), which the entry keeps alive so
    # that its id is not reused.
    cache_key = (id(nvc), gpu, key)
    if cache_key not in _ANSWERS:
        _check_room(gpu)
        _ANSWERS[cache_key] = (nvc, _ask(nvc, get_caps, gpu, key))
    answer = _ANSWERS[cache_key][1]
    return None if answer is None else dict(answer)


def _check_room(gpu: int) -> None:
    import torch

    from .._memory import gpu_memory_error

    try:
        free, _ = torch.cuda.mem_get_info(gpu)
    except (RuntimeError, AssertionError):  # no CUDA here (a stand-in binding in tests)
        return
    if free < CAPS_MIN_FREE_BYTES:
        raise gpu_memory_error(
            MemoryError(f"{free >> 20} MiB free, under the {CAPS_MIN_FREE_BYTES >> 20} MiB "
                        "below which NVDEC's capabilities are not asked (the binding has "
                        "crashed the process there)"),
            "NVDEC's capability query", gpu)


def _ask(nvc, get_caps, gpu: int, key: Key) -> dict | None:
    codec, chroma, bits = key
    try:
        enum = getattr(nvc.cudaVideoCodec, NVDEC_CODECS[codec])
        raw = dict(get_caps(gpuid=gpu, codec=enum, chromaformat=_chroma_enum(nvc, chroma), bitdepth=bits))
    except Exception as exc:  # the binding raises its own types; the table stands in
        log.info("GetDecoderCaps(%s) failed (%s); using the table", key, exc)
        return None
    return raw if "supported" in raw else None


def _chroma_enum(nvc, chroma: str):
    """``cudaVideoChromaFormat`` member for ``"420"`` …: pybind names them ``"420"`` (not an
    identifier, so ``getattr``), and pybind enums also take their integer value."""
    enum = nvc.cudaVideoChromaFormat
    for name in (chroma, f"cudaVideoChromaFormat_{chroma}", f"YUV{chroma}"):
        member = getattr(enum, name, None)
        if member is not None:
            return member
    return enum(_CHROMA_IDS[chroma])


# -------------------------------------------------------------------------------------------
# Which videos NVDEC can take


def describe_stream(codec: str, profile: str, bit_depth: int, chroma: str) -> str:
    """``"H.264 High 10 (10-bit 4:2:0)"``: the codec, profile, bit depth and chroma in words."""
    name = display_name(codec)
    if profile:
        name = f"{name} {profile}"
    return f"{name} ({int(bit_depth)}-bit {_CHROMA_WORDS.get(chroma, chroma or 'unknown chroma')})"


def nvdec_decodability(records: Sequence[Any], caps: NvdecCaps) -> tuple[np.ndarray, list[str | None]]:
    """Which ``records`` this GPU's NVDEC (through vidloader) can decode, and why not.

    Pure and cheap: records are grouped by ``(codec, profile, bit depth, chroma)`` and sizes
    checked with numpy, so 100k records take a fraction of a second. Needs no GPU.

    Args:
        records: :class:`~vidloader.index.VideoRecord` objects (an index works).
        caps: from :func:`query_nvdec_caps` (GPU process) or :func:`table_nvdec_caps`.

    Returns:
        ``(mask, reasons)``: a bool array, ``True`` where NVDEC can decode the record, and per
        record ``None`` or the reason it cannot, e.g. ``"HEVC Main (8-bit 4:2:0) 128×128 is
        below NVDEC's minimum 144×144"``.
    """
    n = len(records)
    groups: dict[tuple, list[int]] = {}
    widths = np.empty(n, np.int64)
    heights = np.empty(n, np.int64)
    for k, r in enumerate(records):
        groups.setdefault((codec_name(r.codec), r.profile, int(r.bit_depth), r.chroma_format), []).append(k)
        widths[k], heights[k] = r.coded_width, r.coded_height
    mask = np.zeros(n, bool)
    reasons: list[str | None] = [None] * n
    for (codec, profile, bits, chroma), members in groups.items():
        idx = np.asarray(members, np.int64)
        what = describe_stream(codec, profile, bits, chroma)
        reason = _format_reason(codec, bits, chroma, what, caps)
        if reason is not None:
            for k in members:
                reasons[k] = reason
            continue
        ok = np.ones(len(idx), bool)
        _size_reasons(caps.get(codec, chroma, bits), what, widths[idx], heights[idx], idx, ok, reasons)
        mask[idx] = ok
    return mask, reasons


def _format_reason(codec: str, bits: int, chroma: str, what: str, caps: NvdecCaps) -> str | None:
    """Why no video of this codec/depth/chroma can go to NVDEC, or ``None``."""
    name = display_name(codec)
    if codec not in NVDEC_CODECS:
        return f"{what}: vidloader's NVDEC path decodes H.264, HEVC, AV1 and VP9 only"
    if not caps.get(codec, chroma, bits).supported:
        lower = [b for b in NVDEC_BIT_DEPTHS if b < bits and caps.get(codec, chroma, b).supported]
        if lower:
            return f"{what}: NVDEC cannot decode {name} above {max(lower)} bits"
        if any(c.supported for (k, _, _), c in caps.entries.items() if k == codec):
            words = _CHROMA_WORDS.get(chroma, chroma)
            return f"{what}: NVDEC on {caps.gpu} cannot decode {name} {bits}-bit {words}"
        return f"{what}: NVDEC on {caps.gpu} does not decode {name}"
    if chroma not in NVDEC_CHROMA:
        return f"{what}: vidloader's NVDEC path converts 4:2:0 pictures only"
    if bits not in NVDEC_BIT_DEPTHS:
        return f"{what}: vidloader's NVDEC path converts 8-, 10- and 12-bit pictures only"
    return None


def _size_reasons(c: CodecCaps, what: str, w: np.ndarray, h: np.ndarray, idx: np.ndarray,
                  ok: np.ndarray, reasons: list) -> None:
    small = ((w < c.min_width) | (h < c.min_height)) if c.min_width or c.min_height else np.zeros(len(w), bool)
    large = ((w > c.max_width) | (h > c.max_height)) if c.max_width and c.max_height else np.zeros(len(w), bool)
    blocks = ((w + 15) // 16) * ((h + 15) // 16)
    many = blocks > c.max_macroblocks if c.max_macroblocks else np.zeros(len(w), bool)
    for j in np.flatnonzero(small | large | many).tolist():
        size = f"{int(w[j])}×{int(h[j])}"
        if small[j]:
            why = f"is below NVDEC's minimum {c.min_width}×{c.min_height}"
        elif large[j]:
            why = f"is above NVDEC's maximum {c.max_width}×{c.max_height}"
        else:
            why = f"has more 16×16 blocks ({int(blocks[j])}) than NVDEC's maximum {c.max_macroblocks}"
        reasons[int(idx[j])] = f"{what} {size} {why}"
        ok[j] = False

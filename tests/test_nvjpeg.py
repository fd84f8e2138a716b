"""nvJPEG's hardware decoder called directly for packed batches (``images/_nvjpeg.py``): the
header walk that picks what it takes, the batched call's arguments (checked by a stand-in
library that decodes what it is given into the places it is given), what goes to
nvImageCodec, the engine setting; on the GPU, pixels within the stated tolerance of Pillow."""

from __future__ import annotations

import ctypes
import io
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vidloader import ImageLoader, SequentialFrames
from vidloader.errors import BackendUnavailableError
from vidloader.images import ImageFolder, _nvimgcodec, _nvjpeg
from vidloader.images._jpeg_header import hardware_decodes, jpeg_header
from vidloader.images._nvjpeg import NvJpegDecoder
from vidloader.images._packed import PackedImages

from .test_images import _reference, _stand_in_nvimgcodec, folder, sized_folder  # noqa: F401


def _bytes(root, name):
    return next(Path(root).rglob(name)).read_bytes()


def test_jpeg_header_reads_the_frame_and_the_segments_that_matter(folder):  # noqa: F811
    """Frame marker, precision, stored size, components and their sampling, APP1 and Adobe
    segments: from bytes or a uint8 array of them (contiguous or not) alike; ``None`` for
    what is not a JPEG or is cut inside its header."""
    h = jpeg_header(_bytes(folder, "0_baseline.jpg"))
    assert (h.frame, h.precision, h.height, h.width, h.component_ids) == (0xC0, 8, 48, 64, (1, 2, 3))
    assert h.sampling == ((2, 2), (1, 1), (1, 1)) and not h.orientation_tags and not h.adobe_rgb
    assert jpeg_header(_bytes(folder, "1_progressive.jpg")).frame == 0xC2
    assert len(jpeg_header(_bytes(folder, "2_gray.jpg")).sampling) == 1
    cmyk = jpeg_header(_bytes(folder, "3_cmyk.jpg"))
    assert len(cmyk.sampling) == 4 and cmyk.adobe_rgb
    exif = jpeg_header(_bytes(folder, "4_exif.jpg"))
    assert (exif.height, exif.width, exif.orientation_tags) == (64, 48, True)
    assert jpeg_header(_bytes(folder, "6_truncated.jpg"))[:4] == (0xC0, 8, 48, 64)  # header intact
    for name in ("5_plain.png", "7_not_an_image.jpg"):
        assert jpeg_header(_bytes(folder, name)) is None
    blob = _bytes(folder, "0_baseline.jpg")
    assert jpeg_header(np.frombuffer(blob, np.uint8)) == h
    spread = np.zeros(2 * len(blob), np.uint8)
    spread[::2] = np.frombuffer(blob, np.uint8)
    assert jpeg_header(spread[::2]) == h  # a strided view
    assert jpeg_header(blob[:20]) is None  # cut inside the header


def test_jpeg_header_never_raises_on_mangled_headers(folder):  # noqa: F811
    """Random bytes written over the first 200 bytes of real JPEGs: a header or ``None``,
    never an exception."""
    rng = np.random.default_rng(1)
    blobs = [_bytes(folder, n) for n in ("0_baseline.jpg", "3_cmyk.jpg", "4_exif.jpg")]
    for k in range(3000):
        data = bytearray(blobs[k % 3])
        at = rng.integers(2, 200, size=rng.integers(1, 6))
        data_at = np.frombuffer(data, np.uint8).copy()
        data_at[at] = rng.integers(0, 256, size=len(at))
        header = jpeg_header(data_at.tobytes())
        assert header is None or isinstance(header.height, int)


def _jpeg(array, **options) -> bytes:
    out = io.BytesIO()
    Image.fromarray(array).save(out, format="JPEG", quality=90, **options)
    return out.getvalue()


def _with_segment(blob: bytes, marker: int, payload: bytes, *, after_frame: bool = False) -> bytes:
    """``blob`` with a segment inserted right after its start marker, or right after its
    frame header."""
    segment = bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + payload
    at = 2
    if after_frame:
        at = blob.index(b"\xff\xc0")
        at += 2 + int.from_bytes(blob[at + 2:at + 4], "big")
    return blob[:at] + segment + blob[at:]


def test_hardware_takes_baseline_ycbcr_jpegs_of_their_place_only(folder):  # noqa: F811
    """Baseline, 8-bit, three-component YCbCr of a subsampling the hardware takes, stored
    at its place's size, with no APP1 segment unless known upright; not progressive, gray,
    CMYK, RGB-coded (Adobe transform 0, or R/G/B ids), 12-bit, oddly sampled, EXIF- or
    XMP-tagged (before or after the frame header), or of another size."""
    from vidloader.images._synthetic import natural_like

    place = (48, 64)
    assert hardware_decodes(jpeg_header(_bytes(folder, "0_baseline.jpg")), place)
    assert not hardware_decodes(jpeg_header(_bytes(folder, "0_baseline.jpg")), (47, 64))  # stale index
    for name in ("1_progressive.jpg", "2_gray.jpg", "3_cmyk.jpg", "4_exif.jpg", "5_plain.png"):
        assert not hardware_decodes(jpeg_header(_bytes(folder, name)), place), name
    pixels = natural_like(48, 64, np.random.default_rng(2))
    for subsampling in (0, 1, 2):  # 4:4:4, 4:2:2, 4:2:0
        assert hardware_decodes(jpeg_header(_jpeg(pixels, subsampling=subsampling)), place)
    assert not hardware_decodes(jpeg_header(_jpeg(pixels, keep_rgb=True)), place)  # RGB-coded
    plain = _jpeg(pixels)
    adobe = b"Adobe\x00\x64\x00\x00\x00\x00"  # version 100, no flags, then the transform
    assert not hardware_decodes(jpeg_header(_with_segment(plain, 0xEE, adobe + b"\x00")), place)
    assert hardware_decodes(jpeg_header(_with_segment(plain, 0xEE, adobe + b"\x01")), place)  # YCbCr
    frame = plain.index(b"\xff\xc0")
    four_one_one = bytearray(plain)
    four_one_one[frame + 10 + 1] = 0x41  # luma sampled 4x1: 4:1:1, which the hardware refuses
    assert not hardware_decodes(jpeg_header(bytes(four_one_one)), place)
    scan = plain.index(b"\xff\xda")
    one_component = bytearray(plain)
    one_component[scan + 4] = 1  # a first scan of one component: not interleaved
    assert jpeg_header(bytes(one_component)).scan_components == 1
    assert not hardware_decodes(jpeg_header(bytes(one_component)), place)
    twelve = bytearray(plain)
    twelve[frame + 4] = 12  # the precision byte
    assert not hardware_decodes(jpeg_header(bytes(twelve)), place)
    odd = bytearray(plain)
    odd[frame + 10 + 3 + 1] = 0x21  # the second component sampled 2x1
    assert not hardware_decodes(jpeg_header(bytes(odd)), place)
    xmp = _with_segment(plain, 0xE1, b"http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta tiff:Orientation=\"3\"/>")
    late_exif = _with_segment(plain, 0xE1, b"Exif\x00\x00MM\x00*", after_frame=True)
    for tagged in (xmp, late_exif):
        header = jpeg_header(tagged)
        assert header.orientation_tags and not hardware_decodes(header, place)
        assert hardware_decodes(header, place, upright=True)  # the index says upright
    rgb_ids = bytearray(plain)  # R, G, B component ids, no Adobe segment
    for k, letter in enumerate(b"RGB"):
        rgb_ids[frame + 10 + 3 * k] = letter
    assert jpeg_header(bytes(rgb_ids)).component_ids == (82, 71, 66)
    assert not hardware_decodes(jpeg_header(bytes(rgb_ids)), place)
    body = plain[frame + 4:frame + 2 + int.from_bytes(plain[frame + 2:frame + 4], "big")]
    bigger = bytearray(body)
    bigger[1:5] = (96).to_bytes(2, "big") + (128).to_bytes(2, "big")
    two_frames = _with_segment(plain, 0xC0, bytes(bigger), after_frame=True)
    header = jpeg_header(two_frames)  # a second frame header: which one a decoder takes is unknown
    assert header.frames == 2 and (header.height, header.width) == place
    assert not hardware_decodes(header, place)
    assert jpeg_header(plain).frames == 1


def test_chroma_interpolation_follows_nvimgcodec_s_options():
    from vidloader.images._nvjpeg import fancy_upsampling_in

    assert fancy_upsampling_in("")
    assert not fancy_upsampling_in(":fancy_upsampling=0")
    assert not fancy_upsampling_in("nvjpeg_cuda_decoder:fancy_upsampling=0 :num_cuda_streams=4")
    assert fancy_upsampling_in(":fancy_upsampling=0 :fancy_upsampling=1")  # the last one
    assert fancy_upsampling_in("libjpeg_turbo_decoder:fancy_upsampling=0")  # not nvJPEG's


class StandInNvJpeg:
    """libnvjpeg's functions as :class:`NvJpegDecoder` calls them, on the CPU: the batched
    decode reads the bitstream pointers, lengths and ``nvjpegImage_t`` entries it is given
    and writes Pillow's RGB pixels at each entry's ``channel[0]``, row by row at its
    ``pitch[0]``; ``status`` is what it returns."""

    def __init__(self, status: int = 0) -> None:
        self.status, self.count, self.calls, self.states, self.streams = status, 0, [], [], []
        self.log = []

    def nvjpegDecodeBatchedInitialize(self, handle, state, count, threads, output):
        assert output == 5  # NVJPEG_OUTPUT_RGBI: interleaved RGB, one plane at channel[0]
        self.count = count
        self.log.append(("initialize", state.value))
        return 0

    def nvjpegJpegStateDestroy(self, state):
        self.log.append(("destroy state", state.value))
        return 0

    def nvjpegDestroy(self, handle):
        self.log.append(("destroy handle", handle.value))
        return 0

    def nvjpegDecodeBatched(self, handle, state, data, lengths, images, stream):
        n = self.count
        self.states.append(state.value)
        self.streams.append(stream)
        pointers = list((ctypes.c_uint64 * n).from_address(data))
        sizes = list((ctypes.c_uint64 * n).from_address(lengths))
        entries = np.array((ctypes.c_uint64 * (8 * n)).from_address(images)).reshape(n, 8)
        self.calls.append(n)
        if self.status:
            return self.status
        for pointer, size, entry in zip(pointers, sizes, entries):
            pixels = np.asarray(Image.open(io.BytesIO(ctypes.string_at(pointer, size))).convert("RGB"))
            h, w, _ = pixels.shape
            for y in range(h):
                ctypes.memmove(int(entry[0]) + y * int(entry[4]), pixels[y].tobytes(), 3 * w)
        return 0


def _stand_in_decoder(monkeypatch, status: int = 0) -> NvJpegDecoder:
    from types import SimpleNamespace

    dec = _stand_in_nvimgcodec(monkeypatch, NvJpegDecoder)
    dec.decodes_packed, dec._stale_sizes_warned = True, False
    dec._lib, dec._handle = StandInNvJpeg(status), ctypes.c_void_p(1)
    dec._states = [[ctypes.c_void_p(10 + k), None] for k in range(_nvjpeg.STATES)]
    dec._turn = dec.hardware_decoded = dec.handed_on = dec.hardware_refused = 0
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: SimpleNamespace(cuda_stream=0))
    return dec


def test_baseline_jpegs_go_in_one_batched_call_into_their_places(sized_folder, folder, monkeypatch):  # noqa: F811
    """The baseline colour JPEGs of a batch go to nvJPEG in one call, each written at its
    place in the packed buffer (pointer and pitch as ``nvjpegImage_t`` holds them), from
    paths, bytes or uint8 arrays; gray, EXIF-tagged, progressive and CMYK files go to
    nvImageCodec and are copied into their places; a file nobody decodes is missing."""
    dec = _stand_in_decoder(monkeypatch)
    for root, expect_hw in ((sized_folder, 4), (folder, 1)):
        ds = ImageFolder(root, num_workers=0, progress=False)
        paths = [ds.path(i) for i in range(len(ds))]
        whole = dec.decode_files(paths)
        blobs = [Path(p).read_bytes() for p in paths]
        arrays = [np.frombuffer(b, np.uint8) for b in blobs]
        for sources in (paths, blobs, arrays):
            calls, hw, on = len(dec._lib.calls), dec.hardware_decoded, dec.handed_on
            packed = dec.decode_packed(sources, ds.sizes, cut_short=ds.cut_short.tolist())
            assert isinstance(packed, PackedImages)
            assert dec._lib.calls[calls:] == [expect_hw]
            assert dec.hardware_decoded - hw == expect_hw and dec.handed_on - on == len(ds) - expect_hw
            assert packed.pixels[-1].tolist() == [0, 0, 0]
            for i, (a, b) in enumerate(zip(whole, packed, strict=True)):
                assert (a is None and b is None) or torch.equal(a, b), ds.path(i)
    assert dec._lib.states == [10, 11] * 3  # the states in turn
    assert dec._lib.streams == [0] * 6  # the stand-in's "current stream"


def test_header_facts_given_decide_as_the_walk_does_without_walking(sized_folder, folder, monkeypatch):  # noqa: F811
    """``header_facts`` from where the files were read (the reader processes): the same rows
    go to the hardware as when the decoder walks each header, and no header is walked but
    those of ``UNKNOWN_FACTS`` rows; facts of a file whose stored size is not its place's
    (a stale index) keep it from the hardware."""
    from vidloader.images import _jpeg_header

    dec = _stand_in_decoder(monkeypatch)
    walked = []
    real = _nvjpeg.header_facts_of
    monkeypatch.setattr(_nvjpeg, "header_facts_of", lambda blob: walked.append(1) or real(blob))
    for root in (sized_folder, folder):
        ds = ImageFolder(root, num_workers=0, progress=False)
        blobs = [Path(ds.path(i)).read_bytes() for i in range(len(ds))]
        flags = ds.cut_short.tolist()
        facts = np.array([_jpeg_header.header_facts(b) for b in blobs], np.int64)
        walked.clear()
        hw = dec.hardware_decoded
        walk = dec.decode_packed(blobs, ds.sizes, cut_short=flags)
        by_walk = dec.hardware_decoded - hw
        assert len(walked) == len(blobs)
        walked.clear()
        given = dec.decode_packed(blobs, ds.sizes, cut_short=flags, header_facts=facts)
        assert walked == [] and dec.hardware_decoded - hw == 2 * by_walk > 0
        for a, b in zip(walk, given, strict=True):
            assert (a is None and b is None) or torch.equal(a, b)
        unknown = facts.copy()
        unknown[0] = _jpeg_header.UNKNOWN_FACTS
        walked.clear()
        dec.decode_packed(blobs, ds.sizes, cut_short=flags, header_facts=unknown)
        assert len(walked) == 1
    hardware = np.flatnonzero(facts[:, 0] == 1)
    assert len(hardware) > 0
    for column in (2, 3):  # stored a row taller, or a column wider, than the index says
        stale = facts.copy()
        stale[hardware, column] += 1
        hw = dec.hardware_decoded
        dec.decode_packed(blobs, ds.sizes, cut_short=flags, header_facts=stale)
        assert dec.hardware_decoded == hw
    with pytest.raises(ValueError, match="a row a source"):  # one row would be broadcast
        dec.decode_packed(blobs, ds.sizes, cut_short=flags, header_facts=facts[:1])
    with pytest.raises(ValueError, match="orientations"):
        dec.decode_packed(blobs, ds.sizes, cut_short=flags, orientations=[1])


def test_hardware_rows_from_facts_match_hardware_decodes(sized_folder, folder):  # noqa: F811
    """``hardware_rows`` over ``header_facts`` is ``hardware_decodes`` of each header, upright
    or not, at the right place and one pixel off."""
    from vidloader.images import _jpeg_header

    blobs = [p.read_bytes() for root in (sized_folder, folder) for p in sorted(Path(root).rglob("*.*"))]
    facts = np.array([_jpeg_header.header_facts(b) for b in blobs], np.int64)
    headers = [jpeg_header(b) for b in blobs]
    places = np.array([(h.height, h.width) if h else (1, 1) for h in headers], np.int64)
    for upright in (False, True):
        for dy, dx in ((0, 0), (1, 0), (0, 1), (-1, 1)):
            rows = _jpeg_header.hardware_rows(facts, places[:, 0] + dy, places[:, 1] + dx,
                                              upright=upright)
            expect = [hardware_decodes(h, (y + dy, x + dx), upright=upright)
                      for h, (y, x) in zip(headers, places, strict=True)]
            assert rows.tolist() == expect
            assert any(expect) == (dy == dx == 0) and not all(expect)  # a pixel off: none
    with pytest.raises(ValueError, match="a row an image"):
        _jpeg_header.hardware_rows(facts[:1], places[:, 0], places[:, 1], upright=True)


def test_a_state_is_reused_only_after_its_last_batch_left_the_gpu(sized_folder, monkeypatch):  # noqa: F811
    """The decoder's states in turn: each batch's call is followed by an event recorded on the
    stream it was given, and a state's next batch waits for that event first."""
    dec = _stand_in_decoder(monkeypatch)
    log = dec._lib.log

    class Event:
        def __init__(self, n):
            self.n = n

        def synchronize(self):
            log.append(("wait", self.n))

    class Stream:
        cuda_stream, recorded = 1234, 0

        def record_event(self, event):
            assert event.blocking if hasattr(event, "blocking") else True
            Stream.recorded += 1
            log.append(("record", Stream.recorded))
            return Event(Stream.recorded)

    monkeypatch.setattr(torch.cuda, "Event", lambda blocking=False: type("E", (), {"blocking": blocking})())
    monkeypatch.setattr(dec, "_current_stream", lambda: Stream())
    ds = ImageFolder(sized_folder, num_workers=0, progress=False)
    paths = [ds.path(i) for i in range(len(ds))]
    for _ in range(3):
        dec.decode_packed(paths, ds.sizes)
    assert log == [("initialize", 10), ("record", 1), ("initialize", 11), ("record", 2),
                   ("wait", 1), ("initialize", 10), ("record", 3)]
    assert dec._lib.streams == [1234] * 3
    dec.close()
    assert log[7:] == [("wait", 3), ("destroy state", 10), ("wait", 2), ("destroy state", 11),
                       ("destroy handle", 1)]  # close waits for what is pending first
    with pytest.raises(RuntimeError, match="closed"):
        dec.decode_packed(paths, ds.sizes)


def test_a_batch_nvjpeg_refuses_goes_to_nvimgcodec(sized_folder, monkeypatch):  # noqa: F811
    """nvJPEG refusing the call (a corrupt bitstream, say): the whole batch is decoded by
    nvImageCodec instead, with the same pixels."""
    dec = _stand_in_decoder(monkeypatch, status=3)  # NVJPEG_STATUS_BAD_JPEG
    ds = ImageFolder(sized_folder, num_workers=0, progress=False)
    paths = [ds.path(i) for i in range(len(ds))]
    whole = dec.decode_files(paths)
    with pytest.warns(RuntimeWarning, match="NVJPEG_STATUS_BAD_JPEG"):
        packed = dec.decode_packed(paths, ds.sizes)
    assert dec._lib.calls == [4] and dec.hardware_decoded == 0 and dec.handed_on == len(ds)
    assert dec.hardware_refused == 1
    assert all((a is None and b is None) or torch.equal(a, b) for a, b in zip(whole, packed, strict=True))


def test_a_stale_index_size_is_handed_on_and_the_batch_listed(sized_folder, monkeypatch):  # noqa: F811
    """A baseline JPEG whose place (the index's size) is not its stored size is not given to
    nvJPEG; decoded by nvImageCodec, it does not fit, and the batch comes back as a list of
    the right tensors, as nvImageCodec's own packed decode does."""
    dec = _stand_in_decoder(monkeypatch)
    ds = ImageFolder(sized_folder, num_workers=0, progress=False)
    paths = [ds.path(i) for i in range(len(ds))]
    whole = dec.decode_files(paths)
    wrong = ds.sizes.copy()
    wrong[1] += 5
    with pytest.warns(RuntimeWarning, match="index the folder again"):
        listed = dec.decode_packed(paths, wrong)
    assert dec._lib.calls == [3] and isinstance(listed, list) and listed[6] is None
    assert all(torch.equal(a, b) for a, b in zip(whole[:6], listed[:6], strict=True))


def test_engine_setting_picks_the_decoder_and_falls_back_with_a_warning(monkeypatch):
    """``PACKED_JPEG_ENGINE``: ``"nvimgcodec"`` makes nvImageCodec's decoder; ``"nvjpeg"``
    nvJPEG's, or (no libnvjpeg, no hardware decoder) a warning and nvImageCodec's; anything
    else is refused naming the setting. The GPU workers take the setting from the loader's
    process."""
    from vidloader.pipeline import _image_gpu_workers

    class Plain:
        def __init__(self, device):
            self.device = device

    def unavailable(device):
        raise _nvjpeg.NvJpegUnavailable("no hardware JPEG decoder here")

    monkeypatch.setattr(_nvimgcodec, "NvImageCodecDecoder", Plain)
    monkeypatch.setattr(_nvjpeg, "NvJpegDecoder", unavailable)
    monkeypatch.setattr(_nvimgcodec, "_engine_warned", False)
    monkeypatch.setattr(_nvimgcodec, "PACKED_JPEG_ENGINE", "nvimgcodec")
    assert isinstance(_nvimgcodec.gpu_image_decoder(torch.device("cuda")), Plain)
    monkeypatch.setattr(_nvimgcodec, "PACKED_JPEG_ENGINE", "nvjpeg")
    with pytest.warns(RuntimeWarning, match="no hardware JPEG decoder here"):
        assert isinstance(_nvimgcodec.gpu_image_decoder(torch.device("cuda")), Plain)
    assert isinstance(_nvimgcodec.gpu_image_decoder(torch.device("cpu")), Plain)  # no nvJPEG off CUDA
    assert _image_gpu_workers.loader_nvimgcodec_decoder().keywords["settings"]["PACKED_JPEG_ENGINE"] == "nvjpeg"
    def no_nvimgcodec(device):
        raise BackendUnavailableError("nvImageCodec is not installed")
    monkeypatch.setattr(_nvjpeg, "NvJpegDecoder", no_nvimgcodec)  # raised, not warned about
    with pytest.raises(BackendUnavailableError, match="nvImageCodec is not installed"):
        _nvimgcodec.gpu_image_decoder(torch.device("cuda"))
    monkeypatch.setattr(_nvimgcodec, "PACKED_JPEG_ENGINE", "nvdec")
    with pytest.raises(ValueError, match="PACKED_JPEG_ENGINE is 'nvdec'"):
        _nvimgcodec.gpu_image_decoder(torch.device("cuda"))
    with pytest.raises(ValueError, match="CUDA device"):
        NvJpegDecoder(torch.device("cpu"))


def test_preallocation_where_the_library_has_it():
    """``nvjpegDecodeBatchedPreAllocate`` with DALI's 1×1 hint for ``PREALLOCATE_IMAGES``
    images, 4:4:4, interleaved RGB; skipped at 0 or where libnvjpeg lacks it (older than
    11.5.1), and reported false where it fails."""
    from types import SimpleNamespace

    calls = []
    lib = SimpleNamespace(nvjpegDecodeBatchedPreAllocate=lambda *a: calls.append(a) or 0)
    assert _nvjpeg.preallocate(lib, "h", "s", 256)
    assert calls == [("h", "s", 256, 1, 1, 0, 5)]
    assert not _nvjpeg.preallocate(lib, "h", "s", 0) and len(calls) == 1
    assert not _nvjpeg.preallocate(SimpleNamespace(), "h", "s", 256)
    assert not _nvjpeg.preallocate(SimpleNamespace(nvjpegDecodeBatchedPreAllocate=lambda *a: 2),
                                   "h", "s", 256)


def test_typing_skips_optional_functions_the_library_lacks():
    class Lib:
        def __init__(self, names):
            for name in names:
                setattr(self, name, type("F", (), {})())
    required = ["nvjpegCreateEx", "nvjpegDestroy", "nvjpegJpegStateCreate", "nvjpegJpegStateDestroy",
                "nvjpegDecodeBatchedInitialize", "nvjpegDecodeBatched", "nvjpegGetProperty"]
    old = _nvjpeg._typed(Lib(required))
    assert not hasattr(old, "nvjpegDecodeBatchedPreAllocate")
    new = _nvjpeg._typed(Lib(required + ["nvjpegDecodeBatchedPreAllocate"]))
    assert len(new.nvjpegDecodeBatchedPreAllocate.argtypes) == 7


def test_missing_library_names_the_extra(monkeypatch):
    monkeypatch.setattr(_nvjpeg, "_library", None)
    monkeypatch.setattr(_nvjpeg, "_library_candidates", lambda: ["/nonexistent/libnvjpeg.so.13"])
    with pytest.raises(_nvjpeg.NvJpegUnavailable, match=r"vidloader\[images-gpu\]"):
        _nvjpeg.load_library()


# -- on the GPU ------------------------------------------------------------------------------

def _within_tolerance(name: str, ref: np.ndarray, image: torch.Tensor) -> float:
    diff = np.abs(ref.astype(int) - image.cpu().numpy().astype(int))
    print(f"nvjpeg vs Pillow {name}: mean {diff.mean():.2f}, p99 {np.quantile(diff, 0.99):.0f}, "
          f"max {diff.max()}")
    if "cmyk" not in name:  # CMYK colour conversion differs between libraries
        assert diff.mean() < 3 and np.quantile(diff, 0.99) < 16, name
    return float(diff.mean())


@pytest.mark.cuda
def test_nvjpeg_decoder_within_tolerance_of_pillow(folder, sized_folder):  # noqa: F811
    """The stated tolerance of nvImageCodec's test (per image, of 255: mean absolute
    difference under 3, 99th percentile under 16; CMYK only printed), for nvJPEG's hardware
    decoder on the baseline colour files of both folders and nvImageCodec on the rest,
    through ``decode_packed``; the hardware decoder took the baseline colour files; chroma
    repeated (``fancy_upsampling=False``) is further from Pillow."""
    pytest.importorskip("nvidia.nvimgcodec")
    means = {}
    for fancy in (True, False):
        dec = NvJpegDecoder(torch.device("cuda"), fancy_upsampling=fancy)
        diffs = []
        for root, expect_hw in ((folder, 1), (sized_folder, 4)):
            ds = ImageFolder(root, num_workers=0, progress=False)
            paths = [ds.path(i) for i in range(len(ds))]
            before = dec.hardware_decoded
            packed = dec.decode_packed(paths, ds.sizes, cut_short=ds.cut_short.tolist())
            torch.cuda.synchronize()
            assert dec.hardware_decoded - before == expect_hw
            for i, image in enumerate(packed):
                name = os.path.basename(paths[i])
                if "truncated" in name or "not_an_image" in name:
                    assert image is None, name
                    continue
                mean = _within_tolerance(f"fancy={fancy} {name}", _reference(paths[i]), image) \
                    if fancy else float(np.abs(_reference(paths[i]).astype(int)
                                               - image.cpu().numpy().astype(int)).mean())
                if jpeg_header(Path(paths[i]).read_bytes()) and hardware_decodes(
                        jpeg_header(Path(paths[i]).read_bytes()), tuple(ds.sizes[i])):
                    diffs.append(mean)
        means[fancy] = float(np.mean(diffs))
        dec.close()
    print("mean difference of the hardware-decoded files, fancy / simple:", means)
    assert means[True] < means[False], means


@pytest.mark.cuda
@pytest.mark.parametrize("gpu_workers", [2, None], ids=["gpu-workers", "in-process-default"])
def test_loader_on_the_nvjpeg_engine_within_tolerance_of_pillow(folder, gpu_workers, monkeypatch):  # noqa: F811
    """The loader with ``PACKED_JPEG_ENGINE = "nvjpeg"``, in the GPU worker processes (the
    setting travels to them) and in the in-process pool: the same files as Pillow's loader,
    within the stated tolerance."""
    pytest.importorskip("nvidia.nvimgcodec")
    monkeypatch.setattr(_nvimgcodec, "PACKED_JPEG_ENGINE", "nvjpeg")
    assert isinstance(_nvimgcodec.gpu_image_decoder(torch.device("cuda")), NvJpegDecoder)
    ds = ImageFolder(folder, num_workers=0, progress=False)

    def by_index(**options):
        loader = ImageLoader(ds, batch_size=3, sampler=SequentialFrames(), on_error="skip", **options)
        out = {}
        for batch in loader:
            out.update(zip(batch["sample_index"].tolist(), batch["images"].cpu()))
        return out

    cpu = by_index(num_workers=0)
    gpu = by_index(decoder="nvimgcodec", device="cuda",
                   **({} if gpu_workers is None else {"num_workers": gpu_workers}))
    assert set(cpu) == set(gpu)
    for i, ref in cpu.items():
        name = os.path.basename(ds.path(i))
        if name.endswith(".png"):
            assert torch.equal(ref, gpu[i]), name
        else:
            _within_tolerance(name, ref.numpy(), gpu[i])


def test_an_exif_block_goes_to_hardware_only_where_the_index_says_upright(tmp_path, monkeypatch):
    """A baseline JPEG with an EXIF block: without the index's orientations it goes to
    nvImageCodec (it may need turning); with them, to the hardware decoder where its
    orientation is 1 (or 0: a tag with no orientation number, kept as stored), and to
    nvImageCodec where it must be turned. The pixels are Pillow's upright ones either way."""
    from vidloader.images._synthetic import natural_like

    rng = np.random.default_rng(4)
    (tmp_path / "a").mkdir()
    for name, orientation in (("0_upright.jpg", 1), ("1_flipped.jpg", 3)):
        exif = Image.Exif()
        exif[0x0112] = orientation
        Image.fromarray(natural_like(24, 40, rng)).save(tmp_path / "a" / name, quality=90, exif=exif)
    ds = ImageFolder(tmp_path, num_workers=0, progress=False)
    assert ds.orientations.tolist() == [1, 3]
    dec = _stand_in_decoder(monkeypatch)
    paths = [ds.path(i) for i in range(len(ds))]
    whole = dec.decode_files(paths)
    for orientations, expect_hw in ((None, 0), (ds.orientations.tolist(), 1), ([0, 3], 1)):
        hw = dec.hardware_decoded
        packed = dec.decode_packed(paths, ds.sizes, orientations=orientations)
        assert dec.hardware_decoded - hw == expect_hw, orientations
        assert all(torch.equal(a, b) for a, b in zip(whole, packed, strict=True))
        assert torch.equal(packed[1], torch.from_numpy(_reference(paths[1])))  # turned upright


def test_the_pools_give_the_index_orientations_to_decoders_that_take_them(folder):  # noqa: F811
    """``index_orientations``: the index's orientations for a decoder with
    ``takes_orientations``, none for one without or a dataset without one per image; the
    GPU workers' decode passes them on to ``decode_packed``."""
    from types import SimpleNamespace

    from vidloader.pipeline._image_decode import index_orientations
    from vidloader.pipeline._image_gpu_workers import decode_plan_files

    ds = ImageFolder(folder, num_workers=0, progress=False)
    taking = SimpleNamespace(takes_orientations=True)
    assert index_orientations(ds, taking) is ds.orientations
    assert index_orientations(ds, SimpleNamespace()) is None

    class Short(list):
        orientations = np.ones(2, np.int8)
    assert index_orientations(Short([0, 1, 2]), taking) is None

    got = {}

    class Recording:
        name, decodes_packed = "recording", True

        def decode(self, blobs):
            raise AssertionError("packed expected")

        def decode_packed(self, blobs, sizes, **options):
            got.update(options, count=len(blobs))
            return blobs

    paths = [ds.path(i) for i in range(3)]
    decode_plan_files(Recording(), paths, ds.sizes[:3], None, ds.orientations[:3])
    assert got == {"orientations": ds.orientations[:3].tolist(), "count": 3}


@pytest.mark.cuda
def test_back_to_back_batches_on_side_streams_equal_nvimgcodec(tmp_path):
    """Batches of 256 handed to nvJPEG one after another on one decoder (its states in turn)
    and on three decoders on three threads, each on a stream of its own, the sources
    overwritten as soon as each call returns (nvJPEG must have taken its copy) and the output
    read only after the reading stream waits for the decoding one: every image equals
    nvImageCodec's decode of the same file (both drive the hardware decoder). To see that it
    can fail, run it with ``_nvjpeg.STATES = 1`` and ``_next_state``'s wait removed."""
    pytest.importorskip("nvidia.nvimgcodec")
    import threading

    from vidloader.images._nvimgcodec import NvImageCodecDecoder
    from vidloader.images._synthetic import natural_like

    rng = np.random.default_rng(6)
    sizes = np.array([[int(rng.integers(300, 420)), int(rng.integers(400, 520))] for _ in range(48)])
    blobs = [_jpeg(natural_like(int(h), int(w), rng)) for h, w in sizes]  # ImageNet-like sizes
    device = torch.device("cuda")
    reference = NvImageCodecDecoder(device).decode(blobs)
    torch.cuda.synchronize()

    def run(decoder, order, out):
        side = torch.cuda.Stream(device)
        with torch.cuda.stream(side):
            for rows in order:
                sources = [np.frombuffer(blobs[r], np.uint8).copy() for r in rows]
                packed = decoder.decode_packed(sources, sizes[rows])
                for source in sources:
                    source[:] = 0  # nvJPEG copied them during the call
                out.append((rows, packed))
        torch.cuda.current_stream(device).wait_stream(side)

    orders = [[rng.integers(0, 48, 256) for _ in range(8)] for _ in range(4)]  # batches of 256
    one, many = [], [[] for _ in range(3)]
    run(NvJpegDecoder(device), orders[0], one)
    threads = [threading.Thread(target=run, args=(NvJpegDecoder(device), orders[k + 1], many[k]))
               for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for rows, packed in one + [x for m in many for x in m]:
        assert isinstance(packed, PackedImages)
        for r, image in zip(rows.tolist(), packed):
            assert torch.equal(image, reference[r]), r

"""Mixed codecs on the GPU machine: what NVDEC decodes, and how its frames compare to the CPU's.

Generates (with PyAV, no FFmpeg binary) one short 1080p clip per kind of video a mixed dataset
holds: H.264 8-bit and High 10, HEVC Main / Main 10 / 12-bit / 4:4:4, AV1 8/10-bit, VP9 8-bit
(and 10-bit where this PyAV's libvpx encodes it), and a 128×128 HEVC. Then:

1. prints ``GetDecoderCaps`` for every codec × chroma × bit depth (raw dicts in the JSON);
2. routes every file with ``nvdec_decodability`` (driver caps, and the generation table for
   comparison) and prints the reason for each file NVDEC does not take;
3. decodes every frame of each file through the NVDEC executor and the CPU executor:
   NVDEC planes against FFmpeg's (NV12, or P016 = FFmpeg's samples shifted, bit for bit) and
   RGB at 224×224 (PSNR, max |diff|), plus NVDEC and CPU decode rates;
4. writes everything to ``--out`` (JSON). Refused files are decoded on the CPU only.

Usage (device): ``PYTHONPATH=$PWD/src:$PWD/.site python3 benchmarks/gpu_codecs.py --out $OUT/gpu_codecs.json``
(``bash benchmarks/gpu_codecs.sh`` does that, with the GPU tests of the new codecs). ~2 min.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch

from vidloader.decoding.cpu import CpuExecutor
from vidloader.decoding.cpu._frame import CpuFrame
from vidloader.index import probe_video
from vidloader.planning import plan_tasks_for_frames
from vidloader.processing._nv12 import i420_to_nv12, to_p016
from vidloader.synthetic import VideoSpec, make_dataset

HD = dict(width=1920, height=1080, num_frames=16, gop=8)

#: name -> spec. 10-bit VP9 is added where libvpx can encode it.
SPECS = {
    "h264_8bit": VideoSpec(codec="h264", bframes=2, seed=1, **HD),
    "h264_high10": VideoSpec(codec="h264", bframes=2, pix_fmt="yuv420p10le", seed=2, **HD),
    "hevc_main": VideoSpec(codec="hevc", bframes=2, seed=3, **HD),
    "hevc_main10": VideoSpec(codec="hevc", bframes=2, pix_fmt="yuv420p10le", seed=4, **HD),
    "hevc_12bit": VideoSpec(codec="hevc", bframes=0, pix_fmt="yuv420p12le", seed=5, **HD),
    "hevc_444": VideoSpec(codec="hevc", bframes=0, pix_fmt="yuv444p", seed=6, **HD),
    "hevc_128x128": VideoSpec(codec="hevc", width=128, height=128, num_frames=16, gop=8, bframes=0, seed=7),
    "av1_8bit": VideoSpec(codec="av1", seed=8, **HD),
    "av1_10bit": VideoSpec(codec="av1", pix_fmt="yuv420p10le", seed=9, **HD),
    "vp9_8bit": VideoSpec(codec="vp9", seed=10, **HD),
}
#: The caps asked of the driver: every codec vidloader demuxes, every chroma and depth.
CAPS_GRID = [(c, ch, b) for c in ("h264", "hevc", "av1", "vp9") for ch in ("420", "422", "444")
             for b in (8, 10, 12)]
SIZE = (224, 224)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * float(np.log10(255.0**2 / mse))


def surface_of(frame) -> np.ndarray:
    """What NVDEC outputs for an FFmpeg-decoded frame: NV12, or P016 for 10/12-bit."""
    bits = frame.format.components[0].bits
    if bits <= 8:
        return i420_to_nv12(frame.to_ndarray(format="yuv420p"))
    y, u, v = CpuFrame(frame, None, "BILINEAR", 0).planes()
    w = y.shape[1]
    return to_p016(i420_to_nv12(np.concatenate([y, u.reshape(-1, w), v.reshape(-1, w)])), bits)


def environment() -> dict:
    import av

    env = {"python": platform.python_version(), "torch": torch.__version__, "av": av.__version__,
           "ffmpeg": {k: ".".join(map(str, v)) for k, v in av.library_versions.items()}}
    try:
        import PyNvVideoCodec as nvc

        env["PyNvVideoCodec"] = getattr(nvc, "__version__", "?")
    except Exception as exc:
        env["PyNvVideoCodec"] = f"unavailable: {exc}"
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["capability"] = list(torch.cuda.get_device_capability(0))
    return env


def generate(root: Path) -> dict[str, Path]:
    import av

    specs = dict(SPECS)
    if "yuv420p10le" in {f.name for f in av.Codec("libvpx-vp9", "w").video_formats}:
        specs["vp9_10bit"] = dataclasses.replace(specs["vp9_8bit"], pix_fmt="yuv420p10le", seed=11)
    else:
        print("vp9_10bit: skipped, this PyAV's libvpx does not encode 10-bit", flush=True)
    t0 = time.perf_counter()
    paths = make_dataset(root, list(specs.values()), names=[f"{n}.mp4" for n in specs],
                         num_workers=min(len(specs), 16))
    print(f"generated {len(specs)} files in {time.perf_counter() - t0:.1f} s", flush=True)
    return dict(zip(specs, paths))


def raw_caps(nvc) -> list[dict]:
    """GetDecoderCaps for every (codec, chroma, depth), raw."""
    from vidloader.decoding.nvdec._caps import NVDEC_CODECS, _chroma_enum

    out = []
    for codec, chroma, bits in CAPS_GRID:
        try:
            raw = dict(nvc.GetDecoderCaps(gpuid=0, codec=getattr(nvc.cudaVideoCodec, NVDEC_CODECS[codec]),
                                          chromaformat=_chroma_enum(nvc, chroma), bitdepth=bits))
        except Exception as exc:
            raw = {"error": repr(exc)}
        out.append({"codec": codec, "chroma": chroma, "bits": bits, **{k: (int(v) if isinstance(v, (int, np.integer)) else v) for k, v in raw.items()}})
    return out


def record_dlpack_facts(facts: dict) -> None:
    """Note what DLPack gives for the first NV12 and the first P016 frame (dtype, shape, strides)."""
    import vidloader.decoding.nvdec._decoder as dec

    original = dec.nv12_view

    def spy(frame, height, width, device, **kw):
        key = "p016" if kw.get("deep") else "nv12"
        if key not in facts:
            try:
                t = torch.from_dlpack(frame)
                facts[key] = {"dtype": str(t.dtype), "shape": list(t.shape), "stride": list(t.stride()),
                              "format": str(getattr(frame, "format", "?")), "picture": [height, width]}
            except Exception as exc:
                facts[key] = {"error": repr(exc), "format": str(getattr(frame, "format", "?"))}
        return original(frame, height, width, device, **kw)

    dec.nv12_view = spy


def decode_nvdec(ex, record, frames) -> tuple[dict, float]:
    task = plan_tasks_for_frames(0, record, frames)
    out = {}
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    ex.decode(task, lambda i, f: out.__setitem__(i, (f.planes(), f.to_rgb(SIZE))))
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    return {i: (p.cpu().numpy(), rgb.cpu().numpy()) for i, (p, rgb) in out.items()}, dt


def decode_cpu(record, frames) -> tuple[dict, float]:
    task = plan_tasks_for_frames(0, record, frames)
    out = {}
    t0 = time.perf_counter()
    with CpuExecutor() as ex:
        ex.decode(task, lambda i, f: out.__setitem__(i, f.to_rgb(SIZE)))
    return out, time.perf_counter() - t0


def reference_surfaces(path: Path) -> list[np.ndarray]:
    import av

    with av.open(str(path)) as c:
        frames = sorted(c.decode(video=0), key=lambda f: f.pts)
    return [surface_of(f) for f in frames]


def check_file(name: str, path: Path, record, decodable: bool, reason, ex) -> dict:
    frames = np.arange(record.num_frames)
    res: dict = {"file": name, "codec": record.codec, "profile": record.profile,
                 "bit_depth": record.bit_depth, "chroma": record.chroma_format,
                 "coded": [record.coded_width, record.coded_height], "nvdec": decodable, "reason": reason}
    cpu, cpu_s = decode_cpu(record, frames)
    res["cpu_fps"] = round(len(frames) / cpu_s, 1)
    if not decodable or ex is None:
        return res
    decode_nvdec(ex, record, frames[:2])  # warm-up: decoder creation, caps
    got, nv_s = decode_nvdec(ex, record, frames)
    res["nvdec_fps"] = round(len(frames) / nv_s, 1)
    refs = reference_surfaces(path)
    res["planes_exact"] = all(np.array_equal(got[i][0], refs[i]) for i in frames.tolist())
    res["planes_dtype"] = str(got[0][0].dtype)
    a = np.stack([got[i][1] for i in frames.tolist()])
    b = np.stack([cpu[i] for i in frames.tolist()])
    res["psnr_224"] = round(psnr(a, b), 2)
    res["max_abs_diff_224"] = int(np.abs(a.astype(int) - b).max())
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("gpu_codecs.json"))
    ap.add_argument("--data", type=Path, default=None, help="where to generate the clips")
    ap.add_argument("--small", action="store_true", help="320x180 clips (a dry run of the script)")
    args = ap.parse_args()
    if args.small:
        for name, spec in SPECS.items():
            if spec.width > 128:
                SPECS[name] = dataclasses.replace(spec, width=320, height=180)
    result: dict = {"environment": environment(), "files": [], "errors": []}

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=str))

    print(json.dumps(result["environment"]), flush=True)
    root = args.data or Path(tempfile.mkdtemp(prefix="gpu_codecs_"))
    paths = generate(root)
    records = {n: probe_video(p) for n, p in paths.items()}

    from vidloader.decoding.nvdec import nvdec_decodability, query_nvdec_caps, table_nvdec_caps
    from vidloader.decoding.nvdec._caps import gpu_generation
    from vidloader.decoding.nvdec._executor import NvdecExecutor, load_pynvvideocodec

    ex, caps = None, None
    try:
        nvc = load_pynvvideocodec()
        t0 = time.perf_counter()
        result["caps_raw"] = raw_caps(nvc)
        result["caps_seconds"] = round(time.perf_counter() - t0, 2)
        caps = query_nvdec_caps(nvc, gpu=0, queries=CAPS_GRID)
        print("\n".join(caps.describe()), flush=True)
        result["caps"] = caps.describe()
        facts: dict = {}
        record_dlpack_facts(facts)
        result["dlpack"] = facts
        ex = NvdecExecutor(frame_cache_bytes=0, packet_cache_bytes=0, caps=caps)
    except Exception:
        result["errors"].append({"stage": "nvdec setup", "error": traceback.format_exc()})
        print(result["errors"][-1]["error"], flush=True)
    save()

    names = list(records)
    recs = [records[n] for n in names]
    if caps is not None:
        mask, reasons = nvdec_decodability(recs, caps)
        table = table_nvdec_caps(gpu_generation(caps.gpu, torch.cuda.get_device_capability(0)))
        table_mask, table_reasons = nvdec_decodability(recs, table)
        result["table_disagrees"] = [
            {"file": n, "driver": why, "table": twhy}
            for n, ok, tok, why, twhy in zip(names, mask, table_mask, reasons, table_reasons) if ok != tok
        ]
    else:
        mask, reasons = np.zeros(len(names), bool), ["no NVDEC here"] * len(names)
    for name, ok, why in zip(names, mask.tolist(), reasons):
        try:
            res = check_file(name, paths[name], records[name], ok, why, ex)
        except Exception:
            res = {"file": name, "nvdec": ok, "reason": why, "error": traceback.format_exc()}
        result["files"].append(res)
        line = {k: v for k, v in res.items() if k != "error"}
        print(json.dumps(line), flush=True)
        if "error" in res:
            print(res["error"], flush=True)
        save()
    taken = sum(r["nvdec"] for r in result["files"])
    result["split"] = {"nvdec": taken, "cpu": len(result["files"]) - taken}
    print(f"split: {taken} files on NVDEC, {len(result['files']) - taken} on the CPU", flush=True)
    if ex is not None:
        ex.close()
    save()


if __name__ == "__main__":
    main()

"""Builds session 20's patched copies of ``src/vidloader`` under ``.variants/`` (git-ignored),
for ``session20_jpeg_inprocess.sh`` (issue 15: can the in-process pool, ``num_workers=0``, be
lifted by changing its decoder?):

- ``bytes``: ``NvImageCodecDecoder.decode_files`` renamed away, so ``BatchDecodePool`` reads
  each batch's files on its reader threads and calls ``decode(bytes)``; the worker processes
  read the files with ``open().read()`` and call ``decode`` too;
- ``bytes-lean``: as ``bytes``, with nvImageCodec's decoder built with its defaults (no
  backends list, default CPU threads) and ``DecodeParams(apply_exif_orientation=False,
  color_spec=SRGB)``;
- ``tv``: as ``bytes``, with the pools' decoder replaced by torchvision's
  ``decode_jpeg(list, device="cuda")`` on the whole batch (nvImageCodec, then Pillow, for what
  it fails on).

Usage: ``python3 benchmarks/diag/session20_make_variants.py`` (from the repository root).
"""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "vidloader"

TV_MODULE = '''"""Session 20 variant: batched JPEG decoding by torchvision's nvJPEG binding
(``decode_jpeg(list, device="cuda")``), one call a batch; what it fails on goes to
nvImageCodec (then Pillow)."""

from __future__ import annotations

import warnings

import torch

from ._nvimgcodec import NvImageCodecDecoder

warnings.filterwarnings("ignore", message="The given buffer is not writable")


class TorchvisionJpegDecoder:
    """``decode(list[bytes | None]) -> list[Tensor | None]``: RGB uint8 ``[H, W, 3]`` CUDA
    tensors (no EXIF orientation), ordered on torch's current stream (torchvision decodes on
    a stream of its own and makes the current stream wait for it)."""

    name = "nvimgcodec"
    decodes_regions = False

    def __init__(self, device: torch.device, *, hw_load: float | None = None) -> None:
        from torchvision.io import ImageReadMode, decode_jpeg

        device = torch.device(device)
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self._decode_jpeg = decode_jpeg
        self._rgb = ImageReadMode.RGB
        self._fallback = None
        self.cpu_fallbacks = 0
        self.fallbacks = 0

    def _batch(self, tensors: list) -> list:
        return self._decode_jpeg(tensors, mode=self._rgb, device=self.device)

    def decode(self, blobs: list) -> list:
        out: list = [None] * len(blobs)
        todo = [i for i, b in enumerate(blobs) if b]
        if not todo:
            return out
        tensors = [torch.frombuffer(blobs[i], dtype=torch.uint8) for i in todo]
        failed = []
        try:
            chw = self._batch(tensors)
        except Exception:  # noqa: BLE001 - one bad blob fails the batch: one at a time
            chw = None
        if chw is not None:
            # torchvision gives [3, H, W]: one transposing copy of the whole batch into a
            # single [pixels, 3] buffer, each image a contiguous HWC view of it (the
            # augmentation's gather then needs no per-image copy).
            flat = torch.cat([x.reshape(3, -1) for x in chw], dim=1).t().contiguous()
            parts = flat.split([x.shape[1] * x.shape[2] for x in chw])
            for i, x, part in zip(todo, chw, parts):
                out[i] = part.view(x.shape[1], x.shape[2], 3)
        else:
            for i, t in zip(todo, tensors):
                try:
                    out[i] = self._batch([t])[0].permute(1, 2, 0).contiguous()
                except Exception:  # noqa: BLE001
                    failed.append(i)
        if failed:
            if self._fallback is None:
                self._fallback = NvImageCodecDecoder(self.device)
            again = self._fallback.decode([blobs[i] for i in failed])
            self.fallbacks += len(failed)
            for i, image in zip(failed, again):
                out[i] = image
        return out
'''


def _sub(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new))


def _copy(name: str) -> Path:
    dest = REPO / ".variants" / name
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    shutil.copytree(SRC, dest / "vidloader", ignore=shutil.ignore_patterns("__pycache__"))
    return dest / "vidloader"


def _bytes(pkg: Path) -> None:
    _sub(pkg / "images" / "_nvimgcodec.py", "    def decode_files(self,", "    def _decode_files_off(self,")
    workers = pkg / "pipeline" / "_image_gpu_workers.py"
    _sub(workers, "from ._image_fill import fill_from_images, fill_task_messages",
         "from ._image_fill import fill_from_images, fill_task_messages, read_file")
    _sub(workers, "        images = decoder.decode_files(paths)",
         "        images = decoder.decode([read_file(p) for p in paths])")


def main() -> int:
    pkg = _copy("bytes")
    _bytes(pkg)

    pkg = _copy("bytes-lean")
    _bytes(pkg)
    nv = pkg / "images" / "_nvimgcodec.py"
    _sub(nv, """        self._decoder = nvimgcodec.Decoder(device_id=self.device.index or 0, backends=backends,
                                           max_num_cpu_threads=CPU_THREADS)""",
         """        del backends  # session 20, bytes-lean: nvImageCodec's default backends and threads
        self._decoder = nvimgcodec.Decoder(device_id=self.device.index or 0)""")
    _sub(nv, "DecodeParams(apply_exif_orientation=True, color_spec=spec,\n"
             "                                               allow_any_depth=False)",
         "DecodeParams(apply_exif_orientation=False, color_spec=spec)")

    pkg = _copy("tv")
    _bytes(pkg)
    (pkg / "images" / "_tvjpeg.py").write_text(TV_MODULE)
    _sub(pkg / "pipeline" / "_image_decode.py",
         "        from ..images._nvimgcodec import NvImageCodecDecoder\n",
         "        from ..images._tvjpeg import TorchvisionJpegDecoder as NvImageCodecDecoder\n")
    _sub(pkg / "pipeline" / "_image_gpu_workers.py",
         "    from ..images._nvimgcodec import NvImageCodecDecoder\n",
         "    from ..images._tvjpeg import TorchvisionJpegDecoder as NvImageCodecDecoder\n")
    print("variants: bytes, bytes-lean, tv under", REPO / ".variants")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

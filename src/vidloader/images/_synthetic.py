"""Generated image datasets for tests, the demo and the benchmark: CIFAR files in the official
layouts, and JPEG folders of ImageNet-like files (about 500×375, quality 90)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np

from .._utils._files import link_or_copy

_CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                    "ship", "truck"]


def cifar_like_pixels(count: int, seed: int = 0, *, learnable: bool = False
                      ) -> tuple[np.ndarray, np.ndarray]:
    """uint8 ``[count, 32, 32, 3]`` smooth random images and int64 labels in 0..9. With
    ``learnable``, each class has its own colour (three fifths of every block's value), so a model
    can learn the labels; otherwise labels and pixels are independent."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, size=(count, 4, 4, 3)).astype(np.float32)
    if learnable:
        labels = rng.integers(0, 10, size=count).astype(np.int64)
        colours = np.random.default_rng(10).integers(0, 256, size=(10, 3)).astype(np.float32)
        coarse = (2 * coarse + 3 * colours[labels][:, None, None, :]) / 5
    # Nearest 8x upsampling plus noise: distinct blocks make crops and flips easy to check.
    pixels = np.repeat(np.repeat(coarse, 8, axis=1), 8, axis=2)
    pixels += rng.normal(0, 8, size=pixels.shape)
    if not learnable:  # drawn after the pixels, as before learnable existed: same values
        labels = rng.integers(0, 10, size=count).astype(np.int64)
    return pixels.clip(0, 255).astype(np.uint8), labels


def _planar(pixels: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(pixels.transpose(0, 3, 1, 2).reshape(len(pixels), -1))


def write_cifar10(root: str | os.PathLike, *, num_train: int = 500, num_test: int = 100,
                  fmt: str = "py", seed: int = 0, learnable: bool = False) -> Path:
    """Write ``root/cifar-10-batches-py/`` (``fmt="py"``: five training pickles, a test
    pickle, ``batches.meta``, protocol 2 with bytes keys as the official files) or
    ``root/cifar-10-batches-bin/`` (``fmt="bin"``), of :func:`cifar_like_pixels` (with
    ``learnable``: labels a model can learn). Returns that folder."""
    folder = Path(root) / ("cifar-10-batches-py" if fmt == "py" else "cifar-10-batches-bin")
    folder.mkdir(parents=True, exist_ok=True)
    pixels, labels = cifar_like_pixels(num_train + num_test, seed, learnable=learnable)
    train = np.array_split(np.arange(num_train), 5)
    parts = {f"data_batch_{i + 1}": idx for i, idx in enumerate(train)}
    parts["test_batch"] = np.arange(num_train, num_train + num_test)
    for stem, idx in parts.items():
        if fmt == "py":
            batch = {b"batch_label": stem.encode(), b"labels": labels[idx].tolist(),
                     b"data": _planar(pixels[idx]),
                     b"filenames": [f"{i}.png".encode() for i in idx]}
            (folder / stem).write_bytes(pickle.dumps(batch, protocol=2))
        else:
            rows = np.concatenate([labels[idx, None].astype(np.uint8), _planar(pixels[idx])], axis=1)
            rows.tofile(folder / f"{stem}.bin")
    if fmt == "py":
        meta = {b"label_names": [c.encode() for c in _CIFAR10_CLASSES], b"num_vis": 3072}
        (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    else:
        (folder / "batches.meta.txt").write_text("\n".join(_CIFAR10_CLASSES) + "\n")
    return folder


def natural_like(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 ``[height, width, 3]``: smooth colour fields plus fine noise, which JPEG at
    quality 90 compresses to roughly ImageNet's bytes per pixel."""
    return _render(*_draws(height, width, rng), height, width)


def _draws(height: int, width: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """:func:`natural_like`'s random numbers, in its order: the colour field's coarse grid
    and the noise."""
    small = rng.integers(0, 256, size=(height // 16 + 1, width // 16 + 1, 3), dtype=np.uint8)
    noise = rng.normal(0, 8, size=(height, width, 1)).astype(np.float32)
    return small, noise


def _render(small: np.ndarray, noise: np.ndarray, height: int, width: int) -> np.ndarray:
    """:func:`natural_like`'s image from its draws (Pillow's resize lets go of the GIL)."""
    from PIL import Image

    smooth = np.asarray(Image.fromarray(small).resize((width, height), Image.BICUBIC), np.float32)
    return (smooth + noise).clip(0, 255).astype(np.uint8)


def _render_and_save(draws, size: tuple[int, int], path: Path, quality: int) -> None:
    from PIL import Image

    Image.fromarray(_render(*draws, *size)).save(path, quality=quality)


def write_image_folder(root: str | os.PathLike, *, num_classes: int = 4, per_class: int = 8,
                       size: tuple[int, int] = (375, 500), quality: int = 90,
                       seed: int = 0, copies: int = 1) -> Path:
    """Write ``root/class_<k>/img_<i>.jpg`` baseline JPEGs of ``size`` (height, width).

    ``copies`` > 1 adds ``img_<i>_c<c>.jpg`` hard links to each (copies where the file system
    has no links): a folder ``copies`` times larger for the cost of generating one, so a
    benchmark's epochs are long enough to time the loader between epoch boundaries.

    The random numbers are drawn in order on this thread (the files are the same whatever the
    machine); the resizing and JPEG encoding run on a few threads (about 3× faster on 16
    cores: the benchmarks generate 4,000 files on the GPU machine)."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(seed)
    root = Path(root)
    threads = max(1, min(8, (os.cpu_count() or 1) - 1))
    written = []
    with ThreadPoolExecutor(threads) as pool:
        pending: list = []
        for k in range(num_classes):
            folder = root / f"class_{k:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                path = folder / f"img_{i:05d}.jpg"
                written.append(path)
                if path.exists():
                    continue
                pending.append(pool.submit(_render_and_save, _draws(*size, rng), size, path, quality))
                if len(pending) >= 4 * threads:  # bounded: each job holds ~1 MB of noise
                    pending.pop(0).result()
        for job in pending:
            job.result()
    for path in written:
        for c in range(1, copies):
            link_or_copy(path, path.with_name(f"{path.stem}_c{c}.jpg"))
    return root

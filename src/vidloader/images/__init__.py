"""Images through the video pipeline's samplers and loader: CIFAR held in memory, and JPEG/PNG
folders decoded by Pillow (CPU workers) or nvImageCodec (GPU), augmented in torch.

Typical use::

    import vidloader
    from vidloader.images import CIFAR10, ImageProcess

    loader = vidloader.ImageLoader(CIFAR10("data/"), batch_size=256, device="cuda",
                                   processing=ImageProcess(crop="random", padding=4,
                                                           random_flip=True, dtype="float32",
                                                           normalized=True, layout="chw"))

Each image is a one-frame "video" to the samplers (``num_frames`` is all ones), so
``RandomFrames``, ``SequentialFrames``, sharding and resume are the video ones.
"""

from .._utils._lazy import lazy_exports

_HOMES = {
    "CIFAR10": "._cifar",
    "CIFAR100": "._cifar",
    "ImageDataset": "._dataset",
    "ImageFiles": "._folder",
    "ImageFolder": "._folder",
    "ImageProcess": "._spec",
    "InMemoryImages": "._dataset",
    "decode_image": "._pillow",
}

__all__ = [
    "CIFAR10",
    "CIFAR100",
    "ImageDataset",
    "ImageFiles",
    "ImageFolder",
    "ImageProcess",
    "InMemoryImages",
    "decode_image",
]
assert sorted(__all__) == __all__
assert sorted(_HOMES) == __all__

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

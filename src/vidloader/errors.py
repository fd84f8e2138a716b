"""The exception hierarchy of vidloader.

Every class inherits :class:`VidloaderError` *and* the closest builtin, so callers can catch
either (``except ValueError`` keeps working). Messages name the file, the value and the fix.
This module imports nothing else from the package.
"""

from __future__ import annotations


class VidloaderError(Exception):
    """Root of every error raised by vidloader."""


class ConfigError(VidloaderError, ValueError):
    """An argument or option has a value vidloader cannot use."""


class IndexFormatError(VidloaderError, ValueError):
    """An index file on disk is not a vidloader index, or is of an unknown version."""


class MediaError(VidloaderError):
    """A media file could not be used. ``path`` names the file."""

    def __init__(self, path: str, message: str) -> None:
        self.path = str(path)
        super().__init__(f"{self.path}: {message}")

    def __reduce__(self):  # keep picklable across worker processes
        return (type(self), (self.path, str(self).split(": ", 1)[-1]))


class CorruptVideoError(MediaError, ValueError):
    """A file is not a readable video: empty, truncated, corrupt, or not a video at all."""


class PathOutsideRootError(VidloaderError, PermissionError):
    """An index (a saved ``.npz`` or NVIDIA's JSON) names a file outside its own folder
    (``..`` or an absolute path elsewhere) and the caller did not allow it
    (``allow_outside_root=``)."""


class StaleIndexError(CorruptVideoError):
    """A file changed after it was indexed (its size or modification time differ from the
    index's): the index's frame table no longer describes it. Re-index the file. A
    :class:`CorruptVideoError`, since the file is not the video the index describes."""


class VideoNotFoundError(MediaError, FileNotFoundError):
    """A video path does not exist."""


class UnsupportedCodecError(MediaError, LookupError):
    """A backend cannot decode this codec, profile or pixel format."""


class FrameIndexError(VidloaderError, IndexError):
    """A frame number outside ``[0, num_frames)`` of a video."""


class BackendUnavailableError(VidloaderError, ImportError):
    """An optional backend (its Python package, or a GPU) is missing."""


class GpuMemoryError(VidloaderError, MemoryError):
    """The GPU ran out of memory while vidloader allocated on it (staging slots, NVDEC
    decoder surfaces, decoded frames, colour conversion). Not a bad file: raised whatever
    ``on_error`` says, after the loader has stopped its workers and threads and freed its GPU
    memory, so the loader can be iterated again once memory is free. The message names what
    was being allocated, how much was free and the fixes.

    Attributes:
        what: what was being allocated.
        device: the GPU (``"cuda:N"``), or ``None`` if unknown.
        free_bytes, total_bytes: ``torch.cuda.mem_get_info`` when it failed (``None`` if
            that could not be read).
    """

    def __init__(self, message: str, *, what: str = "", device: str | None = None,
                 free_bytes: int | None = None, total_bytes: int | None = None) -> None:
        super().__init__(message)
        self.what, self.device = what, device
        self.free_bytes, self.total_bytes = free_bytes, total_bytes


class WorkerError(VidloaderError, RuntimeError):
    """A loader worker failed. The message carries the worker's traceback and the file."""

    def __init__(self, message: str, *, path: str | None = None, remote_traceback: str = "") -> None:
        self.path = path
        self.remote_traceback = remote_traceback
        text = message
        if path:
            text += f" (file: {path})"
        if remote_traceback:
            text += "\n\n--- traceback in the worker ---\n" + remote_traceback
        super().__init__(text)


class CorruptImageError(MediaError, ValueError):
    """An image file cannot be decoded: truncated, corrupt, or not an image."""


class DatasetFormatError(MediaError, ValueError):
    """A dataset file (a CIFAR batch, ...) is not in the format it should be, or holds
    something vidloader refuses to read (a pickle that would run code)."""

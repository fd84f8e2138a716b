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

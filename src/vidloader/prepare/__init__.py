"""Re-encode a dataset into a loader-friendly form: ``vidloader prepare SRC DST --gop N``.

Random access decodes from the keyframe before each wanted frame, so it costs about half a
GOP of decoding per frame; short closed GOPs without B-frames make it cheap, at some disk cost.
"""

from ._dataset import PrepareReport, merge_reports, prepare_dataset, write_report
from ._transcode import FileChange, PrepareOptions, output_size

__all__ = [
    "FileChange",
    "PrepareOptions",
    "PrepareReport",
    "merge_reports",
    "output_size",
    "prepare_dataset",
    "write_report",
]

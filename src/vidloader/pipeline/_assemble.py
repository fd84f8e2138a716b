"""Fill a batch's staging buffers from decoded frames: the glue between planner, executor and
processing. Runs in a CPU worker (numpy views of shared memory) or beside an NVDEC executor
(torch CUDA tensors); it only slices and assigns, so both work.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict

import numpy as np

from ..decoding import Executor
from ..errors import MediaError
from ..index import VideoIndex
from ..planning import plan_tasks
from ..processing import Geometry, Process, apply_window, geometry, sample_transform
from ..sampling import BatchPlan

log = logging.getLogger(__name__)


@dataclasses.dataclass
class FillResult:
    """Which samples of the batch were filled, and the files that failed."""

    valid: np.ndarray
    errors: list[tuple[str, str]]


def slots_by_frame(plan: BatchPlan) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """``(video, frame) -> [(sample, t), ...]``: every place a decoded frame must go."""
    slots: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    videos = plan.video_indices.tolist()
    for b, frames in enumerate(plan.frame_indices.tolist()):
        for t, f in enumerate(frames):
            slots[(videos[b], f)].append((b, t))
    return slots


class BatchAssembler:
    """Decodes a :class:`BatchPlan` with an executor into per-output staging buffers.

    Args:
        index: the dataset index.
        outputs: ``{name: Process}``.
        executor: the decoding backend.
        on_error: ``"raise"`` propagates a bad file's error; ``"skip"`` marks its samples
            invalid, logs and counts them.
    """

    def __init__(
        self, index: VideoIndex, outputs: dict[str, Process], executor: Executor, *, on_error: str
    ) -> None:
        self.index, self.outputs, self.executor, self.on_error = index, outputs, executor, on_error
        self._geometry: dict[tuple[str, int], Geometry] = {}

    def geometry(self, name: str, video: int) -> Geometry:
        key = (name, video)
        if key not in self._geometry:
            rec = self.index[video]
            self._geometry[key] = geometry(self.outputs[name], rec.height, rec.width, path=rec.path)
        return self._geometry[key]

    def fill(self, plan: BatchPlan, staging: dict) -> FillResult:
        """Decode ``plan`` and write each output's frames into ``staging[name][b, slot]``."""
        self._clear_unmapped_slots(plan, staging)
        slots = slots_by_frame(plan)
        transforms = self._sample_transforms(plan)
        valid = np.ones(plan.batch_size, bool)
        errors: list[tuple[str, str]] = []
        for task in plan_tasks(plan, self.index):
            sink = self._sink(task.video_index, slots, transforms, staging)
            try:
                self.executor.decode(task, sink)
            except MediaError as exc:
                if self.on_error == "raise":
                    raise
                log.warning("skipping %s: %s", exc.path, exc)
                valid[plan.video_indices == task.video_index] = False
                errors.append((exc.path, str(exc)))
        return FillResult(valid, errors)

    def _sample_transforms(self, plan: BatchPlan) -> dict:
        videos, seeds = plan.video_indices.tolist(), plan.sample_seeds.tolist()
        return {
            name: [
                sample_transform(proc, self.geometry(name, v), s) for v, s in zip(videos, seeds)
            ]
            for name, proc in self.outputs.items()
        }

    def _sink(self, video: int, slots, transforms, staging):
        outputs = self.outputs

        def sink(frame_index: int, frame) -> None:
            rgb_by_size: dict[tuple[int, int], object] = {}
            for b, t in slots[(video, frame_index)]:
                for name, proc in outputs.items():
                    slot = proc.slots(t)
                    if slot < 0:
                        continue
                    geom = self.geometry(name, video)
                    rgb = rgb_by_size.get(geom.decode_hw)
                    if rgb is None:
                        rgb = rgb_by_size[geom.decode_hw] = frame.to_rgb(geom.decode_hw)
                    staging[name][b, slot] = apply_window(rgb, geom, transforms[name][b])

        return sink

    def _clear_unmapped_slots(self, plan: BatchPlan, staging: dict) -> None:
        # index_map may leave output slots that no clip frame fills: keep them zero, since
        # staging buffers are reused across batches.
        for name, proc in self.outputs.items():
            if proc.index_map is None:
                continue
            used = {s for s in proc.index_map if s >= 0}
            for slot in range(proc.frames_out(plan.sequence_length)):
                if slot not in used:
                    staging[name][: plan.batch_size, slot] = 0

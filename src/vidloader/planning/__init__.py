"""Planning layer: batch plans → decode tasks (GOP grouping) and where each frame goes."""

from ._delivery import DeliveryMap, delivery_map
from ._planner import (
    estimated_decode_cost,
    group_frames,
    plan_tasks,
    plan_tasks_for_frames,
)

__all__ = [
    "DeliveryMap",
    "delivery_map",
    "estimated_decode_cost",
    "group_frames",
    "plan_tasks",
    "plan_tasks_for_frames",
]

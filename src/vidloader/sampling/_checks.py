"""Argument checks shared by the samplers: each failure is a ConfigError naming value and fix."""

from __future__ import annotations

from .._utils._args import check_bool, check_int, check_optional_int
from ..errors import ConfigError

__all__ = ["check_bool", "check_int", "check_optional_int", "check_plan_args"]


def check_plan_args(
    epoch: int, batch_size: int, rank: int, world_size: int, drop_last: bool
) -> tuple[int, int, int, int, bool]:
    """Validate the arguments every ``plan_epoch`` takes; ConfigError naming the bad one."""
    epoch = check_int("epoch", epoch, minimum=0)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    world_size = check_int("world_size", world_size, minimum=1)
    rank = check_int("rank", rank, minimum=0)
    if rank >= world_size:
        raise ConfigError(f"rank={rank} is not below world_size={world_size}")
    return epoch, batch_size, rank, world_size, check_bool("drop_last", drop_last)

"""Entry point of the ``vidloader`` command: ``demo``, ``index``, ``info``, ``bench``, ``prepare``.

Building the parser imports no torch (each subcommand imports what it runs), so that
``vidloader --help`` and ``vidloader info FILE`` start in well under a second.
"""

from __future__ import annotations

import argparse
import logging
import sys

from ..bench._cli import register_bench
from ..errors import VidloaderError
from ._demo import register_demo
from ._index import register_index
from ._info import register_info
from ._prepare import register_prepare

#: Each entry adds one subcommand to the parser (litData's registry pattern).
COMMAND_REGISTRY = [register_demo, register_index, register_info, register_bench, register_prepare]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vidloader", description="Fast, exact video loading for PyTorch training."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", required=True)
    for register in COMMAND_REGISTRY:
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except VidloaderError as exc:
        print(f"vidloader {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

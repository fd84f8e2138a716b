"""``python -m vidloader.bench``: the ``vidloader bench`` subcommand on its own."""

from __future__ import annotations

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())

"""``python -m vidloader``: the ``vidloader`` command, where the package is on ``PYTHONPATH``
but not installed (no console script)."""

from vidloader.cli.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main())

"""Print the README's performance section from every ``vidloader bench`` JSON under
``benchmarks/results`` (every figure links to the JSON it comes from).

Usage: ``python benchmarks/readme_table.py [--results DIR] [--base DIR] > section.md``;
``--base`` is the directory of the README the section goes into (default: the repository root).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vidloader.bench._markdown import load_reports, markdown_section

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--base", default=str(ROOT), help="directory of the README (links start here)")
    p.add_argument("--heading", default="## Performance")
    args = p.parse_args(argv)
    reports = load_reports(args.results)
    if not reports:
        print(f"no vidloader bench JSON under {args.results}", file=sys.stderr)
        return 1
    sys.stdout.write(markdown_section(reports, base=args.base, heading=args.heading))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Print the README's performance section from every ``vidloader bench`` JSON under
``benchmarks/results`` (every figure links to the JSON it comes from).

Usage: ``python benchmarks/readme_table.py [--results DIR] [--base DIR] > section.md``;
``--base`` is the directory of the README the section goes into (default: the repository root).
``--merge-run`` treats every JSON under ``--results`` as one run whose backends were benched
one by one (``benchmarks/gpu_run.sh``): one table per workload, with ratios across them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vidloader.bench._markdown import load_reports, markdown_section, merge_run

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--base", default=str(ROOT), help="directory of the README (links start here)")
    p.add_argument("--heading", default="## Performance")
    p.add_argument("--top-level", action="store_true", help="only the JSON directly in --results")
    p.add_argument("--no-preamble", action="store_true", help="tables only, no column notes")
    p.add_argument("--merge-run", action="store_true",
                   help="merge per-backend reports of one run (gpu_run.sh) by workload")
    args = p.parse_args(argv)
    reports = load_reports(args.results, recursive=not args.top_level)
    if not reports:
        print(f"no vidloader bench JSON under {args.results}", file=sys.stderr)
        return 1
    if args.merge_run:
        reports = merge_run(reports)
    sys.stdout.write(markdown_section(reports, base=args.base, heading=args.heading,
                                     preamble=not args.no_preamble))
    return 0


if __name__ == "__main__":
    sys.exit(main())

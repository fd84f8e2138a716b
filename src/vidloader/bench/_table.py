"""``vidloader bench table``: print the README's performance section from every ``vidloader
bench run`` JSON under ``--results`` (every figure links to the JSON it comes from).

Usage: ``vidloader bench table [--results DIR] [--base DIR] > section.md``, from the repository
root; ``--base`` is the directory of the README the section goes into (default: the current
one). ``--merge-run`` treats every JSON under ``--results`` as one run whose backends were
benched one by one (``benchmarks/gpu_run.sh``): one table per workload, with ratios across them.
"""

from __future__ import annotations

import sys

from ._markdown import load_reports, markdown_section, merge_run


def run(args) -> int:
    """Write the section on standard output; 1 if ``--results`` holds no report."""
    reports = load_reports(args.results, recursive=not args.top_level)
    if not reports:
        print(f"no vidloader bench JSON under {args.results}", file=sys.stderr)
        return 1
    if args.merge_run:
        reports = merge_run(reports)
    sys.stdout.write(markdown_section(reports, base=args.base, heading=args.heading,
                                     preamble=not args.no_preamble))
    return 0

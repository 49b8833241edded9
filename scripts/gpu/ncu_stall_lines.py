#!/usr/bin/env python3
"""The SASS instructions a kernel's warps stalled on most, from Nsight Compute's source page.

Reads the CSV that `ncu -i REPORT --page source --csv --print-source sass` prints (a report taken with
`--section SourceCounters`), plain or gzipped, and prints the top instructions by warp stall samples with their
share of all samples: where a kernel waits, by instruction (e.g. the first use of a load that came late).

  python3 scripts/gpu/ncu_stall_lines.py sass.csv.gz [--top 30]
"""
import argparse
import csv
import gzip
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"


def read_rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        return list(csv.reader(f))


def samples(cell):
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="ncu's source page as CSV (optionally .gz)")
    parser.add_argument("--top", type=int, default=30, help="instructions to print")
    args = parser.parse_args()
    rows = read_rows(args.csv)
    header_at = next((i for i, row in enumerate(rows) if "Address" in row and SAMPLES in row), None)
    if header_at is None:
        sys.exit(f"{args.csv}: no header with 'Address' and '{SAMPLES}' (was the report taken with "
                 "--section SourceCounters, and printed with --page source --csv --print-source sass?)")
    header = rows[header_at]
    address, source, column = header.index("Address"), header.index("Source"), header.index(SAMPLES)
    lines = [row for row in rows[header_at + 1:] if len(row) > max(address, source, column)]
    total = sum(samples(row[column]) for row in lines)
    if total == 0:
        sys.exit(f"{args.csv}: no stall samples")
    print(f"{total:,.0f} stall samples over {len(lines)} instructions")
    for row in sorted(lines, key=lambda row: -samples(row[column]))[:args.top]:
        count = samples(row[column])
        print(f"{count:9,.0f} {100 * count / total:5.1f}%  {row[address]:>16}  {row[source].strip()}")


if __name__ == "__main__":
    main()

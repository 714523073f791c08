"""Paired runs for the Python drivers of scripts/ (bench-cell,
bench-follower-reads): two sides measured in pairs, the order alternating
between pairs, then each key's median per side and the median of the
per-pair ratios B/A with their range.

alternate(pairs, a, b, run, show): run(side) for both sides of each pair,
show(pair, side, result) after each; returns {a: [results], b: [results]}.
ratio(runs, a, b, key): (median, lowest, highest) of result[key] B/A per pair.
"""
import statistics


def alternate(pairs, a, b, run, show):
    runs = {a: [], b: []}
    for i in range(pairs):
        for side in ((a, b) if i % 2 == 0 else (b, a)):
            r = run(side)
            runs[side].append(r)
            show(i + 1, side, r)
    return runs


def median(runs, side, key):
    return statistics.median([r[key] for r in runs[side]])


def ratio(runs, a, b, key):
    rs = [y[key] / x[key] for x, y in zip(runs[a], runs[b])]
    return statistics.median(rs), min(rs), max(rs)

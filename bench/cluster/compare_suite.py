#!/usr/bin/env python3
"""Judge a variant's predicted-latency run against a baseline suite's heuristics.

    bench/cluster/compare_suite.py BASELINE/suite.csv VARIANT/suite.csv [MORE/suite.csv ...]

A variant run (`cluster_sim --suite ... --strategies pl_least --pipeline-file F`) has no
heuristic columns; the heuristics do not depend on the default pipeline, so the baseline's are
reused. Per scenario: the best heuristic by TTFT p95, the variant's TTFT delta against it, SLO
attainment points against the heuristics' best, and the suite's verdict (within +0.5 % and,
with SLO headers, within 0.5 points). One line per scenario when one variant is given.
"""
import csv
import math
import statistics
import sys

HEURISTICS = ['rr', 'lp111', 'lp322']


def num(x):
    try:
        return float(x)
    except ValueError:
        return math.nan


def judge(base, var):
    best = min(HEURISTICS, key=lambda h: num(base['ttft_p95_' + h]))
    rel = num(var['ttft_p95_pl_least']) / num(base['ttft_p95_' + best]) - 1
    slo = base['slo_share'] not in ('0', '')
    pts = num(var['slo_pl_least']) - max(num(base['slo_' + h]) for h in HEURISTICS) if slo else 0.0
    return best, rel, pts, rel <= 0.005 and (not slo or pts >= -0.5)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    base = {r['name']: r for r in csv.DictReader(open(argv[1]))}
    for path in argv[2:]:
        var = {r['name']: r for r in csv.DictReader(open(path))}
        rels, good, lines = [], 0, []
        for name in sorted(base):
            if name not in var:
                continue
            best, rel, pts, ok = judge(base[name], var[name])
            rels.append(rel)
            good += ok
            lines.append(f"  {name} {best:6s} {rel * 100:+7.1f}% {pts:+6.1f} pts "
                         f"{'ok' if ok else 'LOSS'}")
        if not rels:
            print(f"{path}: no scenario in common with {argv[1]}")
            continue
        rels.sort()
        p90 = rels[min(len(rels) - 1, int(0.9 * len(rels)))]
        print(f"{path}: {good} of {len(rels)} at least as good; median "
              f"{statistics.median(rels) * 100:+.1f}%, p90 {p90 * 100:+.1f}%, "
              f"worst {rels[-1] * 100:+.1f}%")
        if len(argv) == 3:
            print('\n'.join(lines))


if __name__ == '__main__':
    main(sys.argv)

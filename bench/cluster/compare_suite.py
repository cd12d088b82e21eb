#!/usr/bin/env python3
"""Judge a variant's predicted-latency run against a baseline suite's heuristics.

    bench/cluster/compare_suite.py BASELINE/suite.csv VARIANT/suite.csv [MORE/suite.csv ...]

A variant run (`cluster_sim --suite ... --strategies pl_least --pipeline-file F`) has no
heuristic columns; the heuristics do not depend on the default pipeline, so the baseline's are
reused. Per scenario: the best heuristic by TTFT p95, the variant's TTFT delta against it, SLO
attainment points against the heuristics' best, and the suite's verdict (within +0.5 % and,
with SLO headers, within 0.5 points). The summary adds the median share of the gap between the
best heuristic and the baseline's better oracle that the variant recovers (the suite's
moonshot), where the baseline ran the oracles. One line per scenario when one variant is given.

    bench/cluster/compare_suite.py --oracles SUITE/suite.csv

judges the two oracles of a suite run by the same verdict: whether a policy that knows every
request's true latency on each pod can meet it, and where not, why.
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


def judge(base, var, column='pl_least'):
    best = min(HEURISTICS, key=lambda h: num(base['ttft_p95_' + h]))
    rel = num(var['ttft_p95_' + column]) / num(base['ttft_p95_' + best]) - 1
    slo = base['slo_share'] not in ('0', '')
    pts = num(var['slo_' + column]) - max(num(base['slo_' + h]) for h in HEURISTICS) if slo else 0.0
    return best, rel, pts, rel <= 0.005 and (not slo or pts >= -0.5)


def judge_oracles(path):
    """The verdict asks for the TTFT p95 of the fastest heuristic and the attainment of the
    one meeting the most SLOs; where those are two heuristics, even the oracles can miss."""
    rows = [r for r in csv.DictReader(open(path)) if not math.isnan(num(r['ttft_p95_oracle']))]
    good = {'oracle': 0, 'oracle_cost': 0, 'either': 0}
    misses = []
    for r in rows:
        ok = {o: judge(r, r, o)[3] for o in ('oracle', 'oracle_cost')}
        for o in ok:
            good[o] += ok[o]
        good['either'] += ok['oracle'] or ok['oracle_cost']
        if not (ok['oracle'] or ok['oracle_cost']):
            fastest = min(HEURISTICS, key=lambda h: num(r['ttft_p95_' + h]))
            most = max(HEURISTICS, key=lambda h: num(r['slo_' + h]))
            rel = [judge(r, r, o)[1] for o in ('oracle', 'oracle_cost')]
            pts = [judge(r, r, o)[2] for o in ('oracle', 'oracle_cost')]
            misses.append(f"  {r['name']} TTFT p95 {min(rel) * 100:+.1f}% against {fastest}, "
                          f"attainment {max(pts):+.1f} pts against {most}")
    slo = [r for r in csv.DictReader(open(path)) if r['slo_share'] not in ('0', '')]
    split = sum(1 for r in slo if min(HEURISTICS, key=lambda h: num(r['ttft_p95_' + h])) !=
                max(HEURISTICS, key=lambda h: num(r['slo_' + h])))
    print(f"{path}: oracles run on {len(rows)} scenarios; at least as good as the best heuristic: "
          f"greedy {good['oracle']}, cost-aware {good['oracle_cost']}, either {good['either']}")
    print(f"  scenarios with SLO headers where the fastest heuristic is not the one meeting the "
          f"most SLOs: {split} of {len(slo)}")
    print('\n'.join(misses))


def main(argv):
    if len(argv) == 3 and argv[1] == '--oracles':
        judge_oracles(argv[2])
        return
    if len(argv) < 3:
        sys.exit(__doc__)
    base = {r['name']: r for r in csv.DictReader(open(argv[1]))}
    for path in argv[2:]:
        var = {r['name']: r for r in csv.DictReader(open(path))}
        rels, good, lines, gaps = [], 0, [], []
        for name in sorted(base):
            if name not in var:
                continue
            best, rel, pts, ok = judge(base[name], var[name])
            rels.append(rel)
            good += ok
            # The share of the gap between the best heuristic and the better oracle of the
            # baseline run that the variant recovers (where the oracles ran and beat it).
            b = num(base[name]['ttft_p95_' + best])
            o = min(num(base[name].get('ttft_p95_oracle', '-')),
                    num(base[name].get('ttft_p95_oracle_cost', '-')))
            if o < b:
                gaps.append((b - num(var[name]['ttft_p95_pl_least'])) / (b - o))
            lines.append(f"  {name} {best:6s} {rel * 100:+7.1f}% {pts:+6.1f} pts "
                         f"{'ok' if ok else 'LOSS'}")
        if not rels:
            print(f"{path}: no scenario in common with {argv[1]}")
            continue
        rels.sort()
        p90 = rels[min(len(rels) - 1, int(0.9 * len(rels)))]
        gap = (f"; gap to the oracle recovered, median {statistics.median(gaps) * 100:.0f} % "
               f"({len(gaps)} scenarios)" if gaps else "")
        print(f"{path}: {good} of {len(rels)} at least as good; median "
              f"{statistics.median(rels) * 100:+.1f}%, p90 {p90 * 100:+.1f}%, "
              f"worst {rels[-1] * 100:+.1f}%{gap}")
        if len(argv) == 3:
            print('\n'.join(lines))


if __name__ == '__main__':
    main(sys.argv)

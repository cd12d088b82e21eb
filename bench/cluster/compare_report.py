#!/usr/bin/env python3
"""Judge a variant's predicted-latency runs against a report's heuristics, per (scenario, seed).

    bench/cluster/compare_report.py BASELINE/stages.csv VARIANT/stages.csv

A variant run (`cluster_sim --seeds 1,2,3 ... --strategies pl_least --pipeline-file F`, or the
same with --holdout) has no heuristic rows; the heuristics do not depend on the default
pipeline, so the baseline report's are reused. The verdict is the report's (report.md, "Per
seed"): g-mean TTFT p95 over the stages <= the best heuristic's and, with SLO headers, whole-run
attainment >= the best heuristic's. Prints one line per pair, then the count.
"""
import collections
import csv
import math
import sys

HEURISTICS = ('rr', 'lp111', 'lp322')


def figures(path):
    """(scenario, seed, strategy) -> (g-mean stage TTFT p95, whole-run attainment or None)."""
    logs, whole = collections.defaultdict(list), {}
    for r in csv.DictReader(open(path)):
        key = (r['scenario'], r['seed'], r['strategy'])
        if r['stage'] == '-1':
            a = float(r['slo_attainment'])
            whole[key] = a if a >= 0 else None
        else:
            logs[key].append(math.log(max(float(r['ttft_p95_ms']), 1e-9)))
    return {k: (math.exp(sum(v) / len(v)), whole.get(k)) for k, v in logs.items()}


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    base, var = figures(argv[1]), figures(argv[2])
    good = total = 0
    for (scenario, seed, strategy), (p95, slo) in sorted(var.items()):
        if strategy != 'pl_least':
            continue
        heur = {h: base[(scenario, seed, h)] for h in HEURISTICS if (scenario, seed, h) in base}
        if not heur:
            continue
        best = min(heur, key=lambda h: heur[h][0])
        rel = p95 / heur[best][0] - 1
        ok = rel <= 0
        line = f'{scenario}/{seed}: TTFT p95 {rel * 100:+.1f}% ({best})'
        if slo is not None:
            best_slo = max(v[1] for v in heur.values())
            ok = ok and slo >= best_slo
            line += f', SLO {100 * (slo - best_slo):+.2f} pts'
        own = base.get((scenario, seed, 'pl_least'))
        if own:
            line += f'; against the baseline default {100 * (p95 / own[0] - 1):+.1f}%'
        print(line + ('' if ok else '  NO'))
        good += ok
        total += 1
    print(f'{argv[2]}: at least as good as the best heuristic in {good} of {total} pairs')


if __name__ == '__main__':
    main(sys.argv)

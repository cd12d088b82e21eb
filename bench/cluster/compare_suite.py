#!/usr/bin/env python3
"""Judge a variant's predicted-latency run against a baseline suite's heuristics, by verdict v2.

    bench/cluster/compare_suite.py BASELINE/suite.csv VARIANT/suite.csv [MORE/suite.csv ...]

A variant run (`cluster_sim --suite ... --strategies pl_least --pipeline-file F`) has no
heuristic columns; the heuristics do not depend on the default pipeline, so the baseline's are
reused. Both runs must have the same trace seeds: each directory's suite_seeds.csv (one row per
scenario and trace seed, written beside suite.csv) is what is judged.

Verdict v2 (issue 51; the same rules as bench/cluster/suite_verdict.h), on the means over a
scenario's trace seeds, each criterion against the heuristic best on it:
  (a) requests without SLO headers: g-mean over stages of their TTFT p95 <= lowest x 1.005;
  (b) requests with SLO headers: attainment >= highest - 0.5 points;
  (c) guard: g-mean over stages of the E2E p50 of all requests <= lowest x 1.05.
A loss is its size; one no larger than the seed-to-seed spread (half the range of the per-seed
comparison) is a tie. The old verdict (all requests' g-mean TTFT p95 within +0.5 %, attainment
within 0.5 points) is printed beside it. One line per scenario when one variant is given.

    bench/cluster/compare_suite.py --oracles SUITE/suite.csv

judges the two oracles of a suite run by the same verdict.
"""
import csv
import math
import os
import statistics
import sys

HEURISTICS = ['rr', 'lp111', 'lp322']
TTFT_TOL, SLO_TOL, E2E_TOL = 0.005, 0.5, 0.05


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def mean(values):
    v = [x for x in values if math.isfinite(x)]
    return sum(v) / len(v) if v else math.nan


def criterion(seeds, mine, field, higher_is_better, tol):
    """One criterion of verdict v2. `seeds`: the scenario's rows (one per trace seed) holding
    the heuristics' columns; `mine`: the same seeds' values of the judged strategy. Returns None
    when the population is absent, else dict(against, delta, loss, spread, outcome)."""
    m = mean(mine)
    if not math.isfinite(m):
        return None
    best, against = math.nan, None
    for h in HEURISTICS:
        x = mean([num(r.get(f'{field}_{h}')) for r in seeds])
        if math.isfinite(x) and (not math.isfinite(best) or (x > best if higher_is_better
                                                             else x < best)):
            best, against = x, h
    if against is None:
        return None

    def delta(a, b):
        return a - b if higher_is_better else a / b - 1

    per_seed = [delta(a, num(r.get(f'{field}_{against}'))) for a, r in zip(mine, seeds)]
    per_seed = [d for d in per_seed if math.isfinite(d)]
    spread = (max(per_seed) - min(per_seed)) / 2 if per_seed else 0.0
    d = delta(m, best)
    excess = -d if higher_is_better else d
    loss = excess if excess > tol else 0.0
    outcome = 'as good' if loss == 0 else ('tie' if excess <= spread else 'loss')
    return {'against': against, 'delta': d, 'loss': loss, 'spread': spread, 'outcome': outcome}


def verdict_v2(seeds, mine_rows, column):
    """Verdict v2 of `column` (pl_least, oracle, ...) whose values are in `mine_rows` (the same
    seeds, in the same order as `seeds`). Returns None when it did not run."""
    def vals(field):
        return [num(r.get(f'{field}_{column}')) for r in mine_rows]
    v = {'ttft': criterion(seeds, vals('ttft_free'), 'ttft_free', False, TTFT_TOL),
         'slo': criterion(seeds, vals('slo_pop'), 'slo_pop', True, SLO_TOL),
         'e2e': criterion(seeds, vals('e2e_p50'), 'e2e_p50', False, E2E_TOL)}
    if v['e2e'] is None or (v['ttft'] is None and v['slo'] is None):
        return None
    outcomes = [c['outcome'] for c in v.values() if c]
    v['outcome'] = 'loss' if 'loss' in outcomes else 'tie' if 'tie' in outcomes else 'as good'
    old_t = criterion(seeds, vals('ttft_p95'), 'ttft_p95', False, 0)
    old_s = criterion(seeds, vals('slo'), 'slo', True, 0)
    v['old_rel'] = old_t['delta'] if old_t else math.nan
    v['old_pts'] = old_s['delta'] if old_s else math.nan
    v['old_as_good'] = bool(old_t) and old_t['delta'] <= TTFT_TOL and (
        old_s is None or old_s['delta'] >= -SLO_TOL)
    v['old_best'] = old_t['against'] if old_t else None
    return v


def seeds_path(path):
    d = path if os.path.isdir(path) else os.path.dirname(path) or '.'
    return os.path.join(d, 'suite_seeds.csv')


def load_seeds(path):
    """name -> rows sorted by trace seed."""
    out = {}
    with open(seeds_path(path)) as f:
        for r in csv.DictReader(f):
            out.setdefault(r['name'], []).append(r)
    for rows in out.values():
        rows.sort(key=lambda r: int(r['trace_seed']))
    return out


def describe(c, points):
    if c is None:
        return '-'
    d = f"{c['delta']:+.1f} pts" if points else f"{c['delta'] * 100:+.1f}%"
    s = f"{c['spread']:.1f}" if points else f"{c['spread'] * 100:.1f}%"
    return f"{d} (±{s}){'' if c['outcome'] == 'as good' else ' ' + c['outcome'].upper()}"


def gap(seeds, mine_rows, best):
    """Share of the gap between the fastest heuristic and the better oracle recovered."""
    if best is None:
        return math.nan
    b = mean([num(r[f'ttft_p95_{best}']) for r in seeds])
    o = min(mean([num(r.get('ttft_p95_oracle')) for r in seeds]),
            mean([num(r.get('ttft_p95_oracle_cost')) for r in seeds]))
    m = mean([num(r.get('ttft_p95_pl_least')) for r in mine_rows])
    return (b - m) / (b - o) if math.isfinite(o) and o < b else math.nan


def judge_oracles(path):
    seeds = load_seeds(path)
    ran = good = tie = 0
    misses = []
    for name in sorted(seeds):
        rows = seeds[name]
        vs = [verdict_v2(rows, rows, o) for o in ('oracle', 'oracle_cost')]
        vs = [v for v in vs if v]
        if not vs:
            continue
        ran += 1
        best = min(vs, key=lambda v: ['as good', 'tie', 'loss'].index(v['outcome']))
        good += best['outcome'] == 'as good'
        tie += best['outcome'] == 'tie'
        if best['outcome'] != 'as good':
            misses.append(f"  {name} {best['outcome']}: (a) {describe(best['ttft'], False)} "
                          f"(b) {describe(best['slo'], True)} (c) {describe(best['e2e'], False)}")
    print(f"{path}: oracles run on {ran} scenarios; the better of the two is at least as good "
          f"as the best heuristic by verdict v2 in {good} (ties {tie})")
    print('\n'.join(misses))


def compare(base_path, var_path, per_scenario):
    base, var = load_seeds(base_path), load_seeds(var_path)
    counts = {'as good': 0, 'tie': 0, 'loss': 0}
    old_good, lines, gaps, losses = 0, [], [], []
    for name in sorted(base):
        if name not in var:
            continue
        rows = base[name]
        mine = {r['trace_seed']: r for r in var[name]}
        if [r['trace_seed'] for r in rows] != sorted(mine, key=int):
            sys.exit(f"{name}: trace seeds differ between {base_path} and {var_path}")
        mine_rows = [mine[r['trace_seed']] for r in rows]
        v = verdict_v2(rows, mine_rows, 'pl_least')
        if v is None:
            continue
        counts[v['outcome']] += 1
        old_good += v['old_as_good']
        g = gap(rows, mine_rows, v['old_best'])
        if math.isfinite(g):
            gaps.append(g)
        for key, scale in (('ttft', 100), ('slo', 1), ('e2e', 100)):
            if v[key] and v[key]['outcome'] == 'loss':
                losses.append((key, v[key]['loss'] * scale, name))
        lines.append(f"  {name} {v['outcome']:7s} (a) {describe(v['ttft'], False):22s} "
                     f"(b) {describe(v['slo'], True):22s} (c) {describe(v['e2e'], False):22s} "
                     f"old {v['old_rel'] * 100:+.1f}%{'' if v['old_as_good'] else ' LOSS'}")
    n = sum(counts.values())
    if n == 0:
        print(f"{var_path}: no scenario in common with {base_path}")
        return
    worst = {k: max((x for kk, x, _ in losses if kk == k), default=None)
             for k in ('ttft', 'slo', 'e2e')}
    w_t = '-' if worst['ttft'] is None else f"+{worst['ttft']:.1f}%"
    w_s = '-' if worst['slo'] is None else f"-{worst['slo']:.1f} pts"
    w_e = '-' if worst['e2e'] is None else f"+{worst['e2e']:.1f}%"
    gap_text = (f"; gap to the oracle recovered, median {statistics.median(gaps) * 100:.0f} % "
                f"({len(gaps)} scenarios)" if gaps else "")
    print(f"{var_path}: verdict v2 at least as good in {counts['as good']} of {n} (ties "
          f"{counts['tie']}, losses {counts['loss']}); worst loss (a) {w_t}, (b) {w_s}, "
          f"(c) {w_e}; old verdict {old_good} of {n}{gap_text}")
    if per_scenario:
        print('\n'.join(lines))


def main(argv):
    if len(argv) == 3 and argv[1] == '--oracles':
        judge_oracles(argv[2])
        return
    if len(argv) < 3:
        sys.exit(__doc__)
    for path in argv[2:]:
        compare(argv[1], path, len(argv) == 3)


if __name__ == '__main__':
    main(sys.argv)

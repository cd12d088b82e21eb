#!/usr/bin/env python3
"""Ablation table of the default pipeline on the quick suite: reads what run_ablation.sh wrote
(<dir>/s<seed>-baseline/suite.csv with every heuristic and the default, <dir>/s<seed>-<variant>/
suite.csv with the variant's predicted-latency run) and prints markdown. The verdict is the
suite's (suite_report.cc): g-mean TTFT p95 within +0.5 % of the best heuristic's and, with SLO
headers, attainment within 0.5 points of the best heuristic's attainment.
Usage: ablation_table.py <dir> <seed> [<seed> ...]"""
import csv
import os
import sys

D, SEEDS = sys.argv[1], sys.argv[2:]
HEURISTICS = ("rr", "lp111", "lp322")


def load(path):
    return {r["name"]: r for r in csv.DictReader(open(path))} if os.path.exists(path) else None


def quantile(v, p):
    v = sorted(v)
    if not v:
        return float("nan")
    at = p * (len(v) - 1)
    lo = int(at)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (at - lo)


def figures(base, var):
    """Verdict figures of `var`'s pl_least against `base`'s heuristics, and against base's pl."""
    good = n = 0
    rel, pts, own, worst = [], [], [], ("", -1e9)
    for name, b in base.items():
        v = var.get(name)
        if v is None:
            continue
        n += 1
        best_ttft = min(float(b["ttft_p95_" + h]) for h in HEURISTICS)
        r = float(v["ttft_p95_pl_least"]) / best_ttft - 1
        has_slo = float(b["slo_share"]) > 0
        p = float(v["slo_pl_least"]) - max(float(b["slo_" + h]) for h in HEURISTICS) if has_slo else 0
        good += r <= 0.005 and (not has_slo or p >= -0.5)
        rel.append(100 * r)
        if has_slo:
            pts.append(p)
        own.append(100 * (float(v["ttft_p95_pl_least"]) / float(b["ttft_p95_pl_least"]) - 1))
        if 100 * r > worst[1]:
            worst = (name, 100 * r)
    return {"good": good, "n": n, "med": quantile(rel, .5), "p90": quantile(rel, .9),
            "worst": worst, "slo_p10": quantile(pts, .1), "slo_med": quantile(pts, .5),
            "own_med": quantile(own, .5), "own_better": sum(x < -0.5 for x in own),
            "own_worse": sum(x > 0.5 for x in own)}


variants = [("default", "nothing (the default pipeline)")]
if os.path.exists(f"{D}/variants.txt"):
    variants += [tuple(line.rstrip("\n").split("|", 1)) for line in open(f"{D}/variants.txt")]
print("Quick suite, predicted-latency with one component switched off, against the heuristics "
      "of the same suite seed. *as good*: scenarios at least as good as the best heuristic; "
      "*TTFT delta*: g-mean TTFT p95 against the best heuristic, median / p90 / worst; *SLO*: "
      "attainment points against the best heuristic's, p10 / median; *vs default*: the "
      "variant's g-mean TTFT p95 against the default's on each scenario, median and the "
      "scenarios more than 0.5 % better / worse.\n")
print("| switched off | " + " | ".join(
    f"seed {s}: as good | TTFT delta | SLO pts | vs default" for s in SEEDS) + " |")
print("|---|" + "---:|---|---|---|" * len(SEEDS))
for name, what in variants:
    cells = []
    for s in SEEDS:
        base = load(f"{D}/s{s}-baseline/suite.csv")
        var = base if name == "default" else load(f"{D}/s{s}-{name}/suite.csv")
        if base is None or var is None:
            cells.append("- | - | - | -")
            continue
        f = figures(base, var)
        vs = "-" if name == "default" else \
            f"{f['own_med']:+.1f} %, {f['own_better']} / {f['own_worse']}"
        cells.append(f"{f['good']} of {f['n']} | {f['med']:+.1f} / {f['p90']:+.1f} / "
                     f"{f['worst'][1]:+.1f} % ({f['worst'][0]}) | {f['slo_p10']:+.1f} / "
                     f"{f['slo_med']:+.1f} | {vs}")
    print(f"| {what} | " + " | ".join(cells) + " |")

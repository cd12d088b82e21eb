#!/usr/bin/env python3
"""Active-active EPP replicas against one replica: reads what run_replicas.sh wrote (per-stage
stages.csv of the preset runs, suite.csv/suite.md of the suite runs) and prints markdown tables.
Usage: replicas_table.py <dir>"""
import csv
import math
import os
import sys

D = sys.argv[1] if len(sys.argv) > 1 else "bench/results/routing/replicas"
STRATEGIES = ("lp322", "pl_least")


def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def preset_figures(name):
    """(scenario, strategy) -> (g-mean over stages of TTFT p95, mean prefix hit rate)."""
    path = f"{D}/{name}/stages.csv"
    if not os.path.exists(path):
        return None
    per = {}
    for r in csv.DictReader(open(path)):
        if r["stage"] != "-1":
            per.setdefault((r["scenario"], r["strategy"]), []).append(
                (max(float(r["ttft_p95_ms"]), 1e-3), float(r["prefix_hit_rate"])))
    return {k: (gmean([x[0] for x in v]), sum(x[1] for x in v) / len(v)) for k, v in per.items()}


runs = [("1", "presets_n1"), ("2", "presets_n2"), ("2 sharing", "presets_n2share"),
        ("4", "presets_n4"), ("4 sharing", "presets_n4share")]  # sharing at scrapes
figs = [(label, preset_figures(name)) for label, name in runs]
figs = [(label, f) for label, f in figs if f is not None]
one = figs[0][1]
print("Presets, seed 1: g-mean TTFT p95 (ms) by EPP replicas (change against one replica), "
      "prefix hit rate\n")
print("| scenario | strategy | " + " | ".join(label for label, _ in figs) + " | prefix hits: "
      + " / ".join(label for label, _ in figs) + " |")
print("|---|---|" + "---:|" * len(figs) + "---|")
scenarios = sorted({k[0] for k in one})
for s in scenarios:
    for st in STRATEGIES:
        if (s, st) not in one:
            continue
        base = one[(s, st)][0]
        cells = [f"{one[(s, st)][0]:.1f}"] + [
            f"{f[(s, st)][0]:.1f} ({f[(s, st)][0] / base - 1:+.1%})" for _, f in figs[1:]]
        hits = " / ".join(f"{f[(s, st)][1]:.0%}" for _, f in figs)
        print(f"| {s} | {st} | " + " | ".join(cells) + f" | {hits} |")
for st in STRATEGIES:
    sc = [s for s in scenarios if (s, st) in one]
    cells = [""] + [f"{gmean([f[(s, st)][0] / one[(s, st)][0] for s in sc]) - 1:+.1%}"
                    for _, f in figs[1:]]
    print(f"| all ({len(sc)}), g-mean of the ratios | {st} | " + " | ".join(cells) + " | |")


def suite(name):
    path = f"{D}/{name}/suite.csv"
    return {r["name"]: r for r in csv.DictReader(open(path))} if os.path.exists(path) else None


print("\nQuick generalization suite, suite seed 1 (20 scenarios): g-mean TTFT p95 against one "
      "replica, over the scenarios\n")
print("| replicas | strategy | g-mean of the ratios | median | worst | predicted-latency at least "
      "as good as the best heuristic |")
print("|---|---|---:|---:|---:|---:|")
base = suite("suite_n1")
for name, label in (("suite_n1", "1"), ("suite_n2", "2"), ("suite_n2own", "2, a trainer each"),
                    ("suite_n2share", "2 sharing at scrapes"),
                    ("suite_n2exact", "2 sharing before every decision"), ("suite_n4", "4")):
    v = suite(name)
    if v is None:
        continue
    md = open(f"{D}/{name}/suite.md").read().splitlines()
    as_good = [l for l in md if l.startswith("| predicted-latency |")][0].split("|")[2].strip()
    for st in STRATEGIES:
        rs = sorted(float(v[n]["ttft_p95_" + st]) / float(base[n]["ttft_p95_" + st]) for n in base)
        print(f"| {label} | {st} | {gmean(rs) - 1:+.1%} | {rs[len(rs) // 2] - 1:+.1%} | "
              f"{rs[-1] - 1:+.1%} | {as_good if st == 'pl_least' else ''} |")

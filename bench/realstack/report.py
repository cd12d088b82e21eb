#!/usr/bin/env python3
"""Writes the real-stack check's report.md, compare.csv and run.json (called by run_check.sh).

Real-stack statistics are recomputed from the loadclient's requests.jsonl, with wall times
multiplied by the time scale, using cluster_sim's definitions (percentiles by linear
interpolation; output tok/s = tokens of a stage's requests / time from the stage's start until
its last request finished, at least the stage's length), so both columns mean the same thing.
"""
import argparse
import csv
import json
import math
import os
import platform
import re
import subprocess
from datetime import datetime, timezone

NAMES = {"rr": "round-robin", "lp111": "load+prefix(1,1,1)", "lp322": "load+prefix(3,2,2)",
         "pl_least": "predicted-latency", "pl_most": "predicted-latency(most)"}
METRICS = [("success", "success", "pct"), ("ttft_p50", "TTFT p50", "ms"),
           ("ttft_p95", "TTFT p95", "ms"), ("tpot_p50", "TPOT p50", "ms"),
           ("e2e_p50", "E2E p50", "ms"), ("out_tok_s", "out tok/s", "num"),
           ("prefix_hit", "prefix hit", "pct")]
RANKED = [("ttft_p50", "TTFT p50"), ("ttft_p95", "TTFT p95")]
SIGNIFICANT = 0.10  # virtual-time gaps below this are noise-level; their order is not judged


def pctl(v, q):
    if not v:
        return float("nan")
    v = sorted(v)
    pos = q * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def summarize(recs, ts, start_ms, dur_s):
    ok = [r for r in recs if r["ok"]]
    last_end = max([start_ms + dur_s * 1000] + [r["end_ms"] * ts for r in ok])
    prompt = sum(r["prompt_tokens"] for r in ok if r["prompt_tokens"] > 0)
    cached = sum(max(0, r["cached_tokens"]) for r in ok if r["prompt_tokens"] > 0)
    return {
        "requests": len(recs),
        "success": len(ok) / len(recs) if recs else float("nan"),
        "ttft_p50": pctl([r["ttft_ms"] * ts for r in ok], 0.5),
        "ttft_p95": pctl([r["ttft_ms"] * ts for r in ok], 0.95),
        "tpot_p50": pctl([r["tpot_ms"] * ts for r in ok if "tpot_ms" in r], 0.5),
        "e2e_p50": pctl([r["e2e_ms"] * ts for r in ok], 0.5),
        "out_tok_s": sum(r["completion_tokens"] for r in ok) / ((last_end - start_ms) / 1000),
        "prefix_hit": cached / prompt if prompt else 0.0,
    }


def real_stats(path, ts, stages):
    recs = [json.loads(line) for line in open(path)]
    out, start = {}, 0.0
    for i, (_, dur) in enumerate(stages):
        out[i] = summarize([r for r in recs if r["stage"] == i], ts, start * 1000, dur)
        start += dur
    out[-1] = summarize(recs, ts, 0.0, start)
    per_pod = {}
    for r in recs:
        per_pod[r.get("endpoint", "")] = per_pod.get(r.get("endpoint", ""), 0) + 1
    extra = {"max_prompt_tokens": max(r["prompt_tokens"] for r in recs),
             "pod_max_min": max(per_pod.values()) / max(1, min(per_pod.values())),
             "pods_used": len(per_pod)}
    return out, extra


def virtual_stats(path):
    out = {}
    for row in csv.DictReader(open(path)):
        f = lambda k: float(row[k])  # noqa: E731
        out[(row["strategy"], int(row["stage"]))] = {
            "requests": int(row["requests"]), "success": f("success_rate"),
            "ttft_p50": f("ttft_p50_ms"), "ttft_p95": f("ttft_p95_ms"),
            "tpot_p50": f("tpot_p50_ms"), "e2e_p50": f("e2e_p50_ms"),
            "out_tok_s": f("output_tokens_per_s"), "prefix_hit": f("prefix_hit_rate"),
            "pred_ttft_mape": f("pred_ttft_mape_pct"), "pred_ttft_cov": f("pred_ttft_coverage_pct")}
    return out


def fmt(v, kind):
    if v != v:
        return "-"
    if kind == "pct":
        return f"{100 * v:.1f}%"
    if kind == "num" or v >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}" if v < 10 else f"{v:.1f}"


def order(stats, strategies, key):
    return sorted(strategies, key=lambda s: stats[s][key])


def judge(v, r, strategies, key):
    """Pairs whose virtual gap exceeds SIGNIFICANT: (agreeing, [disagreeing pair texts])."""
    agree, bad = 0, []
    for i, a in enumerate(strategies):
        for b in strategies[i + 1:]:
            va, vb = v[a][key], v[b][key]
            if abs(va - vb) / min(va, vb) < SIGNIFICANT:
                continue
            if (va < vb) == (r[a][key] < r[b][key]):
                agree += 1
            else:
                bad.append(f"{NAMES[a]} vs {NAMES[b]}: virtual {va:.1f} vs {vb:.1f} ms, "
                           f"real {r[a][key]:.1f} vs {r[b][key]:.1f} ms")
    return agree, bad


def main():
    ap = argparse.ArgumentParser()
    for a in ["run-dir", "out-dir", "preset", "stages", "wall-stages", "strategies",
              "virtual-command"]:
        ap.add_argument("--" + a, required=True)
    for a in ["pods", "seed", "length-scale", "time-scale", "elapsed-s"]:
        ap.add_argument("--" + a, type=float, required=True)
    a = ap.parse_args()
    ts = a.time_scale
    stages = [tuple(float(x) for x in s.split(":")) for s in a.stages.split(",")]
    strategies = a.strategies.split()
    virt = virtual_stats(os.path.join(a.run_dir, "virtual", "stages.csv"))
    real, extra = {}, {}
    for s in strategies:
        real[s], extra[s] = real_stats(os.path.join(a.run_dir, s, "load", "requests.jsonl"),
                                       ts, stages)
    facts = {}
    for line in open(os.path.join(a.run_dir, "facts.tsv")):
        s, k, v = line.rstrip("\n").split("\t")
        facts.setdefault(s, {})[k] = v
    trainer = ""
    tm = os.path.join(a.run_dir, "pl_least", "trainer.metrics")
    if os.path.exists(tm):
        trainer = "\n".join(l.strip() for l in open(tm) if re.match(
            r"^(llmd_trainer_live_prediction_ape_percent|llmd_trainer_(retrains|fits|models_published)"
            r"\w*|(ttft|tpot)_(mape|coverage)_percent\{idx=\"0\")", l))

    # compare.csv: one row per world x strategy x stage (-1 = whole run).
    keys = [m[0] for m in METRICS]
    with open(os.path.join(a.out_dir, "compare.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["world", "strategy", "stage", "rate", "requests"] + keys)
        for world, get in [("virtual", lambda s, i: virt[(s, i)]),
                           ("real", lambda s, i: real[s][i])]:
            for s in strategies:
                for i in list(range(len(stages))) + [-1]:
                    st = get(s, i)
                    rate = stages[i][0] if i >= 0 else ""
                    w.writerow([world, s, i, rate, st["requests"]] +
                               [f"{st[k]:.6g}" for k in keys])

    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
                         capture_output=True, text=True).stdout.strip()
    rev = subprocess.run(["git", "-C", os.path.dirname(__file__), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    L = []
    L.append("# Real-stack check: virtual-time ranking vs the real binaries\n")
    L.append(f"Generated by `bench/realstack/run_check.sh` on {now} (git {rev}, uncommitted "
             f"changes of the tree included). Machine: {os.cpu_count()} CPUs ({cpu}), "
             f"{platform.system()} {platform.release()}; everything (load client, EPP, "
             f"trainer, predictors, pods) on these cores, all on 127.0.0.1. Wall time of the "
             f"check after the build and the wait for the lock: {a.elapsed_s:.0f} s.\n")
    L.append("## Setup\n")
    L.append(f"- Workload: preset {a.preset}, seed {a.seed:.0f}, length scale "
             f"{a.length_scale:g} (KV cache {round(32000 * a.length_scale)} blocks per pod, as "
             f"in cluster_sim), {a.pods:.0f} x h100 pods, stages `{a.stages}` (simulated "
             f"req/s : s) - the first {len(stages)} stages of scenario {a.preset} in "
             f"[the routing report](../routing/report.md).")
    L.append(f"- Time scale {ts:g}: modelsim advances {ts:g} simulated ms per wall ms, the "
             f"load client replays the same trace stretched to `{a.wall_stages}` (wall req/s : "
             f"s; identical arrivals and contents, 1/{ts:g} times later) and every real "
             f"latency below is wall time x {ts:g}. The EPP's scrape interval "
             f"({50 / ts:.0f} ms wall = 50 ms simulated), the trainer's retrain interval "
             f"({10 / ts:g} s wall = 10 s simulated) and the client timeout (60 s simulated) "
             f"are scaled to match cluster_sim's.")
    L.append("- Real stack, per strategy, all fresh (new pods with empty caches, new EPP; for "
             "predicted-latency a new trainer with no samples and 2 predictors): "
             "`modelsim` -> `epp` with `epp/config/<pipeline>.yaml` -> `loadclient`. "
             "predicted-latency trains from the first stage, as in cluster_sim: until the first "
             "retrain it routes on the trainer's constant default models; the trainer fits "
             "with 1 thread, predictors sync every 1 s wall.")
    L.append(f"- Virtual time: `{a.virtual_command}` (its full output is not kept; per-stage "
             "numbers in `virtual_stages.csv`).")
    L.append("- Same trace in both worlds: request counts per stage are compared below; the "
             "load client does not scale the conversation-length limit as cluster_sim does "
             "(13107 tokens at 0.1), which only matters if a prompt reaches it: longest real "
             "prompt " + ", ".join(f"{NAMES[s]} {extra[s]['max_prompt_tokens']}"
                                   for s in strategies) + " tokens.\n")

    L.append("## Side by side (latencies in simulated ms; V = virtual time, R = real stack)\n")
    hdr = "| stage | req/s | strategy | requests V/R | " + " | ".join(
        f"{m[1]} V / R" for m in METRICS) + " |"
    L.append(hdr)
    L.append("|" + "---|" * 3 + "---:|" * (1 + len(METRICS)))
    for i in list(range(len(stages))) + [-1]:
        for s in strategies:
            v, r = virt[(s, i)], real[s][i]
            label = str(i + 1) if i >= 0 else "**all**"
            rate = f"{stages[i][0]:g}" if i >= 0 else "-"
            cells = " | ".join(f"{fmt(v[k], kind)} / {fmt(r[k], kind)}" for k, _, kind in METRICS)
            L.append(f"| {label} | {rate} | {NAMES[s]} | {v['requests']} / {r['requests']} | "
                     f"{cells} |")
    L.append("")

    L.append("## Rankings (lowest first)\n")
    L.append("| stage | metric | virtual time | real stack | same order |")
    L.append("|---|---|---|---|---|")
    total_agree, problems, exact = 0, [], 0
    rows = 0
    for i in list(range(len(stages))) + [-1]:
        v = {s: virt[(s, i)] for s in strategies}
        r = {s: real[s][i] for s in strategies}
        for key, label in RANKED:
            ov, orr = order(v, strategies, key), order(r, strategies, key)
            ag, bad = judge(v, r, strategies, key)
            total_agree += ag
            problems += [f"stage {i + 1 if i >= 0 else 'all'} {label}: {b}" for b in bad]
            exact += ov == orr
            rows += 1
            show = lambda o, st: " < ".join(f"{NAMES[s]} ({st[s][key]:.1f})" for s in o)  # noqa
            L.append(f"| {i + 1 if i >= 0 else 'all'} | {label} | {show(ov, v)} | "
                     f"{show(orr, r)} | {'yes' if ov == orr else 'no'} |")
    L.append("")
    L.append("## Verdict\n")
    L.append(f"Exact same order in {exact} of {rows} stage x metric rankings. Of the strategy "
             f"pairs whose virtual-time gap exceeds {SIGNIFICANT:.0%} (smaller gaps are within "
             f"run-to-run noise and not judged), {total_agree} keep their order on the real "
             f"stack and {len(problems)} flip" + (":" if problems else "."))
    for p in problems:
        L.append(f"- {p}")
    disc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "discussion.md")
    if os.path.exists(disc):
        L.append("\n" + open(disc).read().strip() + "\n")
    else:
        L.append("")

    L.append("## Run facts\n")
    L.append("| strategy | machine busy during the load (2 cores) | CPU seconds | EPP scheduling "
             "ms per request, wall (simulated) | requests per pod max/min |")
    L.append("|---|---:|---|---:|---:|")
    for s in strategies:
        fs = facts.get(s, {})
        L.append(f"| {NAMES[s]} | {float(fs.get('busy_pct', 'nan')):.0f}% | "
                 f"{fs.get('cpu_s', '-')} | {float(fs.get('sched_ms') or 'nan'):.2f} "
                 f"({ts * float(fs.get('sched_ms') or 'nan'):.2f}) | "
                 f"{extra[s]['pod_max_min']:.2f} |")
    if trainer:
        L.append("\nTrainer at the end of the predicted-latency run (`/metrics`):\n")
        L.append("```\n" + trainer + "\n```")
    L.append("\nCommands (ports are picked free at run time):\n")
    L.append("```")
    for s in strategies:
        fs = facts.get(s, {})
        L.append(f"# {NAMES[s]}\n{fs.get('stack', '')}\n{fs.get('command', '')}")
    L.append("```")
    with open(os.path.join(a.out_dir, "report.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    with open(os.path.join(a.out_dir, "run.json"), "w") as f:
        json.dump({"args": vars(a), "facts": facts, "extra": extra,
                   "real": {s: real[s] for s in strategies}}, f, indent=1, default=str)


if __name__ == "__main__":
    main()

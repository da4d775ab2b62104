#!/usr/bin/env python3
"""A/B runs of `sluice bench`: two flag sets, alternating, so both see the same machine state.

usage: scripts/bench_ab.py -m MODEL.gguf --common "--cache-experts 10% --cold -p 32 -b 32 -n 32"
           --a "--prefetch-depth 0" --b "--prefetch-depth 2" [--pairs 4] [--metric decode_tok_s]

Prints each run's figures and the median of the metric per side, and B's median over A's.
Metrics are `sluice bench --json` fields, or `first8_over_steady` (decode_first8_tok_s over
decode_tok_s: what a cold or warm start costs). Examples:
  prefetch (#7):   --a "--prefetch-depth 0" --b "--prefetch-depth 2"
  warm start (#8): --common "--cache-experts 25% --cold -p 1 -n 48 --seed 1" --a "" \
                   --b "--warm data/k2.profile" --metric first8_over_steady
"""
import argparse, json, os, shlex, statistics, subprocess, sys

SHOWN = ["decode_tok_s", "decode_first8_tok_s", "prefill_tok_s", "hit_rate", "io_wait_share", "disk_gbps_raw",
         "read_bytes_per_token", "speculative_waste_bytes_per_token", "prediction_recall", "prediction_precision"]


def metric(run, name):
    if name == "first8_over_steady":
        return run["decode_first8_tok_s"] / run["decode_tok_s"] if run["decode_tok_s"] else 0.0
    return float(run[name])


def bench(binary, model, flags):
    cmd = [binary, "bench", "-m", model, "--json"] + flags
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bench_ab: {' '.join(cmd)} failed: {p.stderr.strip().splitlines()[-1] if p.stderr else p.returncode}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--common", default="--cache-experts 10% --cold -p 32 -b 32 -n 32")
    ap.add_argument("--a", default="--prefetch-depth 0")
    ap.add_argument("--b", default="--prefetch-depth 2")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--metric", default="decode_tok_s")
    ap.add_argument("--binary", default=os.path.join(os.path.dirname(__file__), "..", "build", "sluice"))
    a = ap.parse_args()
    if a.pairs < 1:
        sys.exit("bench_ab: --pairs must be at least 1")
    sides = {"A": shlex.split(a.a), "B": shlex.split(a.b)}
    values = {"A": [], "B": []}
    for i in range(a.pairs):
        for side in ("A", "B"):
            run = bench(a.binary, a.model, shlex.split(a.common) + sides[side])
            values[side].append(metric(run, a.metric))
            shown = " ".join(f"{k}={run[k]:.3f}" for k in SHOWN if run.get(k) is not None)  # null: not measured
            print(f"pair {i + 1} {side} {a.metric}={values[side][-1]:.3f} {shown}", flush=True)
    med = {s: statistics.median(v) for s, v in values.items()}
    ratio = med["B"] / med["A"] if med["A"] else 0.0
    print(json.dumps({"metric": a.metric, "a": a.a, "b": a.b, "pairs": a.pairs,
                      "a_values": [round(v, 4) for v in values["A"]], "b_values": [round(v, 4) for v in values["B"]],
                      "a_median": round(med["A"], 4), "b_median": round(med["B"], 4), "b_over_a": round(ratio, 4)}))


main()

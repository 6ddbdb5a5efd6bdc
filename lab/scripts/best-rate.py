#!/usr/bin/env python3
"""Highest achieved rate at p99 <= 1 ms and <= 5 ms (no errors, every answer checked) of every
sweep JSON named OUT/PREFIX-*-TAG.json: the Centaur Fig. 1/7 and Fig. 10 tables."""
import glob, json, os, sys

out, prefix, tag = sys.argv[1], sys.argv[2], sys.argv[3]
print(f"{'run':48} {'p99<=1ms':>10} {'p99<=5ms':>10}  (q/s; p99 at the highest rate tried)")
for f in sorted(glob.glob(os.path.join(out, f"{prefix}-*-{tag}.json"))):
    if "-hog-" in f:
        continue
    runs = json.load(open(f)).get("runs", [])
    def best(limit):
        ok = [r["achieved_rate"] for r in runs
              if r["latency_us"]["p99"] <= limit and sum(r.get("errors", {}).values()) == 0
              and r["ok"] > 0 and not r.get("generator_saturated")]
        return max(ok) if ok else 0
    last = runs[-1]["latency_us"]["p99"] if runs else float("nan")
    name = os.path.basename(f)[len(prefix) + 1:-len(tag) - 6]
    print(f"{name:48} {best(1000):10.0f} {best(5000):10.0f}  (p99 {last:.0f} us at {runs[-1]['offered_rate'] if runs else 0:.0f})")
for f in sorted(glob.glob(os.path.join(out, f"{prefix}-hog-*-{tag}.json"))):
    r = json.load(open(f))
    r = r.get("results", r)
    print(f"neighbour {os.path.basename(f)}: {r['units_per_s']:.0f} units/s on cpus {r['cpus']}")

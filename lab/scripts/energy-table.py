#!/usr/bin/env python3
"""Per sweep JSON named OUT/PREFIX-*-TAG.json: every offered rate with what was admitted, its p99,
errors and the GPU board energy per request; then the highest rate at p99 <= 1 ms and <= 5 ms
(no errors) with its requests per joule, GPU board alone and with the server's cores at a
stated per-core power (CORE_W, default 10 W: RAPL is not readable on the lent machines)."""
import glob, json, os, sys

out, prefix, tag = sys.argv[1], sys.argv[2], sys.argv[3]
core_w = float(os.environ.get("CORE_W", "10"))
cores = int(os.environ.get("SERVER_CORES", "8"))
for f in sorted(glob.glob(os.path.join(out, f"{prefix}-*-{tag}.json"))):
    runs = json.load(open(f)).get("runs", [])
    name = os.path.basename(f)[len(prefix) + 1:-len(tag) - 6]
    print(f"== {name}")
    for r in runs:
        e = r.get("energy") or {}
        gj = e.get("gpu_energy_j") or 0
        ppj = r["ok"] / gj if gj else float("nan")
        errs = sum(r.get("errors", {}).values())
        print(f"  offered {r['offered_rate']:>9.0f} admitted {r['achieved_rate']:>9.0f} p99 {r['latency_us']['p99']:>9.0f} us "
              f"errors {errs:>6} GPU {e.get('gpu_mean_power_w', 0):6.1f} W  {ppj:8.0f} req/J(board)"
              + ("  SATURATED-GENERATOR" if r.get("generator_saturated") else ""))
    for limit in (1000, 5000):
        ok = [r for r in runs if r["latency_us"]["p99"] <= limit and sum(r.get("errors", {}).values()) == 0
              and r["ok"] > 0 and not r.get("generator_saturated")]
        if not ok:
            print(f"  best at p99 <= {limit // 1000} ms: none"); continue
        b = max(ok, key=lambda r: r["achieved_rate"])
        e = b.get("energy") or {}
        gj, win = e.get("gpu_energy_j") or 0, e.get("window_s") or b["duration_s"]
        host_j = core_w * cores * win
        print(f"  best at p99 <= {limit // 1000} ms: {b['achieved_rate']:.0f} q/s, "
              f"{b['ok'] / gj if gj else float('nan'):.0f} req/J board, "
              f"{b['ok'] / (gj + host_j):.0f} req/J board + {cores} cores x {core_w:g} W")

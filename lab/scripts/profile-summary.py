#!/usr/bin/env python3
"""Prints the bench points and the gpu-persistent profile of `cohort-lab bench engine` JSON files."""
import json
import sys

for path in sys.argv[1:]:
    print("==", path)
    for r in json.load(open(path))["results"]:
        if "skipped" in r:
            print(" ", r["engine"], "skipped:", r["skipped"])
            continue
        if "profile" not in r:
            print(" ", r.get("engine"), r.get("service"), "window", r.get("window"), "q/s %.0f" % r["queries_per_s"],
                  "client p50 %.1f p99 %.1f us" % (r["latency_us"]["p50"], r["latency_us"]["p99"]))
            continue
        for p in r["profile"]:
            print("  profile: %d requests, globaltimer step %d ns" % (p["requests"], p["globaltimer_step_ns"]))
            for i in p["intervals"]:
                print("    %-18s p50 %8.2f  p90 %8.2f  p99 %8.2f  mean %8.2f us"
                      % (i["name"], i["p50_us"], i["p90_us"], i["p99_us"], i["mean_us"]))
            g = p["ingress"]
            print("    ingress warp: SM %.0f MHz, %d requests in %d visits (%.1f per visit)"
                  % (g["sm_clock_mhz"], g["requests"], g["visits"], g["requests_per_visit"]))
            for ph in g["phases"]:
                print("      %-45s %5.1f%%  %8.0f ns/request" % (ph["name"], 100 * ph["share"], ph["ns_per_request"]))

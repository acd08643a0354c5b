#!/usr/bin/env python3
"""Times pillar_client batch_get against a router: the Python half of
BenchmarkPythonVsGo (client_test.go), which runs the Go client on the same
batches against the same cluster and reports both.

    python3 bench.py --router 127.0.0.1:7400 --batches batches.txt --rounds 20

batches.txt: one batch a line, keys as comma-separated hex. Each round
reads every batch once (records decoded, embeddings included); prints one
JSON object: batches timed, p50/p90/p99/mean per-batch milliseconds.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pillar_client import Client  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--router", required=True)
    ap.add_argument("--batches", required=True)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2, help="rounds not timed")
    ap.add_argument("--pool-size", type=int, default=2)
    args = ap.parse_args()
    with open(args.batches) as f:
        batches = [[bytes.fromhex(h) for h in line.strip().split(",")] for line in f if line.strip()]
    times = []
    found = 0
    with Client(args.router, timeout=10.0, pool_size=args.pool_size) as c:
        for r in range(args.warmup + args.rounds):
            for b in batches:
                t0 = time.perf_counter()
                recs = c.batch_get(b)
                dt = time.perf_counter() - t0
                if len(recs) != len(b):
                    sys.exit("batch of %d keys: %d records" % (len(b), len(recs)))
                if r >= args.warmup:
                    times.append(dt)
                    found += len(recs)
    times.sort()
    q = lambda p: times[min(len(times) - 1, int(p * len(times)))] * 1e3  # noqa: E731
    print(json.dumps({"batches": len(times), "keys_per_batch": len(batches[0]), "records": found,
                      "p50_ms": q(0.50), "p90_ms": q(0.90), "p99_ms": q(0.99),
                      "mean_ms": statistics.fmean(times) * 1e3}))


if __name__ == "__main__":
    main()

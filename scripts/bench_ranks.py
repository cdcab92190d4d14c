"""Many ranks on Dask: `analyze --workers 2` on synthetic 8-, 64- and 256-rank folders.

    python scripts/bench_ranks.py [--sizes 8,64,256] [--workers 2] [--root /tmp/goodhart_bench_ranks]

The folders are built from the 8 DLRM ranks (tests/data/param/dlrm_8rank): rank r is a copy of
DLRM rank r % 8 with distributedInfo.rank = r, world_size = the folder's size, and its timestamps
shifted by (r // 8) x 3 us. Each size is measured in a fresh process (its own LocalCluster, as
`--workers` starts one): wall time of load + analysis + the JSON document (cluster start
included), the client's peak RSS, each worker's peak RSS (getrusage in the worker, through
`client.run`), and what one rank's tables weigh when they travel (pickled) and in the client.
"""
from __future__ import annotations

import argparse
import gzip
import json
import pickle
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DLRM = ROOT / "tests" / "data" / "param" / "dlrm_8rank"
SHIFT_US = 3.0


def build(folder: Path, n: int) -> Path:
    """`n` ranks made from the 8 DLRM ranks (kept when already built)."""
    if folder.is_dir() and len(list(folder.glob("*.json.gz"))) == n:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    sources = [json.loads(gzip.decompress(p.read_bytes())) for p in sorted(DLRM.glob("*.json.gz"))]
    for r in range(n):
        doc = json.loads(json.dumps(sources[r % len(sources)]))
        doc["distributedInfo"].update(rank=r, world_size=n)
        shift = (r // len(sources)) * SHIFT_US
        for event in doc["traceEvents"]:
            if isinstance(event.get("ts"), (int, float)):
                event["ts"] += shift
        (folder / f"rank{r:04d}.pt.trace.json.gz").write_bytes(
            gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    return folder


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def measure_one(folder: Path, workers: int) -> dict:
    """One size, in this process: what `analyze FOLDER --workers N --json` does, with the figures."""
    sys.path.insert(0, str(ROOT))
    import dask
    import distributed
    from goodhart_prof.analysis import analyze
    from goodhart_prof.report.json_report import to_document
    from goodhart_prof.trace.cluster import LOCAL_CONFIG, load_on_cluster, shipped
    from goodhart_prof.trace.load import load_rank_file

    started = time.perf_counter()
    with dask.config.set(LOCAL_CONFIG), \
            distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                     dashboard_address=None, silence_logs=50) as cluster, \
            distributed.Client(cluster) as client:
        up = time.perf_counter()
        trace = load_on_cluster(folder, scheduler=cluster.scheduler_address)
        loaded = time.perf_counter()
        text = json.dumps(to_document(analyze(trace), None))
        done = time.perf_counter()
        workers_mb = sorted(v / 1024 for v in client.run(
            lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss).values())
    one = shipped(load_rank_file, sorted(folder.glob("*.json.gz"))[0], 0)  # as it travels
    return {"ranks": len(trace.ranks), "events": len(trace.events), "wall_s": round(done - started, 2),
            "cluster_start_s": round(up - started, 2), "load_s": round(loaded - up, 2),
            "analyze_s": round(done - loaded, 2), "client_peak_rss_mb": round(peak_rss_mb()),
            "worker_peak_rss_mb": [round(v) for v in workers_mb],
            "events_table_mb": round(trace.events.memory_usage(deep=True).sum() / 2**20, 1),
            "rank_pickled_kb": round(len(pickle.dumps(one, protocol=5)) / 1024),
            "rank_events": len(one.table), "json_bytes": len(text)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,64,256")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--root", type=Path, default=Path("/tmp/goodhart_bench_ranks"))
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # a child: measure one folder
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_one(args.one, args.workers)))
        return
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        folder = build(args.root / f"ranks{n}", n)
        out = subprocess.run([sys.executable, __file__, "--one", str(folder), "--workers", str(args.workers)],
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    print("\n| ranks | events | wall s (cluster start, load, analysis) | client peak RSS MB | "
          "worker peak RSS MB |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['ranks']} | {r['events']:,} | {r['wall_s']} ({r['cluster_start_s']}, {r['load_s']}, "
              f"{r['analyze_s']}) | {r['client_peak_rss_mb']} | {', '.join(map(str, r['worker_peak_rss_mb']))} |")
    first, last = rows[0], rows[-1]
    grow = last["ranks"] / first["ranks"]
    print(f"\n{first['ranks']} -> {last['ranks']} ranks (x{grow:g}): wall x{last['wall_s'] / first['wall_s']:.1f}, "
          f"client RSS x{last['client_peak_rss_mb'] / first['client_peak_rss_mb']:.1f}, worker RSS "
          f"x{max(last['worker_peak_rss_mb']) / max(first['worker_peak_rss_mb']):.1f}")


if __name__ == "__main__":
    main()

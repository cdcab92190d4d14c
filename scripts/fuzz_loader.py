#!/usr/bin/env python3
"""Fuzz the trace loader for a while: `python scripts/fuzz_loader.py [--seconds 60] [--seed S]`.

Damaged versions of real traces (tests/support/trace_mutations.py: dropped keys, values of the wrong
type or out of range, NaN/Infinity, cut or garbage bytes, gzip or not), plus the hand-made
broken corpus (tests/support/broken_corpus.py) once at the start, go through the property that
tests/trace/test_load_properties.py checks in a bounded run: the loader loads the file and the
analysis and both reports run, or it raises TraceError with a one-line message naming the file.

Hypothesis generates the inputs in rounds of 200 with fresh randomness, without shrinking (a
failure is reported as found, with the damage that made it, and the input is kept under
--keep). Prints a line per round, then a table, and as its last line one JSON object:
{"tried", "loaded", "errors", "failures", "seconds", "failed_inputs"}. Exit code 1 when
anything failed.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402

import broken_corpus  # noqa: E402
from trace_mutations import check, damaged_file  # noqa: E402

ROUND = 200


class Fuzzer:
    def __init__(self, work: Path, keep: Path):
        self.work, self.keep = work, keep
        self.outcomes: Counter[str] = Counter()
        self.failures: list[dict] = []
        self.n = 0

    def try_path(self, path: Path, damage: list[str]) -> None:
        self.n += 1
        try:
            self.outcomes[check(path)] += 1
        except Exception as exc:  # noqa: BLE001 - every unexpected exception is a finding
            self.outcomes["failure"] += 1
            kept = self.keep / f"failure-{len(self.failures)}-{path.name}"
            self.keep.mkdir(parents=True, exist_ok=True)
            if path.is_dir():
                shutil.copytree(path, kept, dirs_exist_ok=True)
            elif path.exists():
                shutil.copyfile(path, kept)
            self.failures.append({"input": str(kept), "damage": damage,
                                  "error": f"{type(exc).__name__}: {exc}"[:300],
                                  "where": traceback.format_exc(limit=-3).splitlines()[-4:]})

    def one(self, data: bytes, done: list[str], gz: bool) -> None:
        path = self.work / f"mutant-{self.n}.json{'.gz' if gz else ''}"
        path.write_bytes(data)
        self.try_path(path, done)
        path.unlink()


def fuzz_round(fuzzer: Fuzzer, seed: int) -> None:
    @hypothesis_seed(seed)
    @settings(max_examples=ROUND, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(mutant=damaged_file())
    def run(mutant):
        data, done = mutant
        fuzzer.one(data, done, gz=len(data) % 2 == 0)

    run()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="How long to fuzz (default 60).")
    ap.add_argument("--seed", type=int, default=None, help="Seed of the first round (default: random).")
    ap.add_argument("--keep", type=Path, default=Path("fuzz-failures"),
                    help="Where failing inputs are copied (default ./fuzz-failures).")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as name:
        work = Path(name)
        fuzzer = Fuzzer(work, args.keep)
        corpus = broken_corpus.build(work / "corpus")
        for case in corpus.values():
            if not case.skip_reason and case.name not in ("fifo",):
                fuzzer.try_path(case.path, [f"corpus case {case.name}"])
        broken_corpus.restore_permissions(work / "corpus")
        rounds = 0
        while time.monotonic() - started < args.seconds:
            seed = rng.getrandbits(32)
            fuzz_round(fuzzer, seed)
            rounds += 1
            print(f"round {rounds} (seed {seed}): {fuzzer.n} inputs tried, "
                  f"{fuzzer.outcomes['failure']} failure(s), {time.monotonic() - started:.0f} s",
                  flush=True)
    seconds = time.monotonic() - started
    print()
    print(f"{'inputs tried':<28}{fuzzer.n:>10,}")
    print(f"{'  loaded and analysed':<28}{fuzzer.outcomes['loaded']:>10,}")
    print(f"{'  one-line TraceError':<28}{fuzzer.outcomes['error']:>10,}")
    print(f"{'  failures':<28}{fuzzer.outcomes['failure']:>10,}")
    print(f"{'seconds':<28}{seconds:>10.1f}")
    for failure in fuzzer.failures[:10]:
        print(f"FAILURE {failure['error']}\n  input: {failure['input']}\n  damage: {failure['damage']}")
        for line in failure["where"]:
            print(f"  {line}")
    print(json.dumps({"tried": fuzzer.n, "loaded": fuzzer.outcomes["loaded"],
                      "errors": fuzzer.outcomes["error"], "failures": fuzzer.outcomes["failure"],
                      "seconds": round(seconds, 1),
                      "failed_inputs": [f["input"] for f in fuzzer.failures]}))
    return 1 if fuzzer.failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""Broken and hostile trace inputs, generated on the fly (nothing big is committed).

`build(folder)` writes every case and says what `goodhart-prof analyze` must do with it: a
one-line error naming the file (`error` is a piece of that line, exit code 2), or a report
(`error` None) that counts `skipped` malformed events and shows `warning`.
Used by tests/trace/test_broken_inputs.py and scripts/fuzz_loader.py (as seeds).
"""
from __future__ import annotations

import gzip
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

DEEP = 100_000  # levels of nesting: far past msgspec's (and Python's) recursion limit


@dataclass
class Case:
    name: str
    path: Path
    error: str | None = None   # a piece of the one-line error; None: the input is analysed
    skipped: int = 0           # malformed events the report counts
    warning: str | None = None  # another warning the report shows
    skip_reason: str | None = None  # the case cannot be made here (e.g. chmod as root)


def event(ts=1.0, dur=2.0, name="aten::mm", cat="cpu_op", pid=1, tid=1, **extra) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, **extra}


def good_events() -> list[dict]:
    """A CPU op, its launch and the kernel it launched: enough for every report section."""
    return [
        event(10, 50, "aten::mm", args={"External id": 1}),
        event(12, 5, "cudaLaunchKernel", cat="cuda_runtime", args={"correlation": 7, "External id": 1}),
        event(20, 30, "gemm_kernel", cat="kernel", pid=0, tid=7,
              args={"device": 0, "stream": 7, "correlation": 7}),
    ]


def good_doc(events: list | None = None, **header) -> dict:
    return {"schemaVersion": 1, **header, "traceEvents": good_events() if events is None else events}


def _dump(doc) -> bytes:
    return json.dumps(doc).encode()


def _spliced(events_json: list[bytes]) -> bytes:
    """A document whose events are given as raw JSON text (for what json.dumps cannot write)."""
    return b'{"traceEvents":[' + b",".join(events_json) + b"]}"


def build(root: Path) -> dict[str, Case]:
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    cases: list[Case] = []

    def file(name: str, data: bytes, **expect) -> None:
        path = root / name
        path.write_bytes(data)
        cases.append(Case(name.split(".")[0], path, **expect))

    plain = _dump(good_doc())
    file("empty.json", b"", error="empty file")
    file("whitespace.json", b" \n\t \r\n", error="only whitespace")
    file("truncated.json", plain[: len(plain) * 2 // 3], error="not valid JSON")
    file("truncated_gzip.json.gz", gzip.compress(plain)[:40], error="truncated or corrupt gzip")
    file("corrupt_gzip.json.gz", b"\x1f\x8b" + bytes(range(256)) * 4, error="corrupt gzip")
    file("gzip_trailing_garbage.json.gz", gzip.compress(plain) + b"GARBAGE", error="corrupt gzip")
    file("gzip_suffix_on_plain.json.gz", plain)
    file("plain_suffix_on_gzip.json", gzip.compress(plain))
    file("two_gzip_members.json.gz", gzip.compress(plain[:50]) + gzip.compress(plain[50:]))
    file("binary_garbage.json", bytes((i * 7919 + 13) % 256 for i in range(16_384)),
         error="not valid JSON")
    file("trailing_text.json", plain + b" and then some", error="not valid JSON")
    file("utf16.json", json.dumps(good_doc()).encode("utf-16"), error="not valid JSON")
    file("utf8_bom.json", b"\xef\xbb\xbf" + plain)
    bad_utf8 = _dump(event(40, 1, "PLACEHOLDER")).replace(b"PLACEHOLDER", b"caf\xe9 \xff\xfe")
    file("non_utf8_name.json", _spliced([_dump(e) for e in good_events()] + [bad_utf8]), skipped=1)
    file("latin1_everywhere.json", _spliced([bad_utf8, bad_utf8]),
         error="none of its 2 events is well-formed")
    file("non_utf8_key.json", b'{"traceEvents": 3, "caf\xe9": 1}', error="not UTF-8 text")
    file("list_of_numbers.json", b"[1, 2, 3]", error="top level is a list")
    file("string.json", b'"traceEvents"', error="top level is a string")
    file("null.json", b"null", error="top level is null")
    file("no_trace_events.json", _dump({"schemaVersion": 1, "deviceProperties": []}),
         error="no traceEvents list")
    file("trace_events_number.json", b'{"traceEvents": 3}', error="traceEvents is a number, not a list")
    file("trace_events_object.json", b'{"traceEvents": {"ph": "X"}}', error="traceEvents is an object")
    file("trace_events_null.json", b'{"traceEvents": null}', error="traceEvents is null")
    wrong = [1, "x", None, [], {"ph": 5}, event(ts={}), event(name={"a": 1}), event(pid=[1]),
             event(args=[1, 2]), {"ts": 3}]
    file("wrong_types.json", _dump(good_doc(good_events() + wrong + [{"ph": "Z", "name": "other tool"}])),
         skipped=len(wrong))
    file("only_wrong_types.json", _dump(good_doc(wrong)), error=f"none of its {len(wrong)} events")
    missing = [{k: v for k, v in event(60, 1).items() if k != "ts"},
               {k: v for k, v in event(61, 1).items() if k != "dur"}]
    file("missing_ts_dur.json", _dump(good_doc(good_events() + missing)), skipped=1)
    file("negative_dur.json", _dump(good_doc(good_events() + [event(70, -5), event(71, -1e9)])))
    file("nan_infinity.json", _spliced([_dump(e) for e in good_events()] + [
        b'{"ph":"X","cat":"cpu_op","name":"nan ts","pid":1,"tid":1,"ts":NaN,"dur":1}',
        b'{"ph":"X","cat":"cpu_op","name":"inf dur","pid":1,"tid":1,"ts":80,"dur":Infinity}',
        b'{"ph":"X","cat":"cpu_op","name":"-inf ts","pid":1,"tid":1,"ts":-Infinity,"dur":1}']),
        skipped=2)
    file("huge_numbers.json", _spliced([_dump(e) for e in good_events()] + [
        _dump(event(90, 1, "huge ts")).replace(b'"ts": 90', b'"ts": ' + b"9" * 400),
        _dump(event(91, 1, "huge pid")).replace(b'"pid": 1', b'"pid": ' + b"7" * 30),
        _dump(event(92, 1, "huge dur")).replace(b'"dur": 1', b'"dur": ' + b"8" * 5000),
        _dump(event(93, 1, "float overflow")).replace(b'"ts": 93', b'"ts": 1e400'),
        _dump(event(94, 1, "huge stream", cat="kernel", pid=0, tid=2**70,
                    args={"device": 2**80, "stream": 2**90, "correlation": -(2**70)}))]),
        skipped=4)  # device 2^80 is no device: malformed (it used to read as absent: GPU 0)
    file("deep_nesting_in_event.json", _spliced([_dump(e) for e in good_events()] + [
        b'{"ph":"X","ts":1,"dur":1,"args":{"x":' + b"[" * DEEP + b"]" * DEEP + b"}}"]),
        error="nested too deeply")
    file("deep_nesting_header.json", b'{"traceName":' + b"[" * DEEP + b"]" * DEEP + b',"traceEvents":'
         + _dump(good_events()) + b"}", error="nested too deeply")
    file("deep_list_top.json", b"[" * DEEP + b"]" * DEEP, error="top level is a list")
    file("deep_nesting_unclosed.json", b'{"traceEvents":' + b"[" * DEEP, error="nested too deeply")
    file("zero_events.json", _dump(good_doc([])), error="no events")
    file("metadata_only.json", _dump(good_doc([{"ph": "M", "name": "process_name", "pid": 1,
                                               "args": {"name": "python"}}])), error="no events")
    odd_types = [event(100 + i, 1, "aten::mm", args={"Input type": value}) for i, value in enumerate(
        (3, [[1, 2], ["float"]], {"a": 1}, "float", [None, 1.5, "c10::BFloat16"], [], True))]
    file("odd_input_types.json", _dump(good_doc(good_events() + odd_types)))
    file("bad_rank.json", _dump(good_doc(distributedInfo={"rank": 2**40, "world_size": 2})),
         warning="ignored distributedInfo.rank")
    file("bad_header.json", _dump(good_doc(deviceProperties="many", baseTimeNanoseconds="now",
                                           distributedInfo=[1])))

    # -- ranks and GPUs (branch ranks): pids -> ranks, rank evidence that contradicts itself,
    # device and stream ids past int32 (tests/trace/test_rank_evidence.py has the exact figures)
    def rank_events(pid, rank: int) -> list[dict]:
        return [{**e, "pid": pid, "ts": e["ts"] + 1000 * rank, "args": {**e["args"], "device": 0}}
                if e["cat"] == "kernel" else {**e, "pid": pid, "ts": e["ts"] + 1000 * rank}
                for e in good_events()]

    def named(pid, rank: int) -> dict:
        return {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"rank {rank}"}}

    file("rank_string_pids.json", _dump(good_doc(
        [named("host0", 0), named("host1", 1)] + rank_events("host0", 0) + rank_events("host1", 1))))
    file("rank_info_vs_names.json", _dump(good_doc(
        [named(0, 0), named(1, 1)] + rank_events(0, 0) + rank_events(1, 1),
        distributedInfo={"rank": 5, "world_size": 8})),
        warning="rank evidence conflicts in rank_info_vs_names.json: distributedInfo.rank 5, "
                "process names rank 0/rank 1; using the process names")
    file("rank-1_info_5.json", _dump(good_doc(distributedInfo={"rank": 5})),
         warning="rank evidence conflicts in rank-1_info_5.json: distributedInfo.rank 5, "
                 "file name rank 1; using distributedInfo.rank")
    wide = [{**e, "name": f"wide {d} {s}", "ts": 60 + i, "args": {**e["args"], "device": d, "stream": s}}
            for i, (d, s) in enumerate([(2**31, 7), (2**32, 2**32), (2**63 - 1, 7), (-1, 7), (2**64, 7),
                                        (0, -3)])
            for e in good_events() if e["cat"] == "kernel"]
    file("gpu_ids_wide.json", _dump(good_doc(good_events() + wide)), skipped=3)
    superscript = [{**e, "args": {**e["args"], "device": "\u00b2", "stream": "\u00b2", "correlation": "\u00b2"}}
                   for e in good_events() if e["cat"] == "kernel"]  # "²".isdigit(), but int() refuses it
    file("superscript_ids.json", _dump(good_doc(good_events() + superscript)))
    conflict = root / "rank_folder_conflict"
    conflict.mkdir()
    (conflict / "rank-0.json").write_bytes(_dump(good_doc(distributedInfo={"rank": 0})))
    (conflict / "rank-1.json").write_bytes(_dump(good_doc(
        [named(1, 1), named(2, 2)] + rank_events(1, 1) + rank_events(2, 2), distributedInfo={"rank": 0})))
    cases.append(Case("rank_folder_conflict", conflict,
                      warning="rank evidence conflicts in rank-1.json: distributedInfo.rank 0, "
                              "process names rank 1/rank 2; using the process names"))
    twice = root / "rank_named_twice"
    twice.mkdir()
    (twice / "a.json").write_bytes(_dump(good_doc(distributedInfo={"rank": 1})))
    (twice / "b.json").write_bytes(_dump(good_doc([named(0, 0), named(1, 1)] + rank_events(0, 0)
                                                  + rank_events(1, 1))))
    cases.append(Case("rank_named_twice", twice, error="b.json: claims rank 1, like a.json"))

    # -- absurd times (docs/DESIGN.md "Times that fit a trace"): skipped and counted, or an error
    unfit = "1 with a time that does not fit the trace"
    far_kernel = dict(cat="kernel", pid=0, tid=7, args={"device": 0, "stream": 7, "correlation": 99})
    for case_name, ts, dur in (("time_dur_1e18", 30, 1e18), ("time_ts_1e308", 1.5e308, 10),
                               ("time_end_overflows", 1.7e308, 1.7e308), ("time_dur_11_days", 30, 1e12)):
        file(f"{case_name}.json", _dump(good_doc(good_events() + [event(ts, dur, "absurd", **far_kernel)])),
             skipped=1, warning=unfit)
    for base in (1e18, 1e17):  # every event beyond 2^53 us: doubles hold no whole microseconds there
        shifted = [{**e, "ts": base + e["ts"]} for e in good_events()]
        file(f"time_base_{base:.0e}.json", _dump(good_doc(shifted)),
             error="the trace's time base cannot be represented: 3 event(s) start or end beyond 2^53 us")
    file("time_lone_event_11_days.json", _dump(good_doc([event(10, 1e12)])),
         error="no events left: 1 event(s) last longer than 1,000x the span of the trace's starts and a day")
    file("time_step_25_digits.json", _dump(good_doc(good_events() + [
        event(5, 60, "ProfilerStep#" + "7" * 25, cat="user_annotation")])))

    # -- split decoding (branch split): ambiguous documents, and the fuzzer's float-id finding --
    events_json = _dump(good_events())
    file("duplicated_events_key.json", b'{"traceEvents":' + events_json + b',"traceEvents":'
         + _dump(good_events()[:1]) + b"}", error='duplicated top-level key "traceEvents"')
    file("duplicated_header_key.json", b'{"deviceProperties":[{"id":0}],"traceEvents":' + events_json
         + b',"deviceProperties":[{"id":1}]}', error='duplicated top-level key "deviceProperties"')
    file("float_id_then_bad_bytes.json", _spliced([_dump(e) for e in good_events()] + [
        b'{"ph":"X","cat":"cpu_op","name":"f","pid":1.5,"tid":1,"ts":1,"dur":1}', b'{"ph":"X",\x01}']),
        error="not valid JSON")
    file("event_list_after_events.json", b'{"traceEvents":' + events_json + b',"otherList":'
         + _dump([event(1000 + i, 1, "phantom", cat="kernel") for i in range(50)]) + b"}")

    empty_dir = root / "empty_folder"
    empty_dir.mkdir()
    (empty_dir / "notes.txt").write_text("no traces here\n")
    cases.append(Case("empty_folder", empty_dir, error="folder holds no trace files"))
    same = root / "same_rank"
    same.mkdir()
    for i in range(2):
        (same / f"worker{i}.json").write_bytes(_dump(good_doc(distributedInfo={"rank": 3})))
    cases.append(Case("same_rank", same, error="claims rank 3"))
    mixed = root / "one_broken_rank"
    mixed.mkdir()
    (mixed / "rank-0.json").write_bytes(_dump(good_doc(distributedInfo={"rank": 0})))
    (mixed / "rank-1.json").write_bytes(plain[:100])
    # One broken rank of several is skipped with a warning naming it (`--strict` stops instead).
    cases.append(Case("one_broken_rank", mixed, warning="skipped rank file rank-1.json: not valid JSON"))
    all_broken = root / "all_ranks_broken"
    all_broken.mkdir()
    for i in range(2):
        (all_broken / f"rank-{i}.json").write_bytes(plain[:100])
    cases.append(Case("all_ranks_broken", all_broken, error="rank-0.json: not valid JSON"))
    one_empty = root / "one_empty_rank"
    one_empty.mkdir()
    (one_empty / "rank-0.json").write_bytes(_dump(good_doc(distributedInfo={"rank": 0})))
    (one_empty / "rank-1.json").write_bytes(_dump(good_doc([], distributedInfo={"rank": 1})))
    cases.append(Case("one_empty_rank", one_empty, warning="rank-1.json: no events"))

    locked = root / "unreadable.json"
    locked.write_bytes(plain)
    locked.chmod(0)
    reason = None
    if os.access(locked, os.R_OK):  # root (or a capability) reads it anyway
        reason = "this user can read a chmod 000 file (root?): unreadability cannot be made here"
    cases.append(Case("unreadable", locked, error="cannot read (Permission denied)", skip_reason=reason))
    cases.append(Case("missing", root / "does_not_exist.json", error="no such file or folder"))
    cases.append(Case("name_too_long", root / ("x" * 300 + ".json"), error="cannot read"))
    fifo = root / "fifo.json"
    if hasattr(os, "mkfifo"):
        os.mkfifo(fifo)
        cases.append(Case("fifo", fifo, error="not a file or folder"))

    # -- server branch: file names holding a newline or an escape code (the error stays one line,
    # the name quoted with its escapes: textsafe.quote_path) ------------------------------------
    for label, odd in (("newline", "new\nline"), ("escape", "esc\x1b[2J\x07")):
        path = root / f"{odd}_malformed.json"
        path.write_bytes(plain[:100])
        cases.append(Case(f"{label}_in_name_malformed", path, error="not valid JSON"))
        cases.append(Case(f"{label}_in_name_missing", root / f"{odd}_missing.json",
                          error="no such file or folder"))

    # -- found by the fuzzer (the 300 s run of issue 20): a GPU `Optimizer.step#` annotation and a
    # synchronize call but no host op to climb from (sites.py indexed an empty host tree)
    file("annotation_without_host_ops.json", _dump(good_doc([
        event(10, 5, "cudaLaunchKernel", cat="cuda_runtime", args={"correlation": 7}),
        event(20, 40, "cudaDeviceSynchronize", cat="cuda_runtime", args={"correlation": 8}),
        event(20, 30, "k", cat="kernel", pid=0, tid=7, args={"device": 0, "stream": 7, "correlation": 7}),
        event(19, 35, "Optimizer.step#SGD.step", cat="gpu_user_annotation", pid=0, tid=7,
              args={"device": 0, "stream": 7})])))

    # -- scale2 (many devices): 300 GPUs idling across one host thread, the GPU work before time 0
    # (busy blocks that end before 0 kept their ends: tests/analysis/test_scale.py pins the figures) -----
    many = []
    for i in range(3000):
        t = -200_000.0 + 40.0 * i
        many.append(event(t, 20.0, "aten::mm", args={"External id": i + 1}))
        many.append(event(t + 2, 5.0, "cudaLaunchKernel", cat="cuda_runtime",
                          args={"correlation": i + 1, "External id": i + 1}))
        many.append(event(t + 9, 12.0, "gemm_kernel", cat="kernel", pid=1000 + i % 300, tid=7,
                          args={"device": i % 300, "stream": 7, "correlation": i + 1}))
    (root / "many_gpus_before_zero.json").write_bytes(_dump(good_doc(many)))
    cases.append(Case("many_gpus_before_zero", root / "many_gpus_before_zero.json"))
    return {c.name: c for c in cases}


def restore_permissions(root: Path) -> None:
    """So that pytest can delete the folder afterwards."""
    for path in Path(root).rglob("*"):
        if not path.is_symlink() and path.exists():
            path.chmod(path.stat().st_mode | stat.S_IRUSR | stat.S_IWUSR)


# -- writes (branch "writes"): hostile run.json files, read by `log add` (and the run folders) ----
RUN_JSON_BYTES = 17 << 20  # past trace/run_json.py MAX_BYTES (16 MiB); generated, never committed


def run_json_cases(root: Path) -> dict[str, Case]:
    """Run folders (a good trace plus a hostile run.json) that `log add` must refuse in one line
    naming the run.json (`error` a piece of it), exit 2."""
    root = Path(root)
    cases: list[Case] = []

    def folder(name: str, run_json: bytes, error: str) -> None:
        path = root / name
        path.mkdir(parents=True, exist_ok=True)
        (path / "rank-0.json").write_bytes(_dump(good_doc()))
        (path / "run.json").write_bytes(run_json)
        cases.append(Case(name, path / "run.json", error=error))

    deep = 1_000_000  # msgspec's recursion limit is below this; Python's json is far below
    folder("run_json_deep", b'{"config":' + b"[" * deep + b"]" * deep + b"}", "nested too deeply")
    folder("run_json_huge", b'{"pad": "' + b"x" * RUN_JSON_BYTES + b'"}', "a run.json is at most 16 MiB")
    folder("run_json_true_rate", b'{"env_steps_per_s": true}',
           "Expected `float | null`, got `bool` - at `$.env_steps_per_s`")
    folder("run_json_zero_world", b'{"world_size": 0}', "Expected `int` >= 1 - at `$.world_size`")
    folder("run_json_bool_window", b'{"profiling": {"enabled": true, "iterations": [1, true]}}',
           "at `$.profiling.iterations[1]`")
    folder("run_json_list", b"[1, 2]", "the top level is not an object")
    folder("run_json_not_json", b"{not json", "not JSON")
    return {c.name: c for c in cases}

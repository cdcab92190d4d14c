"""summary.md of a GPU acceptance run (scripts/gpu_acceptance.py): one markdown table per step,
written from results.json alone, ready to paste into docs/gpu.md. A figure that was not measured
is written `-`, with the reason where the results give one; nothing is estimated here."""
from __future__ import annotations

from typing import Any, Iterable

TOP_PHASES = ("rollout", "gae", "ppo_update", "logging")


def _n(x: Any, spec: str = ",.0f") -> str:
    if x is None or x == "":
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, (int, float)):
        return format(x, spec)
    return str(x)


def _table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |")
    return lines


def _env(r: dict[str, Any]) -> list[str]:
    mm, cp = r.get("matmul") or {}, r.get("copy_device") or {}
    rows = [("device", _n(r.get("device"))), ("driver", _n(r.get("driver"))),
            ("torch / triton / CUDA", f"{_n(r.get('torch'))} / {_n(r.get('triton'))} / {_n(r.get('cuda'))}"),
            ("python", _n(r.get("python"))),
            (f"matrix product {mm.get('dtype', '?')} {mm.get('n', '?')}^3", f"{_n(mm.get('tflops'), '.1f')} TFLOP/s"),
            ("copy device to device (read + write)", f"{_n(cp.get('gb_per_s'), ',.0f')} GB/s"),
            ("copy host to device, pinned", f"{_n((r.get('htod_pinned') or {}).get('gb_per_s'), '.1f')} GB/s"),
            ("copy host to device, pageable", f"{_n((r.get('htod_pageable') or {}).get('gb_per_s'), '.1f')} GB/s")]
    return _table(("what", "measured"), rows)


def _smoke(r: dict[str, Any]) -> list[str]:
    syncs = r.get("host_syncs")
    if syncs == "found":
        syncs = f"found: {r.get('sync_error')} at {'; '.join(r.get('sync_at') or []) or '?'}"
    rows = [("env count x rollout steps", f"{_n(r.get('n_envs'))} x {_n(r.get('rollout_steps'))}"),
            ("compiled / bf16 autocast", f"{_n(r.get('compiled'))} / {_n(r.get('amp'))}"),
            ("first iteration with compile (warm-up)", f"{_n(r.get('warmup_s'), '.2f')} s "
             f"({'cold cache' if r.get('cache_was_empty') else 'cache already filled'})"),
            ("host syncs in one iteration (sync debug mode)", _n(syncs) if r.get("sync_debug") == "error"
             else f"- ({_n(r.get('sync_debug'))})"),
            ("iteration times after warm-up", ", ".join(f"{t:.3f} s" for t in r.get("iteration_s") or []) or "-"),
            ("env-steps/s (median of those)", _n(r.get("env_steps_per_s"))),
            ("peak memory allocated", f"{_n(r.get('max_memory_allocated_gib'), '.2f')} GiB")]
    return _table(("what", "measured"), rows)


def _bench(r: dict[str, Any]) -> list[str]:
    rows = []
    for b in r.get("runs", []):
        spread = (b.get("spread") or {}).get("sps")
        phases = b.get("phase_s") or {}
        rows.append((_n(b["n_envs"]), b["variant"], _n(b.get("sps")),
                     f"{_n(spread[0])} .. {_n(spread[1])}" if spread else "-",
                     _n(b.get("rollout_sps")),
                     " / ".join(_n(phases.get(k), ".4f") for k in TOP_PHASES),
                     _n(b.get("warmup_s"), ".1f"),
                     b["status"] + (f": {b['error']}" if b.get("error") else "")))
    lines = _table(("envs", "variant", "env-steps/s end to end", "min .. max", "rollout env-steps/s",
                    "rollout / gae / update / logging s", "warm-up s", "status"), rows)
    naive = [b.get("naive_rollout_sps") for b in r.get("runs", []) if b.get("naive_rollout_sps")]
    if naive:
        lines.append("")
        lines.append(f"Naive per-env loop (one env at a time, batch-1 forward): {naive[0]:,.0f} env-steps/s.")
    return lines


def _zoo(r: dict[str, Any]) -> list[str]:
    s = r.get("summary")
    if not s:
        return [f"No zoo summary ({r.get('status')})."]
    lines = [f"recall {_n(s.get('recall'), '.3f')}, precision {_n(s.get('precision'), '.3f')}; "
             f"detected: {', '.join(s.get('detected') or []) or '-'}; missed: "
             f"{', '.join(s.get('missed') or []) or '-'}; failed: "
             f"{', '.join(str(x) for x in (s.get('failed') or [])) or '-'}; not run: "
             f"{', '.join(s.get('not_run') or []) or '-'}; not measurable on this device: "
             f"{', '.join(s.get('not_measurable') or []) or '-'}", ""]
    slow = s.get("slowdowns") or {}
    spreads = s.get("slowdown_spread") or s.get("spreads") or {}
    rows = []
    for name, value in slow.items():
        spread = spreads.get(name)
        text = f"{_n(spread[0], '.2f')} .. {_n(spread[1], '.2f')}" if isinstance(spread, (list, tuple)) \
            and len(spread) == 2 else "-"
        rows.append((name, f"{_n(value, '.2f')}x", text))
    lines += _table(("pattern", "slowdown vs clean (median per env-step)", "IQR"), rows)
    return lines


def _traces(r: dict[str, Any]) -> list[str]:
    rows = [(p["name"], p["mode"], f"{p['trace_bytes'] / 1e6:.2f}", p.get("analysis", "-"),
             ", ".join(p.get("findings") or []) or "-") for p in r.get("packed", [])]
    lines = _table(("run", "mode", "trace MB", "analyze --json", "findings fired"), rows)
    for p in r.get("left_out", []):
        lines.append(f"- left out of traces.tar: {p['name']} ({p['mode']}): {p['why']}")
    not_run = [x["name"] for x in r.get("lite_runs", []) if x["status"] != "ok"]
    if not_run:
        lines.append(f"- lite runs not done: {', '.join(not_run)}")
    for c in r.get("counter_runs", []):
        cupti = c.get("cupti")
        said = ("no `cupti_counters` section" if not cupti else
                f"{cupti.get('ranges')} ranges, matched to launches: {cupti.get('matched')}"
                + (f" ({cupti['note']})" if cupti.get("note") else ""))
        lines.append(f"- {c['name']} with PROF_COUNTERS=default: {c['status']}"
                     + (f"; {said}" if c["status"] == "ok" else ""))
    return lines


RENDER = {"env": ("Environment", _env), "smoke": ("Smoke iteration", _smoke),
          "bench": ("Trainer throughput (scripts/bench_train.py)", _bench),
          "zoo": ("The zoo (scripts/bench_zoo.py)", _zoo),
          "traces": ("Traces (traces.tar)", _traces)}


def write_summary(results: dict[str, Any]) -> str:
    kind = "dry run on the CPU" if results.get("dry_run") else "GPU run"
    lines = [f"# GPU acceptance ({kind}), started {results.get('started')}", "",
             f"Budget {results.get('budget_s'):.0f} s, {results.get('elapsed_s', 0):.0f} s used; "
             f"steps asked: {', '.join(results.get('steps_asked', []))}.", ""]
    for step, (title, render) in RENDER.items():
        r = results.get("steps", {}).get(step)
        if r is None:
            continue
        lines.append(f"## {title}: {r.get('status')} in {_n(r.get('step_s'), '.1f')} s "
                     f"(deadline {_n(r.get('deadline_s'), '.0f')} s)")
        lines.append("")
        if r.get("error") and step in ("env", "smoke"):
            lines.append(f"Error: {r['error']} at {'; '.join(r.get('at') or []) or '?'}")
        else:
            lines += render(r)
        lines.append("")
    return "\n".join(lines) + "\n"

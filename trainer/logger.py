"""Asynchronous metrics logging: the training thread never waits for the device.

Once per iteration the trainer stacks its metrics into one device tensor and calls `submit`.
That starts a non-blocking copy into pinned host memory and records a CUDA event (on the CPU
the copy is simply a clone). A background thread waits for the event, converts the numbers,
appends a JSON line to the metrics file and moves the progress bar. Iteration times come from
the device's own clock (CUDA events) on the GPU, so they measure work done, not work queued.
"""
from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from goodhart_prof.fileio import write_error

from .signals import deferred


@dataclass
class _Item:
    iteration: int
    env_steps: int
    host: torch.Tensor
    done_event: Any        # torch.cuda.Event or None
    marker: Any            # torch.cuda.Event (timing) or float (perf_counter)


class AsyncLogger:
    def __init__(self, names: Sequence[str], metrics_path: Path | None, device: torch.device,
                 progress: bool = True, total: int | None = None, initial: int = 0,
                 exclude_from_rate: frozenset[int] = frozenset()):
        self.names = list(names)
        self.device = device
        self.cuda = device.type == "cuda"
        self.exclude = exclude_from_rate
        self._queue: "queue.Queue[_Item | None]" = queue.Queue(maxsize=64)
        self._path = metrics_path
        try:
            self._fh = open(metrics_path, "a") if metrics_path else None
        except OSError as exc:
            raise write_error(metrics_path, exc) from None
        self._bar = None
        if progress:
            from tqdm import tqdm
            self._bar = tqdm(total=total, initial=initial, unit="it", dynamic_ncols=True,
                             desc="train", leave=True)
        self._last_marker = self._mark()
        self.rows: list[dict[str, Any]] = []
        self.timed_steps = 0
        self.timed_seconds = 0.0
        self.all_steps, self.all_seconds = 0, 0.0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="goodhart-logger", daemon=True)
        self._thread.start()

    def _mark(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def submit(self, iteration: int, env_steps: int, values: torch.Tensor) -> None:
        """Queue one iteration's metrics (a 1-D device tensor in the order of `names`)."""
        if self.cuda:
            host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
            host.copy_(values, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
        else:
            host, done = values.detach().clone(), None
        item = _Item(iteration, env_steps, host, done, self._mark())
        with deferred():  # never interrupted holding the queue's lock (trainer/signals.py)
            self._queue.put(item)

    def _run(self) -> None:
        previous = self._last_marker  # the clock starts when the logger is made
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if item.done_event is not None:
                    item.done_event.synchronize()
                    item.marker.synchronize()
                    seconds = previous.elapsed_time(item.marker) / 1000.0
                else:
                    seconds = item.marker - previous
                previous = item.marker
                self._write(item, seconds)
            except BaseException as exc:  # keep draining so the trainer never blocks on us
                self.error = self.error or exc
            finally:
                self._queue.task_done()

    def _write(self, item: _Item, seconds: float) -> None:
        values = item.host.tolist()
        row: dict[str, Any] = {"iteration": item.iteration, "env_steps": item.env_steps,
                               "iteration_s": round(seconds, 6),
                               "env_steps_per_s": round(item.env_steps / seconds, 1) if seconds > 0 else None}
        row.update({k: (None if v != v else round(v, 6)) for k, v in zip(self.names, values)})
        if "proxy_return" in row and "true_return" in row:
            # None when no whole episode ended in this iteration.
            both = row["proxy_return"] is not None and row["true_return"] is not None
            row["goodhart_gap"] = round(row["proxy_return"] - row["true_return"], 6) if both else None
        self.all_steps += item.env_steps
        self.all_seconds += seconds
        if item.iteration not in self.exclude:
            self.timed_steps += item.env_steps
            self.timed_seconds += seconds
        self.rows.append(row)
        if self._fh:
            self._fh.write(json.dumps(row) + "\n")
            self._fh.flush()
        if self._bar is not None:
            self._bar.set_postfix_str(
                f"sps={row['env_steps_per_s'] or 0:,.0f} proxy={_fmt(row.get('proxy_return'))} "
                f"true={_fmt(row.get('true_return'))}", refresh=False)
            self._bar.update(1)

    def close(self) -> None:
        with deferred():
            self._queue.put(None)
        self._thread.join()
        if self._fh:
            try:
                self._fh.close()
            except OSError as exc:
                self.error = self.error or exc
        if self._bar is not None:
            self._bar.close()
        if isinstance(self.error, OSError):  # disk full, a folder gone read-only: one line
            raise write_error(self._path, self.error) from None
        if self.error is not None:
            raise RuntimeError(f"metrics logger failed: {self.error}") from self.error

    @property
    def env_steps_per_s(self) -> float | None:
        """Throughput over the untraced iterations (all of them if every one was traced)."""
        if self.timed_seconds > 0:
            return self.timed_steps / self.timed_seconds
        return self.all_steps / self.all_seconds if self.all_seconds > 0 else None


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.2f}"

"""Batch grading on Ray: items stream through Ray Data to engine replicas, results come back as
batches finish.

    stats = run_batches(payloads, batch_fn, engine_cfg=cfg.engine, runtime=runtime,
                        done=finished_keys, on_result=lambda key, result: sink.append(key, result))

`payloads` are `(key, item)` pairs (any picklable item). They become a Ray dataset
(`ray.data.from_items`), one block per `runtime.batch_size` items, mapped by a stateful stage
(`map_batches` over a callable class on an `ActorPoolStrategy` of `runtime.replicas` actors): each
replica builds its engine ONCE (judge.engines.build_engine, placed by scale.placement) and applies
`batch_fn(engine, items) -> list[json-able result]` to every batch it gets. `batch_fn` must be a
module-level function (or a functools.partial of one): the replicas import it. The caller's
per-batch logic (the grade client's, eval's `grade_units`) runs unchanged inside the replica, so
every sample still gets its completed distribution and the records are the local path's.

Why not Ray Data's LLM processor (`build_processor`): it keeps only the first of n completions and
cannot read the log-probabilities of given token ids, which score completion needs.

The driver consumes the results streaming (`iter_batches`) and calls `on_result(key, result)` for
each item as its batch finishes, once per key even if Ray executed a batch twice; keys in `done`
are not sent (a rerun after a kill does only what is missing). A replica whose process dies mid-
batch is restarted by Ray (`max_restarts`, its engine built again) and its batch retried
(`max_task_retries`); a Python error in `batch_fn` is not retried: it is a bug, raised here.

Ray: an existing cluster (`runtime.address`, or $RAY_ADDRESS), or a local one started for the run
with just the CPUs the replicas need, no dashboard, and shut down after; a local one's processes end
with the driver even when it is killed (judgeforge.watchdog). Replica logs stay in Ray's session
directory (/tmp/ray/session_latest/logs), not on this terminal.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pickle
import signal
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from judgeforge.config import ConfigError
from judgeforge.hardware import CoreLeases
from judgeforge.scale.config import RuntimeConfig
from judgeforge.watchdog import Watchdog, end

log = logging.getLogger(__name__)

BatchFn = Callable[[object, list], list]
"""(engine, items) -> one json-able result per item, in order; runs inside a replica."""


class ScaleError(RuntimeError):
    """A Ray run could not finish: a replica's engine did not start, or Ray gave up on a batch."""


@dataclass
class RunStats:
    sent: int = 0
    """Items sent to Ray (those not in `done`)."""
    skipped: int = 0
    """Items already done before the run (`done`)."""
    duplicates: int = 0
    """Results of an item that came back again (a batch Ray re-executed): dropped."""
    replica_pids: set[int] = field(default_factory=set)
    """Processes that returned results (a restarted replica is a new process)."""
    seconds: float = 0.0
    """Wall time of the Ray part (start of the replicas included)."""

    @property
    def items_per_s(self) -> float | None:
        return self.sent / self.seconds if self.seconds > 0 else None


class _Replica:
    """The stateful stage: one engine per replica, built when Ray starts (or restarts) the actor."""

    def __init__(self, engine_cfg, runtime: RuntimeConfig, batch_fn: BatchFn):
        from judgeforge.judge.engines import build_engine
        from judgeforge.scale.placement import place_replica

        cfg, self._lease = place_replica(engine_cfg, runtime)
        self.engine = build_engine(cfg)
        self.batch_fn = batch_fn

    def __del__(self):
        # Ray Data drops the replica on a graceful shutdown (and Python after a failed __init__): its
        # cores are free for the next engine at once. A replica killed instead leaves its lease to the
        # next engine's liveness check (judgeforge.hardware.CoreLeases), which drops it.
        CoreLeases.release(getattr(self, "_lease", None))
        self._lease = None

    def __call__(self, batch: dict) -> dict:
        import numpy as np

        items = [pickle.loads(p) for p in batch["payload"]]
        results = self.batch_fn(self.engine, items)
        if len(results) != len(items):
            raise RuntimeError(f"batch_fn returned {len(results)} results for {len(items)} items")
        return {"key": np.asarray(batch["key"], dtype=object),
                "result": np.array([json.dumps(r, ensure_ascii=False) for r in results], dtype=object),
                "replica": np.full(len(items), os.getpid(), dtype=np.int64)}


def run_batches(payloads: Sequence[tuple[str, object]], batch_fn: BatchFn, *, engine_cfg,
                runtime: RuntimeConfig, on_result: Callable[[str, object], None],
                done: set[str] | frozenset[str] = frozenset(), desc: str | None = "grading",
                unit: str = "item") -> RunStats:
    """Run `batch_fn` over every payload not in `done` on Ray replicas of `engine_cfg`'s engine;
    `on_result(key, result)` once per key as batches finish. `desc`: the progress bar over items
    (None: the caller counts them, e.g. in its own bar). Raises ScaleError when Ray gives up."""
    keys = [k for k, _ in payloads]
    if len(set(keys)) != len(keys):
        raise ValueError("run_batches: payload keys must be unique")
    todo = [(k, obj) for k, obj in payloads if k not in done]
    stats = RunStats(sent=len(todo), skipped=len(payloads) - len(todo))
    if not todo:
        return stats
    from judgeforge.progress import keep_logs_above, progress

    t0, seen = time.perf_counter(), set()
    with ray_session(runtime) as cpus:
        _prepare_models(engine_cfg, runtime)
        placed = runtime.model_copy(update={"num_cpus": runtime.cpus_per_replica(cpus)})
        ds = _dataset(todo, batch_fn, engine_cfg, placed)
        bar = progress(total=len(payloads), initial=stats.skipped, desc=desc or "", unit=unit,
                       enabled=desc is not None)
        with keep_logs_above(bar), bar:
            for key, result, pid in _results(ds):
                if key in seen:
                    stats.duplicates += 1
                    continue
                seen.add(key)
                stats.replica_pids.add(pid)
                on_result(key, result)
                bar.update(1)
    stats.seconds = time.perf_counter() - t0
    if len(seen) != stats.sent:
        raise ScaleError(f"Ray finished without results for {stats.sent - len(seen)} of {stats.sent} "
                         f"item(s)")
    if stats.duplicates:
        log.info("dropped %d duplicate result(s) of re-executed batches", stats.duplicates)
    return stats


def _dataset(todo: list[tuple[str, object]], batch_fn: BatchFn, engine_cfg, runtime: RuntimeConfig):
    import ray.data

    rows = [{"key": k, "payload": pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)} for k, obj in todo]
    ds = ray.data.from_items(rows, override_num_blocks=math.ceil(len(rows) / runtime.batch_size))
    with warnings.catch_warnings():
        # Ray Data 2.60 takes an actor's restart and retry limits only as `ray_remote_args`, which it
        # marks deprecated (removal announced for 2.64) without a named parameter to use instead.
        warnings.filterwarnings("ignore", message=".*ray_remote_args.* is deprecated")
        return ds.map_batches(
            _Replica, fn_constructor_kwargs={"engine_cfg": engine_cfg, "runtime": runtime, "batch_fn": batch_fn},
            compute=ray.data.ActorPoolStrategy(size=runtime.replicas), batch_size=runtime.batch_size,
            batch_format="numpy", num_cpus=runtime.num_cpus, num_gpus=runtime.num_gpus or None,
            max_restarts=runtime.max_restarts, max_task_retries=runtime.max_task_retries)


def _results(ds) -> Iterator[tuple[str, object, int]]:
    """(key, result, replica pid) as the batches finish; Ray's failures as ScaleError."""
    import ray.exceptions

    try:
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            for key, res, pid in zip(batch["key"], batch["result"], batch["replica"]):
                yield str(key), json.loads(res), int(pid)
    except ray.exceptions.RayError as e:
        raise ScaleError(f"a replica failed: {_cause(e)}") from e


def _cause(e: BaseException) -> str:
    """Ray's errors carry the remote traceback; its last unindented line is the exception itself."""
    lines = [ln for ln in str(e).splitlines() if ln.strip() and not ln[0].isspace()]
    return lines[-1] if lines else type(e).__name__


def _prepare_models(engine_cfg, runtime: RuntimeConfig) -> None:
    """`default` / `default-judge` are converted (merged) on first use: done once here, on a local
    Ray, instead of by every replica at the same moment. A cluster's nodes prepare their own."""
    if runtime.cluster_address() is None and engine_cfg.kind in ("vllm", "transformers"):
        from judgeforge.judge.weights import resolve_model

        resolve_model(engine_cfg.model)


def _import_ray():
    try:
        import ray
        import ray.data  # noqa: F401  (the extra is `ray[data]`)
    except ImportError as e:
        raise ConfigError(f"runtime kind ray needs Ray Data: pip install 'judgeforge[ray]' ({e})") from None
    return ray


@contextmanager
def ray_session(runtime: RuntimeConfig) -> Iterator[int]:
    """Ray for one run; yields the CPUs of the machine the replicas' share is computed from.
    An already connected Ray is used as it is and left running; one started here is shut down."""
    ray = _import_ray()
    machine_cpus = os.cpu_count() or 1
    if ray.is_initialized():
        _configure_data()
        _check_resources(ray, runtime, machine_cpus)
        yield machine_cpus
        return
    address = runtime.cluster_address()
    # A local Ray's GCS and raylet die with this process, but not its agents and workers: the watchdog
    # ends them when this process is killed (kill -9 included) before it could shut Ray down.
    dog = None if address else Watchdog.start()
    try:
        _init(ray, runtime, address, machine_cpus)
        try:
            _configure_data()
            _check_resources(ray, runtime, machine_cpus)
            yield machine_cpus
        finally:
            ray.shutdown()
    finally:
        if dog is not None:
            dog.stop()


def _init(ray, runtime: RuntimeConfig, address: str | None, machine_cpus: int) -> None:
    """Connect to the cluster at `address`, or start a local Ray (None); failures as ConfigError."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        with _program_keeps_sigterm():
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                need = runtime.replicas * runtime.cpus_per_replica(machine_cpus)
                _start_local(ray, num_cpus=max(machine_cpus, math.ceil(need)),
                             object_store_memory=runtime.object_store_mb * 2**20)
    except (ConnectionError, ValueError, RuntimeError) as e:
        if not address:
            raise ConfigError(f"cannot start a local Ray ({type(e).__name__}: {e})") from None
        # Ray 2.60 clusters check a token by default; a driver sends it only in token mode.
        raise ConfigError(f"cannot connect to the Ray cluster at {address} ({type(e).__name__}: {e}): check "
                          f"runtime.address or $RAY_ADDRESS; a cluster with token authentication (Ray's default) "
                          f"also needs RAY_AUTH_MODE=token and its token (~/.ray/auth_token or "
                          f"$RAY_AUTH_TOKEN) here") from None


@contextmanager
def _program_keeps_sigterm() -> Iterator[None]:
    """ray.init installs its own SIGTERM handler (`sys.exit(15)`) for the rest of the process, which
    would bypass the program's (the CLI's `Terminated`: its exit status, its log line). The program's
    handler is put back once init returns, and a SIGTERM that Ray's took during init is handed to it."""
    if threading.current_thread() is not threading.main_thread():
        yield  # Ray sets no handler off the main thread either
        return
    ours = signal.getsignal(signal.SIGTERM)
    try:
        yield
    except SystemExit as e:
        signal.signal(signal.SIGTERM, ours)
        if e.code == signal.SIGTERM and callable(ours):
            ours(signal.SIGTERM, None)
        raise
    signal.signal(signal.SIGTERM, ours)


def _start_local(ray, **kwargs) -> None:
    """A new local Ray (`address="local"`, even where an earlier `ray start` left its address behind).
    ray.init spawns the GCS, the raylet and its agents before it returns: a stop that lands in between
    leaves a node ray.shutdown() may not know, whose agents outlive the raylet re-parented and ignoring
    SIGTERM. So whatever the start spawned is ended here when init does not return."""
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    try:
        ray.init(address="local", include_dashboard=False, log_to_driver=False, **kwargs)
    except BaseException:
        ray.shutdown()
        end([p for p in psutil.Process().children(recursive=True) if p.pid not in before],
            why="Ray's start was stopped")
        raise


def _configure_data() -> None:
    """judgeforge draws the one progress bar (over items) and logs; Ray Data's own bars and
    execution banners would interleave with it."""
    from ray.data import DataContext

    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    ctx.verbose_stats_logs = False


def _check_resources(ray, runtime: RuntimeConfig, machine_cpus: int) -> None:
    """Replicas that cannot all be placed would make Ray wait for resources forever."""
    have = ray.cluster_resources()
    need = {"CPU": runtime.replicas * runtime.cpus_per_replica(machine_cpus),
            "GPU": runtime.replicas * runtime.num_gpus}
    short = {r: (n, have.get(r, 0)) for r, n in need.items() if n > have.get(r, 0)}
    if short:
        what = ", ".join(f"{n:g} {r} (the cluster has {h:g})" for r, (n, h) in short.items())
        raise ConfigError(f"{runtime.replicas} replica(s) need {what}: lower runtime.replicas, "
                          f"runtime.num_cpus or runtime.num_gpus")

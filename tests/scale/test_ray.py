"""Batch grading and evaluation on Ray replicas, on the transformers engine over a tiny random Llama:
the records are the local path's, every input appears exactly once, a rerun does only what is
missing, and a replica killed mid-batch is restarted with its batch retried."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import sys
import threading
import time
from functools import partial
from pathlib import Path

import pytest

from judgeforge.config import ConfigError, load_config
from judgeforge.serve import client

ENGINE = ["engine.kind=transformers", "engine.dtype=float32", "sampling.temperature=0", "sampling.max_tokens=8"]


def requests(path: Path, k: int = 9) -> Path:
    """k gradings, a comparison and a request refused before any engine (an unknown rubric preset)."""
    bodies = [{"id": f"r{i}", "instruction": "What is 2+2?", "response": f"answer {i}", "rubric": "helpfulness",
               "n": 1} for i in range(k)]
    bodies.insert(3, {"instruction": "Pick one", "response_a": "4", "response_b": "5", "rubric": "helpfulness",
                      "n": 1})
    bodies.append({"instruction": "x", "response": "y", "rubric": "no-such-preset"})
    path.write_text("".join(json.dumps(b) + "\n" for b in bodies))
    return path


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def assert_same(a, b, path="record"):
    """Equal records, floats within the engines' tolerance (the same greedy request, other batches)."""
    if isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5), f"{path}: {a} != {b}"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"{path}: fields {sorted(a)} != {sorted(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), f"{path}: {len(a)} != {len(b)} elements"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


@pytest.fixture(scope="module")
def local_output(tiny_model, tmp_path_factory):
    """The local path's records for the same requests (what every Ray run must reproduce)."""
    d = tmp_path_factory.mktemp("local")
    inp, out = requests(d / "in.jsonl"), d / "out.jsonl"
    assert client.main(["-i", str(inp), "-o", str(out), "--local", f"engine.model={tiny_model}", *ENGINE]) == 3
    return inp, lines(out)


def test_grade_on_two_replicas_writes_the_local_records_and_resumes(ray_cluster, tiny_model, local_output,
                                                                    tmp_path, caplog):
    caplog.set_level(logging.INFO)
    inp, local = local_output
    out = tmp_path / "out.jsonl"
    args = ["-i", str(inp), "-o", str(out), "--ray", "--replicas", "2", f"engine.model={tiny_model}", *ENGINE,
            "runtime.batch_size=3"]
    assert client.main(args) == client.EXIT_SOME_FAILED  # the unknown preset fails alone, as locally
    ray_recs = lines(out)
    assert [r["line"] for r in ray_recs] == list(range(1, len(local) + 1))  # every input exactly once
    assert_same(ray_recs, local)
    assert "winner" in ray_recs[3]["result"] and ray_recs[-1]["error"]["status"] == 422
    assert all(r["result"]["score_probs"] for r in ray_recs[:-1] if "score" in r["result"])

    # Killed after 4 results (and mid-write of a 5th): the rerun grades only the 6 missing lines.
    out.write_text("".join(json.dumps(r) + "\n" for r in ray_recs[:4]) + '{"line": 5, "ind')
    caplog.clear()
    assert client.main(args) == client.EXIT_SOME_FAILED
    assert "graded=6 failed=1 skipped=4" in caplog.text  # the failed line is retried, as locally
    assert_same(lines(out), local)


def test_grade_ray_flags_are_checked(tmp_path, capsys):
    inp = requests(tmp_path / "in.jsonl", 1)
    with pytest.raises(SystemExit):
        client.parse_args(["-i", str(inp), "-o", str(tmp_path / "o"), "--replicas", "2"])
    assert "--replicas needs --ray" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        client.parse_args(["-i", str(inp), "-o", str(tmp_path / "o"), "--ray", "--local"])
    assert "not allowed with argument" in capsys.readouterr().err
    code = client.main(["-i", str(inp), "-o", str(tmp_path / "o"), "--ray", "runtime.replica=2"])
    assert code == client.EXIT_USAGE  # a wrong runtime key: a config error, before any Ray starts


def test_a_replica_whose_engine_cannot_start_fails_the_run_with_its_reason(ray_cluster, tmp_path, caplog):
    inp, out = requests(tmp_path / "in.jsonl", 2), tmp_path / "out.jsonl"
    code = client.main(["-i", str(inp), "-o", str(out), "--ray", "engine.kind=transformers",
                        f"engine.model={tmp_path / 'no-such-model'}"])
    assert code == client.EXIT_UNREACHABLE  # as a --local engine that cannot start
    assert "cannot grade on Ray: a replica failed: OSError" in caplog.text
    assert [r["line"] for r in lines(out)] == [4]  # only the line refused before any engine


def test_replicas_that_do_not_fit_are_refused_before_waiting_forever(ray_cluster, tiny_model):
    from judgeforge.judge.config import EngineConfig
    from judgeforge.scale.config import RuntimeConfig
    from judgeforge.scale.ray_runner import run_batches

    rt = RuntimeConfig(kind="ray", replicas=3, num_cpus=2)
    with pytest.raises(ConfigError, match=r"3 replica\(s\) need 6 CPU \(the cluster has 2\)"):
        run_batches([("a", 1)], _echo, engine_cfg=EngineConfig(kind="transformers", model=str(tiny_model)),
                    runtime=rt, on_result=lambda k, r: None)


def _echo(engine, items):
    return [{"item": i} for i in items]


# --- a replica killed mid-batch --------------------------------------------------------------------

def hold_until_killed(engine, items, *, marks: str, sampling):
    """The first batches wait, marked with their replica's pid, until the test has killed one replica;
    every later batch (the killed one's retry included) grades as `judgeforge grade --ray` does."""
    killed = Path(marks) / "killed"
    if not killed.exists():
        (Path(marks) / f"{os.getpid()}.busy").touch()
        deadline = time.monotonic() + 120
        while not killed.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return client.ray_chunk(engine, items, sampling=sampling)


def _kill_first_busy(marks: Path, victims: list[int], stop: threading.Event) -> None:
    while not stop.is_set():
        busy = sorted(marks.glob("*.busy"))
        if busy:
            pid = int(busy[0].stem)
            os.kill(pid, signal.SIGKILL)  # then mark it: the victim must not see the mark alive
            victims.append(pid)
            (marks / "killed").touch()
            return
        time.sleep(0.05)


def test_a_replica_killed_mid_batch_is_restarted_and_its_batch_retried(ray_cluster, tiny_model, tmp_path):
    import ray.cloudpickle

    from judgeforge.judge.config import EngineConfig, SamplingConfig
    from judgeforge.judge.items import GradeItem
    from judgeforge.judge.prompts import rubric_preset
    from judgeforge.scale.config import RuntimeConfig
    from judgeforge.scale.journal import Journal
    from judgeforge.scale.ray_runner import run_batches

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the replicas cannot import tests/
    marks = tmp_path / "marks"
    marks.mkdir()
    items = [(f"k{i}", GradeItem("What is 2+2?", f"answer {i}", rubric_preset("helpfulness"))) for i in range(8)]
    journal = Journal(tmp_path / "journal.jsonl")
    victims: list[int] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_kill_first_busy, args=(marks, victims, stop), daemon=True)
    watcher.start()
    try:
        stats = run_batches(items, partial(hold_until_killed, marks=str(marks),
                                           sampling=SamplingConfig(n=1, temperature=0, max_tokens=4)),
                            engine_cfg=EngineConfig(kind="transformers", model=str(tiny_model), dtype="float32"),
                            runtime=RuntimeConfig(kind="ray", replicas=2, num_cpus=1, batch_size=2),
                            on_result=journal.append)
    finally:
        stop.set()
        journal.close()
    assert len(victims) == 1 and victims[0] not in stats.replica_pids  # its batch came from its restart
    keys = [json.loads(x)["key"] for x in journal.path.read_text().splitlines()]
    assert sorted(keys) == sorted(k for k, _ in items)  # every item graded exactly once
    assert all("score" in r["result"] for r in Journal(journal.path).load().values())


# --- judgeforge eval with runtime: {kind: ray} --------------------------------------------------

def eval_config(out: Path, model: Path, vendor: Path, *extra: str):
    from judgeforge.eval.config import EvalConfig

    vicuna = vendor / "prometheus-eval" / "vicuna_eval.json"
    hhh = vendor / "prometheus-eval" / "hhh_alignment_eval.json"
    return load_config(EvalConfig, None, [
        f"out={out}", "n_values=[1]", "bootstrap.n_resamples=50", "plots=false", "sampling.temperature=0",
        "sampling.max_tokens=8", "sampling.score_only=true",
        f"judges=[{{name: tiny, engine: {{kind: transformers, model: {model}, dtype: float32}}}}]",
        f"sets=[{{name: vicuna, kind: prometheus, path: {vicuna}, max_items: 5}},"
        f" {{name: hhh, kind: hhh, path: {hhh}, max_items: 2, modes: [absolute, relative]}}]", *extra])


def test_eval_on_ray_gives_the_local_predictions_and_resumes_from_its_journal(ray_cluster, tiny_model, vendor,
                                                                              tmp_path, monkeypatch, caplog):
    from judgeforge.eval import run as R
    from judgeforge.io import read_jsonl

    R.run_eval(eval_config(tmp_path / "local", tiny_model, vendor))
    local = read_jsonl(tmp_path / "local" / "predictions.jsonl")
    assert {r["mode"] for r in local} == {"absolute", "relative", "probe"}  # the swap probe too

    cfg = eval_config(tmp_path / "ray", tiny_model, vendor, "runtime={kind: ray, batch_size: 4}")
    journal = tmp_path / "ray" / "journal.jsonl"
    written = R.write_report

    def killed_before_the_report(*a, **k):  # every batch is journaled; the report is not written
        raise KeyboardInterrupt

    monkeypatch.setattr(R, "write_report", killed_before_the_report)
    with pytest.raises(KeyboardInterrupt):
        R.run_eval(cfg)
    done = journal.read_text().splitlines()
    assert len(done) == len(local)
    journal.write_text("\n".join(done[:5]) + "\n" + done[5][:40])  # as if killed after 5, mid-write
    monkeypatch.setattr(R, "write_report", written)
    caplog.set_level(logging.INFO)
    metrics = R.run_eval(cfg)
    assert f"5 of {len(local)} units already graded" in caplog.text
    assert not journal.exists()  # the report replaced the out dir
    assert_same(read_jsonl(tmp_path / "ray" / "predictions.jsonl"), local)
    assert metrics["meta"]["timing"]["tiny"]["resumed"] == 5

"""wandb tracking of eval reports: the pure report -> rows/flat metrics logic, and real offline wandb
runs (no network, no model: the biased engine of conftest.py) read back from their .wandb files."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from judgeforge.config import load_config
from judgeforge.eval import run as R
from judgeforge.eval import tracking as T

# ---------------------------------------------------------------- pure


def test_flat_metrics_keys_and_missing_values():
    tables = {"correlation": [{"set": "vic.bench", "judge": "base", "variant": "n3", "role": "mimic",
                               "pearson": 0.5, "pearson_lo": None, "n": 16}],
              "human": [{"set": "hhh", "judge": "base", "mode": "relative", "variant": "n1", "accuracy": 0.75,
                         "significant": True}]}
    assert T.flat_metrics(tables) == {"correlation/vic_bench/base/n3/pearson": 0.5,
                                      "correlation/vic_bench/base/n3/n": 16,
                                      "human/hhh/base/relative/n1/accuracy": 0.75}


def test_report_tables_cover_every_main_table_row(probe_config):
    m = R.run_eval(probe_config("judges=[{name: base, engine: {model: m}}, {name: other, engine: {model: o}}]"))
    tables = T.report_tables(m)
    assert set(tables) == {"correlation", "human", "comparison", "position", "injection"}
    corr = tables["correlation"]
    assert len(corr) == 2 * len(m["meta"]["variants"])  # every judge x variant of the one absolute set
    row = next(r for r in corr if r["judge"] == "base" and r["variant"] == "n2")
    rep = m["results"]["base"]["vicuna"]["n2"]
    assert row["pearson"] == rep["correlation"]["pearson"]["value"]
    assert (row["kendall_lo"], row["kendall_hi"]) == (rep["correlation"]["kendall"]["lo"],
                                                      rep["correlation"]["kendall"]["hi"])
    flat = T.flat_metrics(tables)
    assert flat["injection/vicuna/base/n1/rise"] == m["probes"]["base"]["vicuna"]["injection"]["n1"]["rise"]
    assert flat["position/hhh/other/n2/first_position"] == 1.0
    assert flat["human/hhh/base/relative/n1/accuracy"] == m["results"]["base"]["hhh"]["relative"]["n1"]["accuracy"]
    assert all(isinstance(v, (int, float)) for v in flat.values())


# ---------------------------------------------------------------- real offline wandb runs


def wandb_records(run_dir: Path) -> list:
    """The protobuf records of an offline run's .wandb file (a LevelDB-style log: 7-byte file header,
    32 KiB blocks, each chunk `crc32 u32, length u16, type u8` with FULL/FIRST/MIDDLE/LAST types)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = next(run_dir.glob("*.wandb")).read_bytes()
    assert data[:4] == b":W&B"
    block, pos, buf, out = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        buf += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


def logged(run_dir: Path) -> tuple[object, dict]:
    """(the run record, history key -> JSON value) of an offline run."""
    recs = wandb_records(run_dir)
    run = next(r.run for r in recs if r.WhichOneof("record_type") == "run")
    hist = {"/".join(i.nested_key) or i.key: json.loads(i.value_json)
            for r in recs if r.WhichOneof("record_type") == "history" for i in r.history.item}
    return run, hist


WANDB_VARS = ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DIR", "WANDB_RUN_GROUP", "WANDB_PROJECT")


def clear_wandb_env(monkeypatch) -> None:
    """Unset the wandb variables for this test and restore them after, also those code under test sets
    (monkeypatch only restores a variable it saw, so each is set before it is deleted)."""
    for var in WANDB_VARS:
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)


@pytest.fixture
def offline(monkeypatch):
    clear_wandb_env(monkeypatch)
    monkeypatch.setenv("WANDB_MODE", "offline")


def test_eval_logs_metrics_tables_and_plots_offline(tmp_path, probe_config, offline, monkeypatch):
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    (tmp_path / "wb").mkdir()
    cfg = probe_config("plots=true", "tracking.wandb=true", "tracking.project=jf-test", "tracking.group=round-3")
    m = R.run_eval(cfg)
    run_dirs = list((tmp_path / "wb" / "wandb").glob("offline-run-*"))
    assert len(run_dirs) == 1 and not (tmp_path / "report" / "wandb").exists()
    run, hist = logged(run_dirs[0])
    assert (run.project, run.display_name, run.run_group, run.job_type) == ("jf-test", "report", "round-3", "eval")
    flat = T.flat_metrics(T.report_tables(m))
    assert len(flat) > 50 and {k: hist[k] for k in flat} == pytest.approx(flat)
    pearson = m["results"]["base"]["vicuna"]["n2"]["correlation"]["pearson"]["value"]
    assert hist["correlation/vicuna/base/n2/pearson"] == pearson
    for name in ("correlation", "human", "position", "injection"):
        assert hist[f"tables/{name}/_type"] == "table-file"
        assert (run_dirs[0] / "files" / hist[f"tables/{name}/path"]).is_file()
    pngs = sorted(p.stem for p in (tmp_path / "report" / "plots").glob("*.png"))
    assert pngs and all(hist[f"plots/{p}/_type"] == "image-file" for p in pngs)
    assert {"probes", "tracking", "sets"} <= {u.key for u in run.config.update}  # the resolved config


def test_run_dir_defaults_to_the_report_and_survives_recompute(tmp_path, probe_config, offline):
    R.run_eval(probe_config("tracking.wandb=true"))
    runs = list((tmp_path / "report" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and logged(runs[0])[1]["injection/vicuna/base/n2/rise"] is not None
    R.recompute(tmp_path / "report", plots=False)
    assert [p.name for p in (tmp_path / "report" / "wandb").glob("offline-run-*")] == [runs[0].name]


def test_disabled_logs_nothing(tmp_path, probe_config, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    m = R.run_eval(probe_config("tracking.wandb=true"))
    assert T.log_report(tmp_path / "report", m, load_config(R.EvalConfig, None, []).tracking) is None
    assert not (tmp_path / "report" / "wandb").exists()


def test_train_group_goes_to_the_environment(tmp_path, repo, monkeypatch):
    from judgeforge.train import run
    from judgeforge.train.config import TrainConfig

    clear_wandb_env(monkeypatch)
    cfg = load_config(TrainConfig, repo / "configs/train/default.yaml", [f"out={tmp_path / 'run'}"])
    run._setup_tracking(cfg, tmp_path / "run")
    assert "WANDB_RUN_GROUP" not in run.os.environ
    cfg = load_config(TrainConfig, repo / "configs/train/default.yaml",
                      [f"out={tmp_path / 'run'}", "tracking.group=round-3"])
    run._setup_tracking(cfg, tmp_path / "run")
    assert run.os.environ["WANDB_RUN_GROUP"] == "round-3"

"""configs/train/continual.yaml: a continual round loads as a train config (not trained here)."""

from __future__ import annotations

from pathlib import Path

from judgeforge.config import load_config
from judgeforge.train.config import TrainConfig

REPO = Path(__file__).resolve().parents[2]


def test_continual_round_config_loads():
    cfg = load_config(TrainConfig, REPO / "configs/train/continual.yaml")
    assert cfg.model.adapter == "runs/train/default"  # continues the previous round's adapter
    new, *replayed = cfg.data.sources
    assert new.path == "runs/data/store-round2" and new.fraction == 1.0
    assert replayed and all(0 < s.fraction < 1 for s in replayed)
    # The round-1 run it continues from (configs/train/default.yaml) must have the same LoRA shape.
    first = load_config(TrainConfig, REPO / "configs/train/default.yaml")
    assert cfg.lora == first.lora and cfg.model.name == first.model.name
    over = load_config(TrainConfig, REPO / "configs/train/continual.yaml", ["model.adapter=runs/train/round2"])
    assert over.model.adapter == "runs/train/round2"

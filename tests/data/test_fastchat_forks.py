"""The vendored FastChat forks' GPT-4 logs (issue 31's extra judgment data): the files are the ones
PROVENANCE.md names, and their build keeps or rejects every line, holds `functionary` out and
decontaminates against every evaluation set the generalization table grades."""

from __future__ import annotations

import hashlib
import json
import re

from judgeforge.config import load_config
from judgeforge.data.build import run_build
from judgeforge.data.config import BuildConfig


def test_every_vendored_fork_file_is_the_one_provenance_names(vendor):
    table = re.findall(r"^\| (\S+) \| github\.com/\S+ @ \w+ \(\w+\) \| (\S+) \| ([0-9a-f]{64}) \| (\d+) \|",
                       (vendor / "PROVENANCE.md").read_text(), re.M)
    assert len(table) == 7
    for folder, name, sha, lines in table:
        data = (vendor / "fastchat-forks" / folder / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == sha and data.count(b"\n") == int(lines), folder
        assert (vendor / "fastchat-forks" / folder / "LICENSE").read_text().lstrip().startswith("Apache License")


def test_the_forks_build_counts_every_line_and_protects_every_eval_set(repo, tmp_path):
    run_build(load_config(BuildConfig, repo / "configs/data/fastchat-forks.yaml"), tmp_path / "b")
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    total = manifest["counts"]
    assert total["read"] == 2410 == sum(1 for p in (repo / "data/vendor/fastchat-forks").glob("*/*.jsonl")
                                        for _ in p.open())
    assert total["read"] == total["kept"] + total["rejected"]
    assert total["kept"] == total["decontaminated"] + total["train"] + total["test"]
    assert total["rejected"] == sum(total["by_reason"].values())
    assert {s["path"].split("/")[-1] for s in manifest["decontamination"]["eval_sets"]} == {
        "vicuna_eval.json", "hhh_alignment_eval.json", "autoj_testdata_pairwise.jsonl", "testset-v1.json",
        "annotations.json"}
    test = [json.loads(line) for line in (tmp_path / "b" / "test.jsonl").open()]
    train = [json.loads(line) for line in (tmp_path / "b" / "train.jsonl").open()]
    assert {r["response_model"] for r in test} == {"functionary"}
    assert "functionary" not in {r["response_model"] for r in train} and len(train) == total["train"]

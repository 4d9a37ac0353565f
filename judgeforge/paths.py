"""The default run paths: where each stage writes when no `out` is given, and what the next reads.

With no flags the stages chain through these directories, each reading what the one before wrote:

    judgeforge data build      -> DATA   (the built-in configs/data/default.yaml: the vendored GPT-4 judgments)
    judgeforge train           -> TRAIN  (LoRA on DATA's train split; the adapter in TRAIN/adapter)
    judgeforge train merge     -> TRAIN/merged (TRAIN's adapter folded into its base, for serving)
    judgeforge eval            -> EVAL   (the base judge on DATA's held-out split and the vendored sets)
    judgeforge eval --config trained -> EVAL_TRAINED (TRAIN's adapter on the same items)
    judgeforge cascade calibrate -> CASCADE (from EVAL's predictions)
    judgeforge serve engine.model=runs/train/default/merged   (default: the shipped `default-judge`)

This module is their one owner: every config class imports its defaults from here, and the shipped
configs/<stage>/default.yaml (YAML cannot import) state the same strings, which tests/test_chain.py
checks. The demo (`make demo`, configs/*/demo.yaml) keeps its own directory, runs/demo/. Relative paths
are the current directory's.
"""

from __future__ import annotations

DATA = "runs/data/default"
"""`judgeforge data build`'s output: train.jsonl, test.jsonl, manifest.json."""
TRAIN = "runs/train/default"
"""`judgeforge train`'s run directory (adapter/ in it), trained on DATA."""
EVAL = "runs/eval/default"
"""`judgeforge eval`'s report directory (the base judge, on DATA's held-out split)."""
EVAL_TRAINED = "runs/eval/trained"
"""The report of TRAIN's adapter on the same items (configs/eval/trained.yaml), to compare with EVAL."""
CASCADE = "runs/cascade/default"
"""`judgeforge cascade calibrate`'s output, calibrated from EVAL's predictions."""
STORE = "runs/store/judgments.sqlite"
"""A cascading server's judgment store (`judgeforge serve --config cascade`), which `judgeforge data
build --input store:PATH` reads for the next round."""

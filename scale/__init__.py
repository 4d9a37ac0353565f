"""Scaling out: batch grading and evaluation on several engine replicas through Ray Data.

The layer right above the judge core: it imports only judgeforge's core modules and `judge/`, and
the stages above it (`judgeforge grade --ray`, `judgeforge eval` and `cascade calibrate` with
`runtime: {kind: ray}`) hand it their own per-batch function.

    config.py      RuntimeConfig: local or Ray, replicas and the resources of each
    placement.py   what a replica's engine binds to (cores on a CPU, GPUs and tensor parallelism)
    ray_runner.py  run_batches: items through a stateful Ray Data stage, one engine per replica
    journal.py     hash-keyed results appended as batches finish (what a rerun skips)

Ray is imported lazily (the `ray` extra), only when a run asks for it.
"""

"""Demo: start `judgeforge serve`, grade one real MT-Bench response over HTTP, print it, stop.

    .venv/bin/python -m judgeforge.serve.demo --config configs/serve/default.yaml --n 3

Starts the real CLI in a subprocess (serve/process.py, with a throwaway API key), waits for
/health, POSTs one MT-Bench grading (data/vendor/prometheus-eval/mt_bench_eval.json,
re-rendered through judge.prompts) with n samples, prints the answer beside
GPT-4's scores for the same response, and stops the server with SIGTERM.
`mt_bench_requests` is also the benchmark's prompt source.
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
import sys
from pathlib import Path

from judgeforge.config import PACKAGE_ROOT

log = logging.getLogger(__name__)
VENDOR_MT_BENCH = PACKAGE_ROOT / "data" / "vendor" / "prometheus-eval" / "mt_bench_eval.json"


def mt_bench_requests(limit: int | None = None, path: str | Path = VENDOR_MT_BENCH) -> list[dict]:
    """Real MT-Bench gradings as /v1/grade bodies (+ `gpt4_scores`, `response_model` for reference)."""
    from judgeforge.data.parsers import parse_prometheus_prompt
    from judgeforge.judge.prompts import Scale

    out = []
    for rec in json.loads(Path(path).read_text()):
        parts = parse_prometheus_prompt(rec["instruction"], Scale(1, 5))
        out.append({"instruction": parts.instruction, "response": parts.response,
                    "reference_answer": parts.reference_answer, "rubric": parts.rubric.to_dict(),
                    "scale": [parts.scale.lo, parts.scale.hi],
                    "_meta": {"gpt4_scores": rec.get("gpt4_score"), "response_model": rec.get("response_source"),
                              "category": rec.get("category"), "idx": rec.get("idx")}})
        if limit is not None and len(out) >= limit:
            break
    return out


def main(argv: list[str] | None = None) -> int:
    import httpx

    from judgeforge.serve.process import ServerProcess

    p = argparse.ArgumentParser(prog="python -m judgeforge.serve.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(PACKAGE_ROOT / "configs/serve/default.yaml"))
    p.add_argument("--model", help="judge model dir (e.g. a merged trained judge); default: the config's")
    p.add_argument("--n", type=int, default=3, help="samples to vote over")
    p.add_argument("--index", type=int, default=0, help="which MT-Bench record to grade")
    p.add_argument("--max-tokens", type=int, default=256, help="generated tokens per sample")
    p.add_argument("--log", default=None, help="server log file (default: a temp file)")
    args = p.parse_args(argv)

    body = mt_bench_requests(args.index + 1)[args.index]
    meta = body.pop("_meta")
    body.update(n=args.n, max_tokens=args.max_tokens, seed=0)
    key = secrets.token_urlsafe(16)
    overrides = [f"engine.model={args.model}"] if args.model else []
    import tempfile

    log_path = Path(args.log or tempfile.mkstemp(prefix="judgeforge-serve-", suffix=".log")[1])
    server = ServerProcess(Path(args.config), overrides, env={"JUDGEFORGE_API_KEY": key}, log=log_path)
    try:
        log.info("starting judgeforge serve on %s (log: %s) ...", server.url, log_path)
        server.wait_ready()
        r = httpx.post(server.url + "/v1/grade", json=body, timeout=900,
                       headers={"Authorization": f"Bearer {key}"})
    finally:
        rc = server.stop()
        log.info("server stopped (exit %s)", rc)
    print(f"MT-Bench item {meta['idx']} ({meta['category']}), response by {meta['response_model']}; "
          f"GPT-4 scores {meta['gpt4_scores']}")
    print(f"POST /v1/grade n={args.n} -> HTTP {r.status_code}")
    print(json.dumps(r.json(), indent=2, ensure_ascii=False))
    return 0 if r.status_code == 200 else 1


if __name__ == "__main__":
    from judgeforge.logs import configure_logging

    configure_logging()
    sys.exit(main())

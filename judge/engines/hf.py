"""The transformers engine: the same contract on plain `generate`, for machines without vLLM.

Requests with equal sampling settings are batched (left padding) and each
prompt gets its N samples through `num_return_sequences=N`. Raw logits
(`output_logits=True`, before temperature/top-p) give the score distribution,
read only at the score position. LoRA adapters are loaded with PEFT and
selected per batch. `agenerate` runs `generate` in a worker thread, one batch
at a time; cancelling it stops the running `generate` at the next token.
"""

from __future__ import annotations

import asyncio
import threading
from itertools import groupby
from typing import Sequence

from judgeforge.judge.engines import (JudgeEngine, Sample, SampleRequest, check_adapters,
                                      load_tokenizer)
from judgeforge.judge.parsing import score_logprobs_at, score_position


class TransformersEngine(JudgeEngine):
    kind = "transformers"

    def __init__(self, cfg):
        import torch
        from transformers import AutoModelForCausalLM

        from judgeforge.models import resolve_model

        self.cfg = cfg
        if cfg.cpu_threads:
            torch.set_num_threads(cfg.cpu_threads)  # process-wide, see EngineConfig.cpu_threads
        self._adapters = check_adapters(cfg)
        path = resolve_model(cfg.model)
        self.model_name = cfg.model
        self.device = cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = getattr(torch, cfg.dtype) if cfg.dtype != "auto" else (
            torch.bfloat16 if self.device == "cuda" else torch.float32)
        self.tokenizer = load_tokenizer(path)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(self.device).eval()
        if self._adapters:
            from peft import PeftModel

            names = iter(self._adapters.items())
            first, p = next(names)
            model = PeftModel.from_pretrained(model, p, adapter_name=first)
            for name, p in names:
                model.load_adapter(p, adapter_name=name)
        self.model = model
        self.max_model_len = min(cfg.max_model_len,
                                 getattr(model.config, "max_position_embeddings", cfg.max_model_len))
        self._lock = threading.Lock()
        torch.manual_seed(cfg.seed)

    def adapters(self) -> list[str]:
        return sorted(self._adapters)

    @staticmethod
    def _key(r: SampleRequest):
        return (r.adapter or "", r.n, r.temperature, r.top_p, r.max_tokens, r.seed if r.seed is not None else -1)

    def generate(self, requests: Sequence[SampleRequest], cancel: threading.Event | None = None
                 ) -> list[list[Sample]]:
        ids = [self.check_request(r) for r in requests]
        out: list[list[Sample] | None] = [None] * len(requests)
        order = sorted(range(len(requests)), key=lambda i: self._key(requests[i]))
        for _, group in groupby(order, key=lambda i: self._key(requests[i])):
            group = list(group)
            for k in range(0, len(group), self.cfg.batch_size):
                chunk = group[k:k + self.cfg.batch_size]
                with self._lock:
                    res = self._generate_batch([ids[i] for i in chunk], requests[chunk[0]], cancel)
                for i, samples in zip(chunk, res):
                    out[i] = samples
        return out  # type: ignore[return-value]

    async def agenerate(self, request: SampleRequest) -> list[Sample]:
        self.check_request(request)
        cancel = threading.Event()
        try:
            return (await asyncio.to_thread(self.generate, [request], cancel))[0]
        except asyncio.CancelledError:
            cancel.set()  # stops generate() at its next token, freeing the model
            raise

    def _generate_batch(self, ids: list[list[int]], req: SampleRequest,
                        cancel: threading.Event | None) -> list[list[Sample]]:
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        class _Cancelled(StoppingCriteria):
            def __call__(self, input_ids, scores, **kw):
                return torch.full((input_ids.shape[0],), bool(cancel and cancel.is_set()),
                                  dtype=torch.bool, device=input_ids.device)

        # HF expands num_return_sequences into N copies before prefill anyway; repeating the
        # prompts ourselves also works for greedy decoding, where HF refuses N > 1.
        rows = [p for p in ids for _ in range(req.n)]
        enc = self.tokenizer.pad({"input_ids": rows}, return_tensors="pt").to(self.device)
        if req.seed is not None:
            torch.manual_seed(req.seed)
        sample = req.temperature > 0
        kwargs = dict(do_sample=sample, max_new_tokens=req.max_tokens,
                      output_logits=req.want_logprobs, return_dict_in_generate=True,
                      pad_token_id=self.tokenizer.pad_token_id,
                      stopping_criteria=StoppingCriteriaList([_Cancelled()]))
        if sample:
            kwargs.update(temperature=req.temperature, top_p=req.top_p)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        model = self.model
        with torch.inference_mode():
            if req.adapter:
                model.set_adapter(req.adapter)
                gen = model.generate(**enc, **kwargs)
            elif self._adapters:
                with model.disable_adapter():
                    gen = model.generate(**enc, **kwargs)
            else:
                gen = model.generate(**enc, **kwargs)
        if cancel is not None and cancel.is_set():
            raise asyncio.CancelledError()
        new = gen.sequences[:, enc["input_ids"].shape[1]:]
        samples = [self._sample(new[j], gen.logits, j, req) for j in range(new.shape[0])]
        return [samples[i * req.n:(i + 1) * req.n] for i in range(len(ids))]

    def _sample(self, toks, logits, row: int, req: SampleRequest) -> Sample:
        import torch

        eos = {self.tokenizer.eos_token_id, *((self.model.generation_config.eos_token_id or [])
                                              if isinstance(self.model.generation_config.eos_token_id, list)
                                              else [self.model.generation_config.eos_token_id])}
        ids = toks.tolist()
        end = next((i for i, t in enumerate(ids) if t in eos), None)
        ids = ids[:end] if end is not None else ids
        lps = None
        if logits is not None and req.want_logprobs and self.cfg.top_logprobs:
            pieces = [self.tokenizer.decode([t]) for t in ids]  # per-token text, as vLLM reports it
            i = score_position(pieces)
            if i is not None:
                top = torch.log_softmax(logits[i][row].float(), -1).topk(self.cfg.top_logprobs)
                cand: dict[str, float] = {}
                for lp, t in zip(top.values.tolist(), top.indices.tolist()):
                    s = self.tokenizer.decode([t])
                    cand[s] = max(cand.get(s, float("-inf")), lp)
                lps = score_logprobs_at(cand, req.scale)
        return Sample(text=self.tokenizer.decode(ids, skip_special_tokens=True),
                      finish_reason="stop" if end is not None else "length", n_tokens=len(ids),
                      score_logprobs=lps)

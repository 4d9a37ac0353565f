"""The transformers engine: the same contract on plain `generate`, for machines without vLLM.

Requests with equal sampling settings are batched (left padding); each prompt's N samples are N
repeated rows. A request alone (the server's, `load_judge`'s) prefills its prompt once: its N rows each
get a copy of that cache, and its completion reads run on it too. Then every sample's score is completed
as the vLLM engine does (judge.completion): the prompt is prefilled once per request into a
`DynamicCache` (a batch's requests each prefill their own), and each read runs only the tokens
after the prompt (kept generated ids, `[RESULT] `, the read's node) on that cache, which is cropped
back afterwards; reads along one path share a forward pass. The read is the float32 log-softmax of
the raw logits over the full vocabulary. Score-only requests (`feedback=False`) generate nothing.
LoRA adapters are loaded with PEFT and selected per batch, for generation and completion alike.
`agenerate` runs `generate` in a worker thread; cancelling it stops the work at its next token
(or next sample to complete).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import threading
from itertools import groupby
from typing import Sequence

from judgeforge.judge.engines.base import (JudgeEngine, Sample, SampleRequest, check_adapters,
                                           load_tokenizer)

Draft = tuple[Sample, list[int]]
"""A generated sample and its token ids without end-of-turn or padding."""


def _auto_dtype(device: str):
    """bfloat16 on GPUs that compute it (Ampere on), float16 on older ones, float32 on a CPU."""
    import torch

    from judgeforge import hardware as hw

    if device != "cuda":
        return torch.float32
    return torch.bfloat16 if (hw.gpu_capability() or (8, 0)) >= (8, 0) else torch.float16


class TransformersEngine(JudgeEngine):
    kind = "transformers"

    def __init__(self, cfg):
        import torch
        from transformers import AutoModelForCausalLM

        from judgeforge import hardware as hw
        from judgeforge.judge.fit import fit_to_judge
        from judgeforge.judge.weights import resolve_model

        self.cfg = cfg
        self._threads_before = None
        if cfg.cpu_threads:  # process-wide (EngineConfig.cpu_threads): given back in close()
            self._threads_before = torch.get_num_threads()
            torch.set_num_threads(cfg.cpu_threads)
        self._adapters = check_adapters(cfg)
        path = resolve_model(cfg.model)
        cfg = self.cfg = fit_to_judge(cfg, path)
        self.model_name = cfg.model
        self.device = cfg.device if cfg.device != "auto" else ("cuda" if hw.cuda_available() else "cpu")
        dtype = getattr(torch, cfg.dtype) if cfg.dtype != "auto" else _auto_dtype(self.device)
        self.tokenizer = load_tokenizer(path)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(self.device).eval()
        eos = model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos]
        self._stop_ids = {self.tokenizer.eos_token_id, *eos} - {None}
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

    def close(self) -> None:
        """Give the process its torch thread count back, unless someone set another since: a caller
        that grades and then trains in one process must not train on the engine's count."""
        import torch

        before, self._threads_before = self._threads_before, None
        if before is not None and torch.get_num_threads() == self.cfg.cpu_threads:
            torch.set_num_threads(before)

    @staticmethod
    def _key(r: SampleRequest):
        return (r.adapter or "", r.feedback, r.n, r.temperature, r.top_p, r.max_tokens,
                r.seed if r.seed is not None else -1)

    def generate(self, requests: Sequence[SampleRequest], cancel: threading.Event | None = None
                 ) -> list[list[Sample]]:
        requests = [self.prepare(r) for r in requests]
        out: list[list[Sample] | None] = [None] * len(requests)
        order = sorted(range(len(requests)), key=lambda i: self._key(requests[i]))
        for _, group in groupby(order, key=lambda i: self._key(requests[i])):
            group = list(group)
            for k in range(0, len(group), self.cfg.batch_size):
                chunk = group[k:k + self.cfg.batch_size]
                reqs = [requests[i] for i in chunk]
                with self._lock:
                    cache = self._prompt_cache(reqs[0]) if len(reqs) == 1 else None
                    drafts = (self._generate_batch(reqs, cancel, cache) if reqs[0].feedback else
                              [[(Sample(text="", finish_reason="score_only"), [])] for _ in reqs])
                    for i, r, d in zip(chunk, reqs, drafts):
                        if r.complete:
                            self._complete(r, d, cancel, cache)
                        samples = [s for s, _ in d]
                        out[i] = samples if r.feedback else samples * r.n
        return out  # type: ignore[return-value]

    async def agenerate(self, request: SampleRequest) -> list[Sample]:
        request = self.prepare(request)
        cancel = threading.Event()
        try:
            return (await asyncio.to_thread(self.generate, [request], cancel))[0]
        except asyncio.CancelledError:
            cancel.set()  # stops generate() at its next token, freeing the model
            raise

    def _adapter(self, name: str | None):
        """The context a forward pass runs in: the request's adapter, or the bare base model."""
        if name:
            self.model.set_adapter(name)
            return contextlib.nullcontext()
        return self.model.disable_adapter() if self._adapters else contextlib.nullcontext()

    @staticmethod
    def _check(cancel: threading.Event | None) -> None:
        if cancel is not None and cancel.is_set():
            raise asyncio.CancelledError()

    def _generate_batch(self, reqs: list[SampleRequest], cancel: threading.Event | None,
                        cache=None) -> list[list[Draft]]:
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        class _Cancelled(StoppingCriteria):
            def __call__(self, input_ids, scores, **kw):
                return torch.full((input_ids.shape[0],), bool(cancel and cancel.is_set()),
                                  dtype=torch.bool, device=input_ids.device)

        req = reqs[0]  # the batch shares its sampling settings
        # HF expands num_return_sequences into N copies before prefill anyway; repeating the
        # prompts ourselves also works for greedy decoding, where HF refuses N > 1.
        rows = [r.prompt_ids for r in reqs for _ in range(req.n)]
        enc = self.tokenizer.pad({"input_ids": rows}, return_tensors="pt").to(self.device)
        if req.seed is not None:
            torch.manual_seed(req.seed)
        sample = req.temperature > 0
        kwargs = dict(do_sample=sample, max_new_tokens=req.max_tokens,
                      pad_token_id=self.tokenizer.pad_token_id,
                      stopping_criteria=StoppingCriteriaList([_Cancelled()]))
        if sample:
            kwargs.update(temperature=req.temperature, top_p=req.top_p)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        with torch.inference_mode(), self._adapter(req.adapter):
            if cache is not None:
                kwargs["past_key_values"] = self._rows_cache(cache, req.n, keep=req.complete)
            seqs = self.model.generate(**enc, **kwargs)
        self._check(cancel)
        drafts = [self._draft(row) for row in seqs[:, enc["input_ids"].shape[1]:].tolist()]
        return [drafts[i * req.n:(i + 1) * req.n] for i in range(len(reqs))]

    def _prompt_cache(self, req: SampleRequest):
        """A lone request's prompt prefilled once, for its generation and its completion reads alike
        (each prefilled it on its own before: two prefills, most of a score-and-feedback grading on a
        CPU). The last prompt token is left out, so neither `generate` nor a read runs an empty input.
        None where the request needs no prefill of its own (nothing to generate or complete)."""
        import torch
        from transformers import DynamicCache

        if not (req.feedback or req.complete):
            return None
        cache = DynamicCache(config=self.model.config)
        prompt = list(req.prompt_ids or [])
        if len(prompt) > 1:
            with torch.inference_mode(), self._adapter(req.adapter):
                self.model(input_ids=self._ids(prompt[:-1]), past_key_values=cache, use_cache=True,
                           logits_to_keep=1)
        return cache

    @staticmethod
    def _rows_cache(cache, n: int, keep: bool):
        """The prompt's cache for `generate`'s N rows, which runs only what the cache lacks (N copies of
        the prompt cost N prefills: bench/RESULTS.md, transformers n=5). `generate` appends to it in
        place, so where the completion reads still need the prompt alone (`keep`) it gets a copy."""
        rows = copy.deepcopy(cache) if keep else cache
        if n > 1:
            rows.batch_repeat_interleave(n)
        return rows

    def _draft(self, ids: list[int]) -> Draft:
        """One generated row: cut at the first end-of-turn token (what follows is padding)."""
        end = next((i for i, t in enumerate(ids) if t in self._stop_ids), None)
        kept = ids[:end] if end is not None else ids
        s = Sample(text=self.tokenizer.decode(kept, skip_special_tokens=True),
                   finish_reason="stop" if end is not None else "length",
                   n_tokens=end + 1 if end is not None else len(ids))  # as vLLM: stop token counts
        return s, kept

    def _complete(self, req: SampleRequest, drafts: list[Draft],
                  cancel: threading.Event | None, cache=None) -> None:
        """Every draft's `choice_logprobs`: the prompt prefilled once (or `cache`, the request's
        `_prompt_cache`), one pass per read path."""
        import torch

        prompt = list(req.prompt_ids or [])
        done: dict[tuple[int, ...], dict[str, float]] = {}  # equal samples (greedy) share one
        if cache is None:
            cache = self._prompt_cache(req)
        with torch.inference_mode(), self._adapter(req.adapter):
            for s, ids in drafts:
                if tuple(ids) not in done:
                    self._check(cancel)
                    done[tuple(ids)] = self._read_plan(req, prompt, ids, s.text, cache)
                s.choice_logprobs = dict(done[tuple(ids)])

    def _read_plan(self, req: SampleRequest, prompt: list[int], ids: list[int], text: str,
                   cache) -> dict[str, float]:
        import torch

        plan = self.plan(req, ids, text)
        if plan.prefix[:len(prompt)] != prompt or not prompt:
            raise RuntimeError("completion plan does not extend the request's prompt")
        reads = plan.reads()
        nodes = [node for node, _ in reads]
        at: dict[tuple[int, ...], torch.Tensor] = {}
        # One forward per path end: its logits are also the reads of every node on the way.
        leaves = [n for n in nodes if not any(len(m) > len(n) and m[:len(n)] == n for m in nodes)]
        for leaf in leaves:
            tail = plan.prefix[len(prompt) - 1:] + list(leaf)
            logits = self._forward(tail, cache, keep=len(leaf) + 1)
            for k in range(len(leaf) + 1):
                if leaf[:k] in nodes and leaf[:k] not in at:
                    at[leaf[:k]] = torch.log_softmax(logits[k].float(), dim=-1)
        return plan.combine([{t: at[node][t].item() for t in toks} for node, toks in reads])

    def _forward(self, tail: list[int], cache, keep: int):
        """Logits of the last `keep` positions of `tail` run after `cache` (left as it was)."""
        from transformers.cache_utils import DynamicLayer

        if not all(type(layer) is DynamicLayer for layer in cache.layers):
            cache = copy.deepcopy(cache)  # sliding-window & co cannot always be cropped back
        n0 = cache.get_seq_length()
        try:
            out = self.model(input_ids=self._ids(tail), past_key_values=cache, use_cache=True,
                             logits_to_keep=keep)
        finally:
            if cache.get_seq_length() > n0:
                cache.crop(n0 - cache.get_seq_length())
        return out.logits[0]

    def _ids(self, ids: list[int]):
        import torch

        return torch.tensor([ids], dtype=torch.long, device=self.device)

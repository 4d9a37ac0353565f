"""Test doubles and fixtures for judgeforge's tests and benchmarks; never shipped, never imported by
the package.

    engines.py   ScriptedEngine (answers from a script: HTTP logic without a model), PromptEngine
                 (samples a pure function of the prompt, for eval tests), SCRIPTED_LOGPROBS,
                 shipped_tokenizer
    servers.py   scripted_server / app_in_thread (a real uvicorn over an app, in a thread), PostLog,
                 VLLMServe (a real `vllm serve` for tests that need an OpenAI-compatible endpoint)
    teacher.py   FakeTeacher (a local OpenAI-compatible endpoint replaying GPT-4's cached judgments),
                 prometheus_judgments
    adapters.py  make_lora_adapter (a small random LoRA adapter)
    builds.py    short_build (a build cut to its shortest judgments, for tiny-model training)
    records.py   synthetic eval predictions and judgment stores (fill_store, corrupt_pages)

Why a top-level folder: pyproject's `[tool.setuptools] packages` lists the shipped packages one by
one, and this one is not among them, so the wheel cannot ship it (tests/test_packaging.py builds the
wheel and checks; it also checks that no module of the package imports this one). Being outside
tests/, it serves the tests and bench/ alike without bench/ depending on tests/.

How it is imported (as `testing`, from a checkout): the repository root must be on sys.path.
pytest puts it there (`pythonpath = ["."]` in pyproject's pytest options); bench/ scripts through
bench/_common.py (bench/fuzz_server.py, also loaded by a test, adds it itself); scripts that tests
start as subprocesses (tests/serve/scripted_serve.py, cascade_server.py) add it themselves.

What is not a double stays in the package: `judgeforge.serve.process` (ServerProcess: the real
`judgeforge serve` in a subprocess; free_port) serves the demo as well as the tests.
"""

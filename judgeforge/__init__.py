"""judgeforge: turn the GPT-4 judgments you paid for into your own judge.

    import judgeforge
    judge = judgeforge.load_judge("default-judge")   # or judgeforge.connect(URL, api_key=KEY)

The public API (judgeforge/api.py) is loaded on first use, so `import judgeforge` stays light: the
CLI and every stage import this package first.
"""

__version__ = "0.1.0"

_API = frozenset({"BaseJudge", "Comparison", "Grade", "LocalJudge", "RemoteJudge", "Rubric", "ServerError",
                  "connect", "load_judge"})
__all__ = sorted(_API)


def __getattr__(name: str):
    if name in _API:
        import importlib

        return getattr(importlib.import_module("judgeforge.api"), name)
    raise AttributeError(f"module 'judgeforge' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})

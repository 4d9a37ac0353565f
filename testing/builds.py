"""Small data builds cut from a real one, for tiny-model training in tests and the GPU check."""

from __future__ import annotations

from pathlib import Path


def short_build(src: Path, out: Path, n_train: int, n_test: int = 2) -> Path:
    """A build dir holding the `n_train` shortest judgments of the build `src` (and its `n_test` shortest
    test ones): tiny-model runs stay fast."""
    import shutil

    from judgeforge.io import read_jsonl, write_jsonl

    def shortest(name: str, n: int) -> list[dict]:
        recs = read_jsonl(Path(src) / name)
        return sorted(recs, key=lambda r: sum(len(m["content"]) for m in r["messages"]))[:n]

    out = Path(out)
    out.mkdir(parents=True)
    shutil.copy(Path(src) / "manifest.json", out / "manifest.json")
    write_jsonl(out / "train.jsonl", shortest("train.jsonl", n_train))
    write_jsonl(out / "test.jsonl", shortest("test.jsonl", n_test))
    return out

"""Train/eval loss curves from the Trainer's log history: JSON and a PNG."""

from __future__ import annotations

from pathlib import Path

from judgeforge.io import atomic_write_bytes, atomic_write_json


def loss_curves(log_history: list[dict]) -> dict:
    """{"train": [{step, loss}], "eval": [{step, loss}]} from `trainer.state.log_history`."""
    train = [{"step": e["step"], "loss": e["loss"]} for e in log_history if "loss" in e]
    evals = [{"step": e["step"], "loss": e["eval_loss"]} for e in log_history if "eval_loss" in e]
    return {"train": train, "eval": evals}


def write_curves(log_history: list[dict], out_dir: Path) -> dict:
    """Write loss.json and loss.png into `out_dir`; returns the curves."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = loss_curves(log_history)
    atomic_write_json(out_dir / "loss.json", curves)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, points in curves.items():
        if points:
            ax.plot([p["step"] for p in points], [p["loss"] for p in points],
                    marker="o" if name == "eval" else None, label=name)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (assistant tokens)")
    ax.legend()
    ax.grid(alpha=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(out_dir / "loss.png", buf.getvalue())
    return curves

"""judgeforge: turn the GPT-4 judgments you paid for into your own judge."""

__version__ = "0.1.0"

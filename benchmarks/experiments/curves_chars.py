# Real learning curves for the search benchmark (issue 40): a small character-level
# transformer on text that ships with Python (the reference topics of `pydoc_data`, 465,000
# characters; the first 90 % trains, the last 10 % validates), every config of a 300-point grid
# of 5 hyperparameters (log-scaled learning rate, integer width and depth, categorical
# activation, dropout) trained 20 epochs of 25 steps; val_loss (nats per character),
# next-character accuracy and the epoch's wall time at every epoch.
#
#   python -m tunetrain sweep benchmarks/experiments/curves_chars.py --no-report --no-register
#
# benchmarks/record_curves.py runs it (and a second seed of a 60-config sub-grid) and writes
# benchmarks/data/curves_chars.json.gz, which benchmarks/_curves.py replays. The Experiment's
# options (grid, FIFO, one CPU per trial, no baseline) are curves_digits.py's.

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import ray.train
import torch
from ray import tune
from torch import nn

from tunetrain import load_experiment

EPOCHS = 2 if os.environ.get("CURVES_SMOKE") else 20
STEPS, BATCH, CONTEXT = 25, 32, 32  # per epoch: 25,600 characters
SPACE: dict[str, list[Any]] = {
    "lr": [3e-4, 1e-3, 3e-3, 1e-2, 3e-2],
    "width": [16, 32, 64],
    "layers": [1, 2],
    "activation": ["relu", "gelu"],
    "dropout": [0.0, 0.1, 0.2, 0.3, 0.4],
}
# The second seed (benchmarks/record_curves.py sets CURVES_REPEAT=1): a 60-config sub-grid.
REPEAT_SPACE = {**SPACE, "activation": ["gelu"], "dropout": [0.0, 0.2]}


def encoded_text() -> tuple[torch.Tensor, torch.Tensor, int]:
    """The text as character ids (train, validation) and the vocabulary's size."""
    import pydoc_data.topics

    text = "".join(pydoc_data.topics.topics[key] for key in sorted(pydoc_data.topics.topics))
    index = {c: i for i, c in enumerate(sorted(set(text)))}
    ids = torch.tensor([index[c] for c in text], dtype=torch.long)
    split = int(len(ids) * 0.9)
    return ids[:split], ids[split:], len(index)


class CharModel(nn.Module):
    """A pre-norm causal transformer over CONTEXT characters (torch's own encoder layers)."""

    def __init__(self, vocab: int, width: int, layers: int, activation: str, dropout: float) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(CONTEXT, width))
        layer = nn.TransformerEncoderLayer(
            width, width // 16, 4 * width, dropout, activation=activation, batch_first=True, norm_first=True
        )
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(CONTEXT))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.embed(x) + self.position, mask=self.mask, is_causal=True))


def windows(ids: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-character targets of the CONTEXT-long windows starting at ``starts``."""
    rows = starts[:, None] + torch.arange(CONTEXT + 1)
    chunk = ids[rows]
    return chunk[:, :-1], chunk[:, 1:]


def train_loop(config: dict[str, Any]) -> None:
    torch.set_num_threads(1)  # one CPU per trial: two side by side on 2 cores, as timed
    train_ids, val_ids, vocab = encoded_text()
    val_x, val_y = windows(val_ids, torch.arange(0, len(val_ids) - CONTEXT - 1, 181)[:256])  # fixed
    model = CharModel(vocab, config["width"], config["layers"], config["activation"], config["dropout"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"])
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(EPOCHS):
        start = time.perf_counter()
        model.train()
        for _ in range(STEPS):
            x, y = windows(train_ids, torch.randint(0, len(train_ids) - CONTEXT - 1, (BATCH,)))
            optimizer.zero_grad()
            loss_fn(model(x).reshape(-1, vocab), y.reshape(-1)).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model(val_x).reshape(-1, vocab)
            loss = loss_fn(logits, val_y.reshape(-1)).item()
            accuracy = (logits.argmax(dim=1) == val_y.reshape(-1)).float().mean().item()
        ray.train.report(
            {
                "val_loss": loss if loss == loss and loss < 1e6 else 1e6,  # a diverged trial: its worst, recorded
                "val_acc": accuracy,  # of the next character
                "epoch_s": time.perf_counter() - start,
            }
        )


def grid_space() -> dict[str, Any]:
    """The full grid; the second seed's sub-grid (CURVES_REPEAT=1); the 4 configs of
    benchmarks/record_curves.py --smoke (CURVES_SMOKE=1)."""
    if os.environ.get("CURVES_SMOKE"):
        return {k: tune.grid_search(v[:2]) if k in ("lr", "activation") else v[0] for k, v in SPACE.items()}
    chosen = REPEAT_SPACE if os.environ.get("CURVES_REPEAT") else SPACE
    return {k: tune.grid_search(v) for k, v in chosen.items()}


experiment = load_experiment(Path(__file__).with_name("curves_digits.py")).replace(
    name="curves_chars", train_loop=train_loop, space=grid_space()
)

"""The smallest tiny model the unit tests build, and the corpus its tokenizer is trained on
(tests/trainer/models/test_generation.py, test_constrained.py; episodes/test_scoring.py)."""

from __future__ import annotations

from trainer.config import TinyModelConfig

CORPUS = [
    "You are in the middle of a room. You see a fridge 1, a countertop 2 and a sinkbasin 1.",
    "<think>I need the apple.</think><action>go to countertop 2</action>",
    "<think>Search first.</think><search>capital of france</search>",
    "<answer>Paris</answer> On the countertop 2, you see an apple 1.",
] * 30
SMALL = TinyModelConfig(
    hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64, vocab_size=400
)

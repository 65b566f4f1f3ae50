"""Tokenizers: the byte-level BPE a tiny backbone trains on environment text, with the chat
tokens and template of :mod:`trainer.models.chat`, and loading any saved tokenizer back token
for token."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from trainer.models.chat import CHAT_TEMPLATE, END_OF_TEXT, IM_END, IM_START, SPECIAL_TOKENS


def train_tokenizer(texts: Iterable[str], vocab_size: int,
                    extra_special: tuple[str, ...] = ()) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``texts`` (environment prompts, observations,
    expert responses) with the ChatML special tokens and chat template; ``extra_special``
    (the vision tokens of ``tiny-vl``) are added as special tokens after them.

    Byte-level means every string round-trips (no unknown tokens).  ``<|endoftext|>`` is
    the padding token, ``<|im_end|>`` the end-of-turn / end-of-sequence token, as in Qwen2.
    Deterministic: the same texts in the same order give the same vocabulary.
    """
    minimum = len(pre_tokenizers.ByteLevel.alphabet()) + len(SPECIAL_TOKENS)
    if vocab_size < minimum:
        raise ValueError(f"vocab_size={vocab_size} is too small; byte-level BPE needs >= {minimum}")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS) + list(extra_special),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        additional_special_tokens=[IM_START, *extra_special],
        chat_template=CHAT_TEMPLATE,
        model_max_length=1 << 20,
    )


# tokenizer_config.json's class for a tokenizer saved straight from a ``tokenizers`` object
# (train_tokenizer); transformers 5 writes "TokenizersBackend", older versions the fast class.
_RAW_TOKENIZER_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})


def load_tokenizer(name_or_path: str, local_files_only: bool = False) -> PreTrainedTokenizerBase:
    """The tokenizer saved in ``name_or_path``, token for token as it was saved.

    ``AutoTokenizer`` prefers the class that the model's ``config.json`` implies: for a
    tiny Qwen2 model that is ``Qwen2Tokenizer``, which rebuilds the pre-tokenizer from
    Qwen's rules (digits split one by one) and so reads "countertop 1" as different ids than
    the locally trained tokenizer did.  A tokenizer saved as a raw ``tokenizers`` object is
    therefore loaded back as exactly that object; every other one goes through
    ``AutoTokenizer``.
    """
    config = Path(name_or_path) / "tokenizer_config.json"
    if config.is_file():
        saved_class = json.loads(config.read_text()).get("tokenizer_class")
        if saved_class in _RAW_TOKENIZER_CLASSES:
            return PreTrainedTokenizerFast.from_pretrained(name_or_path, local_files_only=True)
    return AutoTokenizer.from_pretrained(name_or_path, local_files_only=local_files_only)

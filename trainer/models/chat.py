"""The chat format every tokenizer of the project speaks (ChatML, as Qwen's:
``<|im_start|>role\n...<|im_end|>\n``), in one place: its special tokens, the
template, and the encoding of text and messages into ids.
"""

from __future__ import annotations

from collections.abc import Sequence

from transformers import (
    PreTrainedTokenizerBase,
)

IM_START, IM_END, END_OF_TEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"


SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END)


# Qwen2.5-style ChatML template without tools and without an implicit system message.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def encode(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of ``text`` with special tokens parsed and none added (no BOS)."""
    return tokenizer.encode(text, add_special_tokens=False)


def message_ids(tokenizer: PreTrainedTokenizerBase, role: str, content: str) -> list[int]:
    """One ChatML message ``<|im_start|>role\\ncontent<|im_end|>\\n`` as ids."""
    return encode(tokenizer, f"{IM_START}{role}\n{content}{IM_END}\n")


def encode_chat(
    tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict], add_generation_prompt: bool = True
) -> list[int]:
    """Messages ``[{"role", "content"}]`` -> ids, message by message.  Because the special
    tokens delimit the messages, this equals encoding the chat template's text."""
    ids = [i for m in messages for i in message_ids(tokenizer, m["role"], m["content"])]
    return ids + (encode(tokenizer, f"{IM_START}assistant\n") if add_generation_prompt else [])

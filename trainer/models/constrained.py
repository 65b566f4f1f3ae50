"""Format-constrained decoding of a tagged template: fixed text (``Literal``) around free text
fields (``Text``) and a turn number (``Turn``), each field closed by its own tag.

One template serves both backends: the transformers backend masks, token by token, every
token that would leave the template (:class:`TemplateMask`, one :class:`Cursor` a row); the
vLLM backend hands the template's regular expression (:func:`template_regex`) to vLLM's
structured outputs.  A field's content is the model's own sampling restricted to tokens
without ``<`` (so no stray tag can open inside it); the field ends when the model samples
the start of its closing tag (only once the field holds a non-blank character), and the rest
of the tag and the next literal are forced.  A row closes its field early when the token
budget left would not hold the rest of the template, so every constrained output parses.
A forced token is sampled with probability 1 (its log-prob is 0).  On vLLM the regular
expression knows no token budget: a response that runs out of ``max_new_tokens`` inside a
field stays unclosed and parses as invalid, as a free one would.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class Literal:
    """Fixed text, forced."""

    text: str


@dataclass(frozen=True)
class Text:
    """Free text without ``<``, at least one non-blank character, closed by ``close``."""

    close: str


@dataclass(frozen=True)
class Turn:
    """``none`` or a number of at most ``max_digits`` digits, closed by ``close``."""

    close: str
    max_digits: int = 3


Part = Literal | Text | Turn


def template_regex(parts: Sequence[Part]) -> str:
    """The regular expression of the outputs the template allows (vLLM structured outputs)."""
    out = []
    for part in parts:
        if isinstance(part, Literal):
            out.append(re.escape(part.text))
        elif isinstance(part, Text):
            out.append(r"[^<]*[^<\s][^<]*" + re.escape(part.close))
        else:
            out.append(rf"(none|[0-9]{{1,{part.max_digits}}})" + re.escape(part.close))
    return "".join(out)


INF = 1 << 30  # the cost of a token a state never allows


class TemplateMask:
    """The token classes of one tokenizer for one template, computed once (one decode a
    vocabulary entry); :meth:`cursor` starts a row.

    Each class comes with its cost: how many tokens at least the template still needs
    after the token (forced tags and literals included), so that a row only samples tokens
    after which the rest of the template fits the budget left."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, parts: Sequence[Part], vocab_size: int):
        if not parts:
            raise ValueError("a template needs at least one part")
        self.parts, self.vocab_size = tuple(parts), vocab_size
        self._encode = lambda text: tokenizer.encode(text, add_special_tokens=False)
        self._spelled: dict[str, list[int]] = {}
        special = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}))
        self.texts = [tokenizer.decode([i]) if i < len(tokenizer) else "" for i in range(vocab_size)]
        ordinary = [i not in special and bool(t) for i, t in enumerate(self.texts)]

        def tokens(test) -> torch.Tensor:
            return torch.tensor([ok and test(t) for ok, t in zip(ordinary, self.texts)])

        def costs(rest) -> torch.Tensor:  # rest(text) -> what must follow the token, or None
            out = [INF] * vocab_size
            for i, (ok, t) in enumerate(zip(ordinary, self.texts)):
                tail = rest(t) if ok else None
                if tail is not None:
                    out[i] = len(self.forced(tail))
            return torch.tensor(out)

        self.content = content = tokens(lambda t: "<" not in t)
        blank = tokens(lambda t: not t.strip())
        digits = tokens(str.isdigit)
        self.none_start = tokens(lambda t: "none".startswith(t))
        # per field and state, what each token costs (INF: not allowed): built once, so a
        # decoding step only compares them with the budget left
        self.costs: list[dict[str, torch.Tensor]] = []
        for part in self.parts:
            if isinstance(part, Literal):
                self.costs.append({})
                continue
            c, close = part.close, len(self.forced(part.close))
            closing = costs(lambda t, c=c: c[len(t):] if c.startswith(t) else None)
            if isinstance(part, Text):
                self.costs.append({
                    # a blank token leaves the field blank: one more token before the close
                    "empty": torch.where(content, close + blank.long(), INF),
                    "written": torch.minimum(torch.where(content, close, INF), closing),
                    "closing": closing})
                continue
            if not bool((digits | self.none_start).any()):
                raise ValueError("the tokenizer has no token that starts a turn number or 'none'")
            number = torch.where(digits, close, INF)
            self.costs.append({
                "empty": torch.minimum(number, costs(
                    lambda t, c=c: "none"[len(t):] + c if "none".startswith(t) else None)),
                "written": torch.minimum(number, closing), "full": closing, "closing": closing})
        # tokens still to emit after part i at the least: its successors' literals and
        # closing tags, and one content token a field
        least = [len(self.forced(p.text)) if isinstance(p, Literal) else 1 + len(self.forced(p.close))
                 for p in self.parts]
        self.after = [sum(least[i + 1:]) for i in range(len(least))]
        self.min_tokens = sum(least)

    def forced(self, text: str) -> list[int]:
        """The token ids that spell ``text`` (a fresh list; cached per text)."""
        if text not in self._spelled:
            self._spelled[text] = self._encode(text) if text else []
        return list(self._spelled[text])

    def cursor(self, max_new_tokens: int) -> Cursor:
        """A row's cursor; raises ValueError when ``max_new_tokens`` cannot hold the template."""
        if max_new_tokens < self.min_tokens:
            raise ValueError(f"max_new_tokens {max_new_tokens} cannot hold the output template: it needs "
                             f"at least {self.min_tokens} tokens with this tokenizer")
        return Cursor(self, max_new_tokens)


class Cursor:
    """Where one row stands in the template: :meth:`allowed` the tokens it may sample next,
    :meth:`feed` the token it sampled; :attr:`done` once the last part is complete."""

    def __init__(self, mask: TemplateMask, max_new_tokens: int):
        self.mask, self.left = mask, max_new_tokens
        self.part = -1
        self.queue: list[int] = []  # forced tokens still to emit; the part ends with them
        self.written = ""  # the current field's text so far
        self._next_part()

    @property
    def done(self) -> bool:
        return self.part >= len(self.mask.parts)

    def _next_part(self) -> None:
        self.part += 1
        self.written, self.queue = "", []
        if not self.done and isinstance(self.mask.parts[self.part], Literal):
            self._force(self.mask.parts[self.part].text)

    def _force(self, text: str) -> None:
        """Emit ``text`` next, then move to the next part."""
        self.queue = self.mask.forced(text)
        if not self.queue:
            self._next_part()

    def _state(self) -> str:
        """The current field's state: nothing (non-blank) written yet, written, or full."""
        part = self.mask.parts[self.part]
        if isinstance(part, Turn) and len(self.written) >= part.max_digits:
            return "full"
        blank = not self.written.strip() if isinstance(part, Text) else not self.written
        return "empty" if blank else "written"

    def allowed(self) -> torch.Tensor | None:
        """A bool mask [V] of the tokens the row may sample, or None once it is done."""
        if self.done:
            return None
        if not self.queue:
            ok = 1 + self.mask.costs[self.part][self._state()] <= self.left - self.mask.after[self.part]
            if bool(ok.any()):
                return ok
            # only the rest of the template fits the budget left: close the field now
            part = self.mask.parts[self.part]
            self._force(("none" if isinstance(part, Turn) and not self.written else "") + part.close)
            if self.done:
                return None
        only = torch.zeros(self.mask.vocab_size, dtype=torch.bool)
        only[self.queue[0]] = True
        return only

    def feed(self, token: int) -> None:
        self.left -= 1
        if self.done:
            return
        if self.queue:
            self.queue.pop(0)
            if not self.queue:
                self._next_part()
            return
        m, part = self.mask, self.mask.parts[self.part]
        text = m.texts[token]
        if m.costs[self.part]["closing"][token] < INF:
            self._force(part.close[len(text):])  # the rest of the tag
            return
        self.written += text
        if isinstance(part, Turn) and m.none_start[token]:
            self._force("none"[len(self.written):] + part.close)

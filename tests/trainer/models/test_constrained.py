"""Format-constrained decoding (trainer/models/constrained.py): on an untrained model, whose free
samples are noise, every constrained sample is in the template's language, parses as a valid
hindsight and fits its token budget; forced tokens are sampled with probability 1; a row's
sample depends only on its own seed."""

from __future__ import annotations

import re

import pytest
import torch

from envs.base import Hindsight
from support.tiny import CORPUS as TINY_CORPUS
from support.tiny import SMALL
from trainer.hindsight.analyzer import analyzer_target, parse_analyzer_output
from trainer.hindsight.writers import ANALYZER_TEMPLATE
from trainer.models.backbones import build_tiny_model, train_tokenizer
from trainer.models.constrained import Literal, TemplateMask, Text, Turn, template_regex
from trainer.models.transformers_backend import TransformersBackend

# the tiny test model's corpus, and the analyzer's format, so that its tags are tokens
CORPUS = TINY_CORPUS + [
    "<positive>go to the fridge</positive>\n<error_turn>none</error_turn>\n<negative>none</negative>",
    "step 12 failed: the agent went to the sinkbasin 3 first.",
] * 30
LANGUAGE = re.compile(template_regex(ANALYZER_TEMPLATE), re.DOTALL)
STOP = ("</negative>",)


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(CORPUS, 400)


@pytest.fixture(scope="module")
def backend(tokenizer):
    return TransformersBackend(build_tiny_model(tokenizer, SMALL, seed=0).eval(), tokenizer)


def _sample(backend, tokenizer, n, budget, template=ANALYZER_TEMPLATE, temperature=1.0, seeds=None):
    prompts = [tokenizer.encode("go to fridge 1")] * n
    return backend.generate(prompts, max_new_tokens=budget, temperature=temperature, stop_strings=STOP,
                            template=template, seeds=list(range(n)) if seeds is None else seeds)


def test_the_analyzer_format_is_the_templates_language():
    """What Stage 1 teaches the writer (analyzer_target) is in the language the constraint
    allows, so constraining changes no well-formed answer."""
    for h in (Hindsight("go to the fridge, then open it", "", None, True),
              Hindsight("find the key first", "you opened the door without the key", 12, True)):
        assert LANGUAGE.fullmatch(analyzer_target(h)), analyzer_target(h)
    assert not LANGUAGE.fullmatch("<positive></positive>\n<error_turn>none</error_turn>\n<negative>x</negative>")
    assert not LANGUAGE.fullmatch("<positive>a</positive>\n<error_turn>two</error_turn>\n<negative>x</negative>")


@pytest.mark.parametrize("budget", [200, 40])
def test_every_constrained_sample_parses_where_free_samples_do_not(backend, tokenizer, budget):
    free = _sample(backend, tokenizer, 16, budget, template=None)
    assert sum(parse_analyzer_output(g.text, 5).valid for g in free) < 4  # noise, as expected
    shaped = _sample(backend, tokenizer, 16, budget)
    for g in shaped:
        assert LANGUAGE.fullmatch(g.text), g.text
        assert parse_analyzer_output(g.text, 5).valid
        assert g.finished and len(g.token_ids) <= budget


def test_forced_tokens_have_probability_one_and_rows_keep_their_own_seeds(backend, tokenizer):
    mask = TemplateMask(tokenizer, ANALYZER_TEMPLATE, backend.model.get_output_embeddings().weight.shape[0])
    opening = mask.forced("<positive>")
    out = _sample(backend, tokenizer, 4, 60)
    for g in out:
        assert g.token_ids[:len(opening)] == opening
        assert all(lp == 0.0 for lp in g.logprobs[:len(opening)])
        assert all(lp <= 0.0 and lp > float("-inf") for lp in g.logprobs)
    alone = _sample(backend, tokenizer, 1, 60, seeds=[2])
    assert alone[0] == out[2]
    greedy = _sample(backend, tokenizer, 2, 60, temperature=0.0)
    assert greedy[0] == greedy[1] and LANGUAGE.fullmatch(greedy[0].text)


def test_a_budget_too_small_for_the_template_is_refused(backend, tokenizer):
    mask = TemplateMask(tokenizer, ANALYZER_TEMPLATE, len(tokenizer))
    with pytest.raises(ValueError, match=f"needs at least {mask.min_tokens} tokens"):
        _sample(backend, tokenizer, 2, mask.min_tokens - 1)
    for g in _sample(backend, tokenizer, 4, mask.min_tokens + 1):
        assert LANGUAGE.fullmatch(g.text), g.text


def test_a_turn_is_none_or_a_bounded_number_and_text_fields_hold_no_tag(backend, tokenizer):
    template = (Literal("<t>"), Turn("</t>", max_digits=2), Literal("|"), Text("</x>"))
    for g in _sample(backend, tokenizer, 16, 50, template=template):
        turn, text = re.fullmatch(r"<t>(.*)</t>\|(.*)</x>", g.text, re.DOTALL).groups()
        assert turn == "none" or (turn.isdigit() and len(turn) <= 2), g.text
        assert "<" not in text and text.strip()
        assert re.fullmatch(template_regex(template), g.text, re.DOTALL)


def test_a_tokenizer_without_turn_tokens_is_refused(tokenizer):
    class NoDigits:
        all_special_ids = []
        added_tokens_decoder = {}

        def __len__(self):
            return 3

        def decode(self, ids):
            return ["a", "b", "<"][ids[0]]

        def encode(self, text, add_special_tokens=False):
            return [2] * len(text)

    with pytest.raises(ValueError, match="no token that starts a turn number"):
        TemplateMask(NoDigits(), (Turn("</t>"),), 3)
    assert torch.equal(TemplateMask(NoDigits(), (Text("<"),), 3).content, torch.tensor([True, True, False]))

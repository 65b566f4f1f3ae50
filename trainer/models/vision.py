"""Images in the policy's context: the vision-language path (Qwen2-VL / Qwen2.5-VL family).

An observation that comes with an image (``env.images``; :attr:`envs.base.Turn.image`) is
shown to the policy as ``<|vision_start|>`` + n x ``<|image_pad|>`` + ``<|vision_end|>``
before its text, n the image's token count after the processor's resize and the vision
tower's 2 x 2 merge (:meth:`VisionCodec.placeholder`).  Token sequences carry their images
in placeholder order (:attr:`trainer.samples.TokenSequence.images`); the model embeds them
where the placeholders are.  A teacher's context differs from its student's only in the
text (the skill), so both score the same image tokens.

Positions are Qwen2-VL's multimodal RoPE (M-RoPE), computed here from the ids
(:func:`mrope_positions`) rather than left to the model: the model's own computation is
stateful between calls and its signature moved between transformers 5.17 and 5.24, and
explicit positions let the rollout backend and the scorer handle left and right padding the
same way.  Text tokens advance all three position streams by one; an image of t x h x w
merged patches takes (t, h, w) offsets from the position where it starts, and the text after
it resumes at that start plus max(t, h, w).

``model.backbone: tiny-vl`` builds a random-init Qwen2-VL model (text tower shaped by
``model.tiny``, a one-block vision tower) with the locally trained tokenizer plus the three
vision tokens, so CPU tests run the whole image path; any other vision-language backbone is
a transformers model path (Qwen2.5-VL on GPU).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from trainer.models.chat import IM_END

VISION_START, VISION_END, IMAGE_PAD = "<|vision_start|>", "<|vision_end|>", "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"  # never used here; a Qwen2-VL config needs its id
VISION_TOKENS = (VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD)


def vision_token_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """The ids of the vision tokens the tokenizer has (none for a text tokenizer)."""
    ids = {tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    return {i for i in ids if i is not None and i != tokenizer.unk_token_id}


def is_vision_model(model) -> bool:
    """Whether ``model`` embeds images (its config has a vision tower)."""
    return getattr(model.config, "vision_config", None) is not None


def _image_processor(patch_size: int, merge_size: int, temporal_patch_size: int,
                     min_pixels: int, max_pixels: int):
    """Qwen2-VL's image processor (the PIL one where torchvision is absent) resizing every
    image to between ``min_pixels`` and ``max_pixels``."""
    import transformers

    cls = getattr(transformers, "Qwen2VLImageProcessorPil", None)
    if cls is None:  # transformers versions without the split backends
        cls = transformers.Qwen2VLImageProcessor
    return cls(patch_size=patch_size, merge_size=merge_size, temporal_patch_size=temporal_patch_size,
               min_pixels=min_pixels, max_pixels=max_pixels)


class VisionCodec:
    """Turns images into placeholder text (for prompts) and into model inputs (for scoring
    and generation), for one model and tokenizer.  ``max_image_tokens`` bounds each image's
    tokens (``model.max_image_tokens``): a larger image is resized down by the processor."""

    def __init__(self, model_config, tokenizer: PreTrainedTokenizerBase, max_image_tokens: int):
        vision = model_config.vision_config
        if len(vision_token_ids(tokenizer)) < len(VISION_TOKENS):
            raise ValueError(f"the tokenizer lacks some of the vision tokens {', '.join(VISION_TOKENS)}")
        self.merge = int(vision.spatial_merge_size)
        unit = (int(vision.patch_size) * self.merge) ** 2  # pixels per merged token
        # the resize bounds, also what a vLLM engine is told (trainer.backend.VLLMBackend)
        self.min_pixels, self.max_pixels = 4 * unit, max_image_tokens * unit
        self.processor = _image_processor(int(vision.patch_size), self.merge, int(vision.temporal_patch_size),
                                          self.min_pixels, self.max_pixels)
        self.image_token_id = tokenizer.convert_tokens_to_ids(IMAGE_PAD)
        self.max_image_tokens = max_image_tokens
        self._tokens: dict[tuple[int, int], int] = {}

    def tokens(self, image) -> int:
        """Placeholder tokens of ``image`` (memoised per image size)."""
        size = tuple(image.size)
        if size not in self._tokens:
            grid = self.processor(images=[image], return_tensors="pt")["image_grid_thw"][0]
            self._tokens[size] = int(grid.prod()) // self.merge**2
        return self._tokens[size]

    def placeholder(self, image) -> str:
        """The text that stands for ``image`` in a message (its special tokens)."""
        return f"{VISION_START}{IMAGE_PAD * self.tokens(image)}{VISION_END}"

    def inputs(self, images: Sequence, device) -> dict[str, torch.Tensor]:
        """``pixel_values`` [patches, D] and ``image_grid_thw`` [n, 3] of ``images`` (in the
        order their placeholders appear in the batch); empty dict for no images."""
        if not images:
            return {}
        out = self.processor(images=list(images), return_tensors="pt")
        return {"pixel_values": out["pixel_values"].to(device),
                "image_grid_thw": out["image_grid_thw"].to(device)}


def mrope_positions(ids: torch.Tensor, mask: torch.Tensor, grids: torch.Tensor | None,
                    image_token_id: int, merge: int) -> torch.Tensor:
    """M-RoPE position ids [3, B, L] of ``ids`` [B, L] whose real tokens are ``mask`` == 1
    (padding may sit left or right; it gets position 1, as transformers gives it).

    ``grids`` [n, 3]: the (t, h, w) patch grid of every image, in the order their
    placeholder runs appear row by row; each run must have t * h * w / merge^2 tokens."""
    batch, length = ids.shape
    if grids is None or len(grids) == 0:  # text only: one stream, repeated
        if bool((ids[mask.bool()] == image_token_id).any()):
            raise ValueError("image placeholders without images")
        text = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)
        return text.unsqueeze(0).expand(3, -1, -1).clone()
    out = torch.ones((3, batch, length), dtype=torch.long)
    grid_l = grids.tolist()
    image = 0
    for b in range(batch):
        real = mask[b].nonzero().squeeze(-1).cpu()  # [R] columns of the row's tokens, in order
        is_image = (ids[b, real] == image_token_id).cpu()  # [R]
        starts = (is_image & ~torch.cat([torch.tensor([False]), is_image[:-1]])).nonzero().squeeze(-1).tolist()
        pos, j = 0, 0  # next position; next real token not yet placed
        for s in starts:  # text up to the run (one step a token), then the run's grid
            out[:, b, real[j:s]] = torch.arange(pos, pos + s - j)
            pos += s - j
            if image >= len(grid_l):
                raise ValueError("more image placeholder runs than images")
            t, h, w = grid_l[image][0], grid_l[image][1] // merge, grid_l[image][2] // merge
            n = t * h * w
            if not bool(is_image[s:s + n].all()) or (s + n < len(real) and bool(is_image[s + n])):
                raise ValueError(f"image {image}: its placeholder run is not {n} tokens long")
            cells = torch.arange(n)
            at = real[s:s + n]
            out[0, b, at] = pos + cells // (h * w)
            out[1, b, at] = pos + (cells // w) % h
            out[2, b, at] = pos + cells % w
            pos, j, image = pos + max(t, h, w), s + n, image + 1
        out[:, b, real[j:]] = torch.arange(pos, pos + len(real) - j)
    if image != len(grid_l):
        raise ValueError(f"{len(grid_l)} images for {image} placeholder runs")
    return out.to(ids.device)


def vision_inputs(model, ids: torch.Tensor, mask: torch.Tensor, images: Sequence = (),
                  codec: VisionCodec | None = None) -> tuple[dict, torch.Tensor]:
    """A vision-language model's extra inputs for ``ids`` [B, L] (``mask`` its real tokens):
    ``pixel_values`` / ``image_grid_thw`` of ``images`` (none for text) and the M-RoPE
    positions [3, B, L]."""
    if images and codec is None:
        raise ValueError("sequences with images need a VisionCodec (env.images with a vision backbone)")
    extra = codec.inputs(images, ids.device) if images else {}
    token = codec.image_token_id if codec is not None else model.config.image_token_id
    merge = codec.merge if codec is not None else model.config.vision_config.spatial_merge_size
    return extra, mrope_positions(ids, mask, extra.get("image_grid_thw"), token, merge)


def decoder_states(model, ids: torch.Tensor, attn: torch.Tensor,
                   images: Sequence = (), codec: VisionCodec | None = None) -> torch.Tensor:
    """Last hidden states [B, L, H] of ``ids`` [B, L] (``attn`` its mask), the images of the
    rows embedded at their placeholders (vision models; ``codec`` required then)."""
    if not is_vision_model(model):
        return model.get_decoder()(input_ids=ids, attention_mask=attn, use_cache=False).last_hidden_state
    extra, positions = vision_inputs(model, ids, attn, images, codec)
    return model.model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=False,
                       **extra).last_hidden_state


def build_tiny_vl_model(tokenizer: PreTrainedTokenizerBase, tiny_cfg, seed: int = 0):
    """A random-init Qwen2-VL model: the text tower shaped like :func:`trainer.models.build_tiny_model`
    (``tiny_cfg``), a one-block vision tower of width ``tiny_cfg.hidden_size`` with 14-pixel
    patches merged 2 x 2, the tokenizer's vision tokens wired in.  Seeded like the text one."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    half = tiny_cfg.hidden_size // tiny_cfg.num_heads // 2  # rotary frequencies per head
    if half < 3:
        raise ValueError(f"tiny-vl: hidden_size / num_heads must be >= 6 (M-RoPE splits its "
                         f"frequencies over time, height and width), got {2 * half}")
    # Qwen2-VL's split of the frequencies, 1/4 time and 3/8 each for height and width
    spatial = (half - half // 4) // 2
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    text = {
        "vocab_size": len(tokenizer), "hidden_size": tiny_cfg.hidden_size,
        "intermediate_size": tiny_cfg.intermediate_size, "num_hidden_layers": tiny_cfg.num_layers,
        "num_attention_heads": tiny_cfg.num_heads, "num_key_value_heads": tiny_cfg.num_kv_heads,
        "max_position_embeddings": tiny_cfg.max_position_embeddings, "tie_word_embeddings": True,
        "rope_scaling": {"type": "mrope", "mrope_section": [half - 2 * spatial, spatial, spatial]},
        "bos_token_id": None, "eos_token_id": tokenizer.convert_tokens_to_ids(IM_END),
        "pad_token_id": tokenizer.pad_token_id,
    }
    vision = {"depth": 1, "embed_dim": tiny_cfg.hidden_size, "hidden_size": tiny_cfg.hidden_size,
              "num_heads": max(1, tiny_cfg.num_heads // 2), "mlp_ratio": 2, "in_channels": 3,
              "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}
    config = Qwen2VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True,
                           image_token_id=ids[IMAGE_PAD], video_token_id=ids[VIDEO_PAD],
                           vision_start_token_id=ids[VISION_START], vision_end_token_id=ids[VISION_END])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2VLForConditionalGeneration(config)
    return model.float()

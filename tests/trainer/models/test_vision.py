"""The vision-language path (issue 15, item 2): a tiny random-init Qwen2-VL reads sokoban's
images through rollout, scoring and SFT; teacher and student score the same image tokens;
positions are Qwen2-VL's M-RoPE; a saved tiny-vl loads back as the same model."""

from __future__ import annotations

import inspect

import pytest
import torch

import envs
from envs.base import expert_policy, run_episode
from trainer.config import ConfigError, TinyModelConfig
from trainer.episodes.rollout import Sampling, collect
from trainer.episodes.samples import SampleBuilder, Trajectory, assert_same_actions
from trainer.episodes.scoring import score_trajectories
from trainer.models.backbones import load_pretrained, train_tokenizer
from trainer.models.chat import encode
from trainer.models.generation import left_pad
from trainer.models.transformers_backend import TransformersBackend
from trainer.models.vision import (
    IMAGE_PAD,
    VISION_END,
    VISION_START,
    VISION_TOKENS,
    VisionCodec,
    build_tiny_vl_model,
    mrope_positions,
    vision_token_ids,
)
from trainer.run.resolve import load_config, resolve

SMALL = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1,
                        intermediate_size=64, vocab_size=600)
SKILL = "Push the box toward the target; never push it into a corner."


def make_env():
    return envs.make("sokoban", images=True)


@pytest.fixture(scope="module")
def parts():
    env = make_env()
    tasks = env.panel("train")[:6]
    texts = [env.system_prompt(), SKILL]
    for task in tasks:
        episode = run_episode(env, task, expert_policy(0.3))
        texts += [env.task_instruction(task)] + [t.observation + "\n" + t.response for t in episode.turns]
    tokenizer = train_tokenizer(texts, SMALL.vocab_size, VISION_TOKENS)
    model = build_tiny_vl_model(tokenizer, SMALL, seed=0).eval()
    codec = VisionCodec(model.config, tokenizer, max_image_tokens=16)
    return env, tasks, tokenizer, model, codec


def expert_trajectory(env, task, tokenizer) -> Trajectory:
    episode = run_episode(env, task, expert_policy(0.3, seed=task.id))
    return Trajectory(episode, tuple(tuple(encode(tokenizer, t.response)) for t in episode.turns))


def model_inputs(model, ids, mask, images, codec):
    """The model's own multimodal inputs for a forward pass without explicit positions."""
    extra = dict(codec.inputs(images, ids.device))
    if "mm_token_type_ids" in inspect.signature(model.forward).parameters:  # transformers >= 5.2x
        extra["mm_token_type_ids"] = (ids == codec.image_token_id).long()
    return extra


def test_images_become_placeholders_within_the_token_budget(parts):
    env, tasks, tokenizer, _, codec = parts
    env.reset(tasks[0])
    image = env.image()
    assert image.size == (96, 96)
    n = codec.tokens(image)
    assert 4 <= n <= 16  # 96 x 96 pixels, 28 x 28 per token, at most max_image_tokens
    ids = encode(tokenizer, codec.placeholder(image))
    assert ids[0] == tokenizer.convert_tokens_to_ids(VISION_START)
    assert ids[-1] == tokenizer.convert_tokens_to_ids(VISION_END)
    assert ids[1:-1] == [codec.image_token_id] * n
    big = image.resize((400, 400))
    assert codec.tokens(big) <= 16  # resized down by the processor
    assert int(codec.inputs([big], "cpu")["image_grid_thw"].prod()) // 4 == codec.tokens(big)


def test_mrope_positions_are_those_transformers_computes(parts):
    """Explicit positions for a left-padded batch with images of two sizes equal the model's
    own get_rope_index (the reason to compute them: explicit positions survive padding and
    the kept KV cache the same way for every transformers version)."""
    env, tasks, tokenizer, model, codec = parts
    env.reset(tasks[0])
    small, large = env.image(), env.image().resize((150, 120))
    rows = [encode(tokenizer, f"a{codec.placeholder(small)}b c{codec.placeholder(large)}d"),
            encode(tokenizer, f"move {codec.placeholder(large)} up")]
    ids, mask = left_pad(rows, tokenizer.pad_token_id, "cpu")
    grids = codec.inputs([small, large, large], "cpu")["image_grid_thw"]
    ours = mrope_positions(ids, mask, grids, codec.image_token_id, codec.merge)
    kwargs = {"image_grid_thw": grids, "attention_mask": mask}
    if "mm_token_type_ids" in inspect.signature(model.model.get_rope_index).parameters:
        kwargs["mm_token_type_ids"] = (ids == codec.image_token_id).long()
    theirs, _ = model.model.get_rope_index(ids, **kwargs)
    real = mask.bool()
    assert torch.equal(ours[:, real], theirs[:, real])
    with pytest.raises(ValueError, match="more image placeholder runs than images"):
        mrope_positions(ids, mask, grids[:2], codec.image_token_id, codec.merge)
    with pytest.raises(ValueError, match="4 images for 3 placeholder runs"):
        mrope_positions(ids, mask, torch.cat([grids, grids[:1]]), codec.image_token_id, codec.merge)


@pytest.mark.parametrize("context", ["window", "full"])
def test_scoring_with_images_matches_the_model_forward(parts, context):
    """score_trajectories on sequences with images gives the log-probs of the model's own
    forward pass (pixel values in, its M-RoPE), and the images reach the model: other
    images give other log-probs of the same tokens."""
    env, tasks, tokenizer, model, codec = parts
    builder = SampleBuilder(tokenizer, env, context, max_prompt_tokens=4096, vision=codec)
    traj = expert_trajectory(env, tasks[1], tokenizer)
    scored, sequences = score_trajectories(model, builder, [traj], micro_batch=4)
    assert sum(len(s.images) for s in sequences) == (len(traj.turns) if context == "window" else len(traj.turns))
    logps = []
    for seq in sequences:
        ids = torch.tensor([seq.input_ids])
        mask = torch.ones_like(ids)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask,
                           **model_inputs(model, ids, mask, list(seq.images), codec)).logits[0]
        logp = torch.log_softmax(logits[:-1].float(), -1).gather(-1, ids[0, 1:, None])[:, 0]
        logps += [(t, lp) for t, lp, m in zip(seq.turn_ids[1:], logp.tolist(), seq.action_mask[1:]) if m]
    direct = torch.tensor([lp for _, lp in sorted(logps, key=lambda x: x[0])])
    ours = scored.logp[0][scored.mask[0].bool()]
    assert torch.allclose(ours, direct, atol=1e-5)

    blank = [type(s)(s.input_ids, s.action_mask, s.turn_ids, s.traj,
                     tuple(i.point(lambda v: 255 - v) for i in s.images)) for s in sequences]
    other, _ = score_trajectories(model, builder, [traj], micro_batch=4, sequences=blank)
    assert not torch.allclose(other.logp, scored.logp, atol=1e-4)


def test_teacher_and_student_score_the_same_image_tokens(parts):
    env, tasks, tokenizer, model, codec = parts
    builder = SampleBuilder(tokenizer, env, "full", max_prompt_tokens=4096, vision=codec)
    traj = expert_trajectory(env, tasks[2], tokenizer)
    student, s_seq = score_trajectories(model, builder, [traj])
    teacher, t_seq = score_trajectories(model, builder, [traj], [SKILL])
    assert_same_actions(s_seq, t_seq)
    assert [s.images for s in s_seq] == [s.images for s in t_seq]
    image_tokens = [sum(i == codec.image_token_id for i in s.input_ids) for s in (*s_seq, *t_seq)]
    assert image_tokens[: len(s_seq)] == image_tokens[len(s_seq):] and image_tokens[0] > 0
    assert torch.equal(student.token_ids, teacher.token_ids)
    assert not torch.allclose(student.logp, teacher.logp)  # the skill, spliced in the text, counts


def test_rollouts_read_images_and_score_what_they_sampled(parts):
    """Greedy rollouts with images: each turn keeps its observation's image, and the sampled
    tokens' greedy log-probs are the maxima of the scored distributions (the rollout saw
    exactly the context that is scored); no vision token is ever sampled."""
    env, tasks, tokenizer, model, codec = parts
    builder = SampleBuilder(tokenizer, env, "full", max_prompt_tokens=4096, vision=codec)
    backend = TransformersBackend(model, tokenizer, vision=codec)
    trajectories, generated = collect(make_env, tasks[:3], builder, backend, Sampling(12, 0.0), seed=0)
    assert generated > 0
    banned = vision_token_ids(tokenizer)
    for traj in trajectories:
        assert all(t.image is not None for t in traj.turns)
        assert not banned & {i for r in traj.response_ids for i in r}
    scored, sequences = score_trajectories(model, builder, trajectories, with_entropy=False, top_k=1)
    chosen, best = scored.logp[scored.mask.bool()], scored.topk_logp[..., 0][scored.mask.bool()]
    # greedy picked the argmax among the allowed tokens: its log-prob is the top one unless a
    # banned vision token outranked it
    top_ids = scored.topk_ids[..., 0][scored.mask.bool()]
    allowed = torch.tensor([i not in banned for i in top_ids.tolist()])
    assert torch.allclose(chosen[allowed], best[allowed], atol=1e-5)


def test_a_saved_tiny_vl_loads_back_as_the_same_model(parts, tmp_path):
    env, tasks, tokenizer, model, codec = parts
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, loaded_tok = load_pretrained(str(tmp_path), torch.float32, "cpu")
    assert type(loaded).__name__ == type(model).__name__
    builder = SampleBuilder(tokenizer, env, "full", max_prompt_tokens=4096, vision=codec)
    traj = expert_trajectory(env, tasks[3], tokenizer)
    again = SampleBuilder(loaded_tok, env, "full", max_prompt_tokens=4096,
                          vision=VisionCodec(loaded.config, loaded_tok, 16))
    a, seq_a = score_trajectories(model, builder, [traj])
    b, seq_b = score_trajectories(loaded.eval(), again, [traj])
    assert [s.input_ids for s in seq_a] == [s.input_ids for s in seq_b]
    assert torch.allclose(a.logp, b.logp, atol=1e-6)


@pytest.mark.parametrize("overrides, field", [
    (["env.name=household", "env.images=true", "model.backbone=tiny-vl"], "env.images"),
    (["env.name=sokoban", "env.images=true"], "model.backbone"),
    (["env.name=sokoban", "model.backbone=tiny-vl"], "model.backbone"),
])
def test_image_settings_that_cannot_work_name_their_field(overrides, field):
    with pytest.raises(ConfigError, match=field):
        resolve(load_config("examples/text_games_small.yaml", overrides))


def test_the_vision_tokens_are_special_and_single(parts):
    _, _, tokenizer, _, _ = parts
    for token in (VISION_START, VISION_END, IMAGE_PAD):
        assert len(encode(tokenizer, token)) == 1
    assert len(vision_token_ids(tokenizer)) == len(VISION_TOKENS) == 4


def test_the_self_writer_reads_the_first_and_last_images(parts):
    """The writer's prompt shows the episode's first observation and its state after the last
    step as images (the Stage-1 examples use the same prompt); a prompt too long for the
    budget drops its images rather than cut a placeholder."""
    from trainer.config import WriterConfig
    from trainer.hindsight.writers import SelfWriter, writer_input

    env, tasks, tokenizer, model, codec = parts
    episode = run_episode(env, tasks[4], expert_policy(0.3, seed="writer"))
    ids, images = writer_input(tokenizer, env.domain_description(), episode, 4096, codec)
    assert len(images) == 2 and images[0] is episode.turns[0].image
    assert images[1] is episode.turns[-1].info["image"]
    assert sum(i == codec.image_token_id for i in ids) == sum(codec.tokens(i) for i in images)
    text_ids, none = writer_input(tokenizer, env.domain_description(), episode, 4096, None)
    assert none == () and codec.image_token_id not in text_ids
    short, dropped = writer_input(tokenizer, env.domain_description(), episode, 200, codec)
    assert dropped == () and codec.image_token_id not in short and len(short) == 200

    writer = SelfWriter(model, tokenizer, lambda m: TransformersBackend(m, tokenizer, vision=codec),
                        env.domain_description(), WriterConfig(max_new_tokens=8), 4096, codec)
    traj = Trajectory(episode, tuple(tuple(encode(tokenizer, t.response)) for t in episode.turns))
    seen = []
    generate = writer.backend.generate
    writer.backend.generate = lambda prompts, **kw: seen.append(kw["images"]) or generate(prompts, **kw)
    hindsight = writer.write([traj])
    assert len(hindsight) == 1 and seen[0] == [images]


def test_the_vllm_backend_gets_the_images_their_budget_and_no_vision_tokens(parts, monkeypatch):
    """vLLM is GPU-only, so a recording stand-in of its API checks what the backend hands it:
    image prompts carry their images as multi-modal data beside the expanded placeholders,
    the engine resizes within the codec's pixel bounds and takes enough images a prompt, and
    the vision tokens are biased out of sampling."""
    import sys
    import types

    from trainer.config import VLLMConfig
    from trainer.models.vllm_backend import VLLMBackend, weights_version

    env, tasks, tokenizer, _, codec = parts
    calls = {}

    class LLM:
        def __init__(self, **kwargs):
            calls["engine"] = kwargs

        def sleep(self, level):  # the engine sleeps from its creation until its first call
            calls["sleep"] = level

        def wake_up(self, tags=None):
            pass

        def generate(self, requests, sampling_params, use_tqdm):
            calls["requests"], calls["params"] = requests, sampling_params
            done = types.SimpleNamespace(token_ids=[5], finish_reason="stop", logprobs=None)
            return [types.SimpleNamespace(outputs=[done]) for _ in requests]

    fake = types.ModuleType("vllm")
    fake.__version__ = "0.32.0"
    fake.LLM, fake.SamplingParams = LLM, lambda **kw: kw
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda **kw: kw
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_sleep_mode_available=lambda: True)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    weight = torch.zeros(1, device="meta")  # a GPU model's stand-in: no weights, not on a CPU
    model = types.SimpleNamespace(parameters=lambda: iter([weight]))
    # level 1: the weights stay in the engine through its sleep, so the first call pushes nothing
    backend = VLLMBackend(model, tokenizer, VLLMConfig(sleep_level=1), max_model_len=4096,
                          source="Qwen/Qwen2.5-VL-3B-Instruct",
                          vision=codec, images_per_prompt=16)
    backend._synced = weights_version(model)  # the engine holds these weights: nothing to push
    assert calls["engine"]["limit_mm_per_prompt"] == {"image": 16}
    assert calls["engine"]["mm_processor_kwargs"] == {"min_pixels": codec.min_pixels,
                                                       "max_pixels": codec.max_pixels}
    env.reset(tasks[0])
    image = env.image()
    prompt = encode(tokenizer, f"look {codec.placeholder(image)} now")
    backend.generate([prompt, [7, 8]], max_new_tokens=4, images=[(image,), ()])
    with_image, text = calls["requests"]
    assert with_image["multi_modal_data"] == {"image": [image]} and with_image["prompt_token_ids"] == prompt
    assert "multi_modal_data" not in text
    assert len(calls["params"]) == 2  # one SamplingParams a request
    for params in calls["params"]:
        assert set(params["logit_bias"]) == vision_token_ids(tokenizer)
        assert set(params["logit_bias"].values()) == {-100.0}


def test_writer_backends_take_the_writers_two_images(monkeypatch):
    """Every writer (self, frozen, the self-written library) builds its backend through
    writer_backends, which admits the two images of a writer's prompt (a vLLM engine
    rejects prompts with more images than its limit)."""
    import types

    import trainer.run.components as context
    from trainer.hindsight.analyzer import WRITER_IMAGES

    seen = {}
    monkeypatch.setattr(context, "make_backend", lambda *args, **kw: seen.update(args=args, kw=kw))
    monkeypatch.setattr(context, "engine_length", lambda cfg: 4096)
    model_cfg = types.SimpleNamespace(backend="transformers")
    ctx = types.SimpleNamespace(cfg=types.SimpleNamespace(model=model_cfg), model="policy", backend="shared")
    assert context.writer_backends(ctx, "tok", "codec")("policy") == "shared"  # the policy's own engine
    context.writer_backends(ctx, "tok", "codec")("snapshot")
    assert seen == {"args": (model_cfg, "snapshot", "tok", "codec"),
                    "kw": {"images_per_prompt": WRITER_IMAGES, "max_model_len": 4096}}
    assert WRITER_IMAGES == 2

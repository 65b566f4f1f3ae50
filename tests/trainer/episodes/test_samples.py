"""Sample builder: chat format, context modes, skill splicing, truncation, masks, analyzer."""

from __future__ import annotations

import pytest

from envs.base import Episode, Hindsight, Task, Turn, format_response
from trainer.episodes.samples import (
    SKILL_HEADER,
    PromptTooLong,
    SampleBuilder,
    Trajectory,
    assert_same_actions,
    cut_skill,
)
from trainer.hindsight.analyzer import analyzer_prompt, analyzer_target, parse_analyzer_output
from trainer.models.backbones import train_tokenizer
from trainer.models.chat import encode, encode_chat

SKILL = "First find the apple, then clean it at the sinkbasin, then put it in the fridge."


class FakeEnv:
    """The three prompt pieces of a TextEnv."""

    def system_prompt(self) -> str:
        return "You are a household agent. Reply as <think>...</think><action>...</action>."

    def task_instruction(self, task: Task) -> str:
        return f"Your task is to: {task.instruction}"

    def format_observation(self, observation: str) -> str:
        return f"{observation}\nWhat do you do next?"


def make_episode(n_turns: int) -> Episode:
    task = Task(
        id="household/train/0001",
        env="household",
        split="train",
        instruction="put a clean apple in fridge",
    )
    obs = [
        f"You arrive at location {t}. You see a mug {t} and a towel {t}."
        for t in range(n_turns + 1)
    ]
    turns = [
        Turn(
            observation=obs[t],
            response=format_response(f"go to shelf {t}", "search"),
            action=f"go to shelf {t}",
            valid=True,
            reward=0.0,
            next_observation=obs[t + 1],
            state_key=str(t),
            distance_before=None,
            distance_after=None,
        )
        for t in range(n_turns)
    ]
    return Episode(task=task, turns=turns, success=False, score=0.0, first_observation=obs[0])


@pytest.fixture(scope="module")
def tokenizer():
    env, ep = FakeEnv(), make_episode(4)
    corpus = [env.system_prompt(), SKILL] + [t.observation + t.response for t in ep.turns] * 20
    return train_tokenizer(corpus, 400)


def char_ids(tokenizer, text: str) -> list[int]:
    """A deliberately non-canonical tokenisation (one piece per character) standing in for
    sampled ids, so any re-tokenisation of the response would be caught."""
    return [i for ch in text for i in encode(tokenizer, ch)]


def make_traj(tokenizer, n_turns: int, sampled_im_end: bool = True) -> Trajectory:
    ep = make_episode(n_turns)
    ids = [char_ids(tokenizer, t.response) for t in ep.turns]
    if sampled_im_end:  # turn 1 ended with the policy sampling <|im_end|>
        ids[1] = ids[1] + encode(tokenizer, "<|im_end|>")
    return Trajectory(ep, ids)


def test_encode_chat_equals_chat_template_text(tokenizer):
    messages = [
        {"role": "system", "content": "sys\nline"},
        {"role": "user", "content": "go to  fridge 1\n\n## x"},
        {"role": "assistant", "content": "<action>open fridge 1</action>"},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert encode_chat(tokenizer, messages) == encode(tokenizer, text)


@pytest.mark.parametrize("context", ["window", "full"])
def test_masks_cover_exactly_the_sampled_response_ids(tokenizer, context):
    traj = make_traj(tokenizer, 4)
    seqs = SampleBuilder(tokenizer, FakeEnv(), context, history_window=2).build(traj, index=3)
    assert len(seqs) == (4 if context == "window" else 1)
    scored = [tok for s in seqs for tok in s.action_tokens()]
    expected = [(t, i) for t, ids in enumerate(traj.response_ids) for i in ids]
    assert scored == expected
    for s in seqs:
        assert s.traj == 3 and len(s.input_ids) == len(s.action_mask) == len(s.turn_ids)
        assert all((m == 1) == (t >= 0) for m, t in zip(s.action_mask, s.turn_ids))


def test_full_mode_closes_turns_after_sampled_im_end_with_newline_only(tokenizer):
    traj = make_traj(tokenizer, 3)
    (seq,) = SampleBuilder(tokenizer, FakeEnv(), "full").build(traj)
    text = tokenizer.decode(list(seq.input_ids))
    assert text.count("<|im_end|>\n<|im_start|>user") == 3  # system->user excluded: system is first
    assert "<|im_end|><|im_end|>" not in text
    assert text.count("<|im_start|>assistant\n") == 3


@pytest.mark.parametrize("context", ["window", "full"])
def test_rollout_input_is_the_scored_context(tokenizer, context):
    traj = make_traj(tokenizer, 4)
    builder = SampleBuilder(tokenizer, FakeEnv(), context, history_window=2)
    seqs = builder.build(traj, skill=SKILL)
    for t in range(4):
        prompt, _ = builder.rollout_input(
            traj.task, traj.turns[:t], traj.response_ids[:t], traj.turns[t].observation, SKILL
        )
        seq = seqs[t] if context == "window" else seqs[0]
        start = seq.turn_ids.index(t)
        assert list(seq.input_ids[:start]) == prompt
        assert seq.input_ids[start : start + len(traj.response_ids[t])] == traj.response_ids[t]


def test_window_and_full_turn0_prompts_coincide(tokenizer):
    traj = make_traj(tokenizer, 3)
    window = SampleBuilder(tokenizer, FakeEnv(), "window", history_window=5).build(traj, SKILL)
    full = SampleBuilder(tokenizer, FakeEnv(), "full").build(traj, SKILL)
    n0 = window[0].turn_ids.count(0) + window[0].turn_ids.count(-1)
    assert window[0].input_ids == full[0].input_ids[:n0]


def test_window_history_holds_last_n_pairs(tokenizer):
    traj = make_traj(tokenizer, 4)
    prompt = SampleBuilder(tokenizer, FakeEnv(), "window", history_window=2).build(traj)[3]
    text = tokenizer.decode([i for i, m in zip(prompt.input_ids, prompt.action_mask) if not m])
    assert "## Previous steps (2 most recent of 3)" in text
    assert (
        "Action: go to shelf 1" in text
        and "Action: go to shelf 2" in text
        and "shelf 0" not in text
    )
    assert text.index("Action: go to shelf 2") < text.index(
        "## Observation\nYou arrive at location 3."
    )


@pytest.mark.parametrize("context", ["window", "full"])
def test_skill_is_spliced_inside_the_task_message_only(tokenizer, context):
    traj = make_traj(tokenizer, 3)
    seqs = SampleBuilder(tokenizer, FakeEnv(), context).build(traj, skill=SKILL)
    for seq in seqs:
        text = tokenizer.decode(list(seq.input_ids))
        assert text.count(SKILL) == 1
        user = text.index("<|im_start|>user\nYour task is to: put a clean apple in fridge")
        skill_at = text.index(SKILL_HEADER + SKILL)
        assert (
            user < skill_at < text.index("## Observation\n", user) < text.index("<|im_end|>", user)
        )


def test_teacher_and_student_score_identical_action_tokens(tokenizer):
    traj = [make_traj(tokenizer, 5), make_traj(tokenizer, 2, sampled_im_end=False)]
    for context in ("window", "full"):
        builder = SampleBuilder(tokenizer, FakeEnv(), context, max_prompt_tokens=260)
        student = builder.build_batch(traj)
        teacher = builder.build_batch(traj, [SKILL, None])
        assert_same_actions(student, teacher)
        assert [s.input_ids for s in student] != [s.input_ids for s in teacher]


@pytest.mark.parametrize("context, limit", [("window", 200), ("full", 260)])
def test_the_teacher_sees_exactly_the_students_history_plus_the_skill(tokenizer, context, limit):
    """Truncation is decided once, on the student's context: the teacher's sequences are
    the student's with the skill block added, however long the skill (here it alone is
    longer than the whole prompt budget, which raised PromptTooLong for the teacher only)."""
    traj = make_traj(tokenizer, 5)
    builder = SampleBuilder(tokenizer, FakeEnv(), context, history_window=3, max_prompt_tokens=limit)
    long_skill = " ".join([SKILL] * 20)
    assert len(encode(tokenizer, long_skill)) > limit
    student = builder.build(traj, index=1)
    teacher = builder.build(traj, index=1, added_skill=long_skill)
    assert_same_actions(student, teacher)
    assert [s.turn_ids.count(-1) > 0 for s in student] == [True] * len(student)
    assert len(teacher) == len(student) and (context == "window" or len(student) > 1)  # truncated
    for s, t in zip(student, teacher):
        assert sorted(set(s.turn_ids)) == sorted(set(t.turn_ids))
        s_text, t_text = tokenizer.decode(list(s.input_ids)), tokenizer.decode(list(t.input_ids))
        assert t_text.count(SKILL_HEADER + long_skill) == 1
        assert t_text.replace(SKILL_HEADER + long_skill, "") == s_text
    window3 = tokenizer.decode(list(student[3].input_ids)) if context == "window" else ""
    assert context == "full" or "## Previous steps (1 most recent of 3)" in window3  # history was cut
    # a rollout skill (Skill-GRPO) stays in both; the teacher's skill comes after it
    with_rollout = builder.build(traj, "short hint", added_skill="teacher skill")
    assert all(SKILL_HEADER + "short hint\nteacher skill" in tokenizer.decode(list(s.input_ids))
               for s in with_rollout)


def test_cut_skill_keeps_the_first_tokens_and_says_so(tokenizer):
    ids = encode(tokenizer, SKILL)
    assert cut_skill(tokenizer, SKILL, len(ids)) == (SKILL, False)
    assert cut_skill(tokenizer, SKILL, 3) == (tokenizer.decode(ids[:3]), True)
    assert cut_skill(tokenizer, None, 3) == (None, False) and cut_skill(tokenizer, "", 3) == ("", False)


def test_action_identity_assertion_fires_on_a_mismatch(tokenizer):
    traj = make_traj(tokenizer, 3)
    builder = SampleBuilder(tokenizer, FakeEnv(), "window")
    retokenised = Trajectory(traj.episode, [encode(tokenizer, t.response) for t in traj.turns])
    with pytest.raises(
        AssertionError, match="trajectory 0: teacher and student action tokens differ"
    ):
        assert_same_actions(builder.build(traj), builder.build(retokenised, skill=SKILL))


def _prompt_text(tokenizer, seq, turn):
    return tokenizer.decode(list(seq.input_ids[: seq.turn_ids.index(turn)]))


def test_window_truncation_drops_history_first(tokenizer):
    traj = make_traj(tokenizer, 4)
    roomy = SampleBuilder(tokenizer, FakeEnv(), "window", history_window=3, max_prompt_tokens=4096)
    full_len = len(roomy.build(traj, SKILL)[3].input_ids) - len(traj.response_ids[3])
    tight = SampleBuilder(
        tokenizer, FakeEnv(), "window", history_window=3, max_prompt_tokens=full_len - 1
    )
    seq = tight.build(traj, SKILL)[3]
    text = _prompt_text(tokenizer, seq, 3)
    assert seq.turn_ids.index(3) <= full_len - 1
    assert SKILL in text and "You arrive at location 3." in text
    assert "shelf 2" in text and "shelf 0" not in text  # oldest pair dropped first


def test_full_truncation_groups_turns_and_keeps_skill_and_observation(tokenizer):
    traj = make_traj(tokenizer, 5)
    limit = 300
    builder = SampleBuilder(tokenizer, FakeEnv(), "full", max_prompt_tokens=limit)
    seqs = builder.build(traj, SKILL)
    assert len(seqs) > 1  # truncation split the episode into groups
    for seq in seqs:
        for t in sorted({t for t in seq.turn_ids if t >= 0}):
            prompt, _ = builder.rollout_input(
                traj.task, traj.turns[:t], traj.response_ids[:t], traj.turns[t].observation, SKILL
            )
            assert list(seq.input_ids[: seq.turn_ids.index(t)]) == prompt and len(prompt) <= limit
            text = _prompt_text(tokenizer, seq, t)
            assert SKILL in text and text.rstrip().endswith(
                f"location {t}. You see a mug {t} and a towel {t}.\nWhat do you do next?<|im_end|>\n"
                "<|im_start|>assistant"
            )


def test_prompt_too_long_when_skill_and_observation_do_not_fit(tokenizer):
    traj = make_traj(tokenizer, 2)
    builder = SampleBuilder(tokenizer, FakeEnv(), "window", max_prompt_tokens=64)
    with pytest.raises(PromptTooLong, match="max_prompt_tokens=64"):
        builder.build(traj, SKILL * 3)


def test_bad_arguments_raise_clear_errors(tokenizer):
    with pytest.raises(ValueError, match="unknown context 'chunked'; valid: window, full"):
        SampleBuilder(tokenizer, FakeEnv(), "chunked")
    with pytest.raises(ValueError, match="1 response id lists for 2 turns"):
        Trajectory(make_episode(2), [[1]])


def test_analyzer_prompt_serialises_the_episode():
    ep = make_episode(3)
    ep.turns[1].valid, ep.turns[1].action = False, ""
    messages = analyzer_prompt("A household with rooms and objects.", ep)
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[1]["content"]
    assert "Step 0: go to shelf 0" in user and "Step 1: (invalid) <think>" in user
    assert "Outcome: failure (score 0.00) after 3 steps" in user and "<error_turn>" in user


def test_analyzer_target_round_trips_through_the_parser():
    h = Hindsight("Find the apple first.", "Do not open the fridge before holding the apple.", 2)
    parsed = parse_analyzer_output("noise " + analyzer_target(h), num_turns=3)
    assert (parsed.positive_skill, parsed.negative_skill, parsed.error_turn, parsed.valid) == (
        h.positive_skill,
        h.negative_skill,
        2,
        True,
    )
    ok = parse_analyzer_output(analyzer_target(Hindsight("Workflow.")), num_turns=3)
    assert ok.valid and ok.error_turn is None and ok.negative_skill == ""


def test_parser_flags_an_output_without_a_positive_skill():
    text = "<positive></positive><error_turn>none</error_turn>"
    parsed = parse_analyzer_output(text, num_turns=3)
    assert not parsed.valid and parsed.raw == text


@pytest.mark.parametrize(
    "text",
    [
        "<positive>p</positive><error_turn>3</error_turn><negative>n</negative>",  # turn out of range
        "<positive>p</positive><error_turn>1</error_turn><negative>none</negative>",  # no negative
        "<positive>p</positive><error_turn>two</error_turn><negative>n</negative>",
    ],
)
def test_a_malformed_boundary_keeps_the_positive_skill(text):
    """ETRO: no valid boundary -> Positive throughout; SEED: the skill whatever the tag."""
    parsed = parse_analyzer_output(text, num_turns=3)
    assert parsed.valid and parsed.positive_skill == "p" and parsed.raw == text
    assert (parsed.error_turn, parsed.negative_skill, parsed.boundary_valid) == (None, "", False)


def test_window_history_and_analyzer_drop_the_admissible_list(tokenizer):
    """The admissible commands belong to the current observation only (verl-agent): past
    observations in the window history and in the analyzer's episode text omit them."""
    from dataclasses import replace

    from envs.base import with_admissible
    from trainer.hindsight.analyzer import serialize_episode

    traj = make_traj(tokenizer, 4)
    listed = [replace(t, observation=with_admissible(t.observation, ["go to shelf 9"]),
                      next_observation=with_admissible(t.next_observation, ["go to shelf 9"]))
              for t in traj.episode.turns]
    episode = replace(traj.episode, turns=listed)
    traj = Trajectory(episode, traj.response_ids)
    prompt = SampleBuilder(tokenizer, FakeEnv(), "window", history_window=2).build(traj)[3]
    text = tokenizer.decode([i for i, m in zip(prompt.input_ids, prompt.action_mask) if not m])
    assert text.count("go to shelf 9") == 1  # the current observation's list only
    assert text.index("go to shelf 9") > text.index("## Observation\n")
    assert "go to shelf 9" not in serialize_episode(episode)

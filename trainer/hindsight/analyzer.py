"""The analyzer's prompt and its parser: how a writer is asked for a trajectory's
hindsight (SEED's analyzer prompt; ETRO's Positive skill, error turn and
Negative skill) and how its output is read back into :class:`envs.base.Hindsight`.
Malformed output is never used: it parses to ``valid=False``.

Writer prompts are registered by name (:func:`register_writer_prompt`; ``writer.prompt``
picks one): the built-in ``analyzer`` below, and a plugin's through the same call.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from envs.base import Episode, Hindsight, without_admissible

# -- analyzer / writer prompt ----------------------------------------------------------
ANALYZER_SYSTEM = (
    "You analyze a finished episode of an agent in a text environment and write hindsight "
    "skills: short, reusable, executable guidance for solving similar tasks."
)


ANALYZER_FORMAT = (
    "Answer in exactly this format:\n"
    "<positive>a reusable workflow for tasks like this one (2-4 short steps)</positive>\n"
    "<error_turn>the number of the first step whose mistake was decisive for the failure and "
    "was never corrected, or none</error_turn>\n"
    "<negative>for that step: the mistake, its consequence and what to do instead; none if "
    "there is no such step</negative>"
)


_TAG = {
    name: re.compile(rf"<{name}>(.*?)</{name}>", re.DOTALL | re.IGNORECASE)
    for name in ("positive", "negative", "error_turn")
}


def serialize_episode(episode: Episode, max_observation_chars: int = 600) -> str:
    """The trajectory as numbered steps (what the analyzer reads).  Observations longer than
    ``max_observation_chars`` are shortened in the middle."""

    def clip(text: str) -> str:
        if len(text) <= max_observation_chars:
            return text
        half = max_observation_chars // 2
        return f"{text[:half]} [...] {text[-half:]}"

    lines = [
        f"Task: {episode.task.instruction}",
        f"Initial observation: {clip(without_admissible(episode.first_observation))}",
    ]
    for t, turn in enumerate(episode.turns):
        action = turn.action if turn.valid and turn.action else f"(invalid) {turn.response.strip()}"
        lines.append(f"Step {t}: {action}\nResult: {clip(without_admissible(turn.next_observation))}")
    outcome = "success" if episode.success else "failure"
    lines.append(f"Outcome: {outcome} (score {episode.score:.2f}) after {len(episode.turns)} steps")
    return "\n".join(lines)


WRITER_IMAGES = 2  # images in a writer's prompt: the first observation, the last state


def episode_images(episode: Episode) -> tuple:
    """The :data:`WRITER_IMAGES` images a writer sees of ``episode``: its first observation's
    and the state's after its last turn (``info["image"]`` of an env with ``images=True``);
    () unless both exist."""
    if not episode.turns:
        return ()
    first, last = episode.turns[0].image, episode.turns[-1].info.get("image")
    return () if first is None or last is None else (first, last)


def analyzer_prompt(
    env_description: str, episode: Episode, max_observation_chars: int = 600,
    placeholders: Sequence[str] = (),
) -> list[dict]:
    """Chat messages asking for a tagged hindsight skill (:data:`ANALYZER_FORMAT`) for
    ``episode``; used by the self writer and as Stage-1 SFT inputs (targets:
    :func:`analyzer_target`).  Encode with :func:`encode_chat`.  ``placeholders``: the
    vision placeholders of :func:`episode_images` (first observation, last state), shown
    after the episode's text."""
    images = ""
    if placeholders:
        first, last = placeholders
        images = f"## Images\nFirst observation: {first}\nAfter the last step: {last}\n\n"
    user = (
        f"{env_description}\n\n## Episode\n{serialize_episode(episode, max_observation_chars)}\n\n"
        f"{images}"
        f"## Instructions\nWrite a positive skill for this kind of task. If the episode failed, "
        f"also find the first decisive, uncorrected mistake (steps are numbered from 0) and write "
        f"a negative skill about it.\n{ANALYZER_FORMAT}"
    )
    return [{"role": "system", "content": ANALYZER_SYSTEM}, {"role": "user", "content": user}]


def analyzer_target(hindsight: Hindsight) -> str:
    """A :class:`Hindsight` rendered in :data:`ANALYZER_FORMAT` (Stage-1 SFT target)."""
    turn = "none" if hindsight.error_turn is None else str(hindsight.error_turn)
    negative = hindsight.negative_skill.strip() or "none"
    return (
        f"<positive>{hindsight.positive_skill.strip()}</positive>\n<error_turn>{turn}</error_turn>\n"
        f"<negative>{negative}</negative>"
    )


def parse_analyzer_output(text: str, num_turns: int) -> Hindsight:
    """Parse :data:`ANALYZER_FORMAT`.  Invalid (``valid=False``, ``raw`` kept) when the
    positive skill is missing or empty.  A malformed boundary (an error turn that is not
    ``none`` or an integer in [0, num_turns), or an error turn without a negative skill;
    a missing tag counts as none) drops only the boundary: the Positive skill is kept with
    ``error_turn=None`` and ``boundary_valid=False`` (the papers' fallbacks: ETRO keeps
    Positive guidance throughout, SEED uses the skill whatever the tag)."""
    found = {k: (p.findall(text) or [None])[-1] for k, p in _TAG.items()}
    positive = (found["positive"] or "").strip()
    turn_text = (found["error_turn"] or "none").strip().lower()
    negative = (found["negative"] or "").strip()
    negative = "" if negative.lower() == "none" else negative
    if not positive:
        return Hindsight(positive_skill="", valid=False, raw=text)
    if turn_text == "none":
        return Hindsight(positive, negative, None, True, text)
    if not turn_text.isdigit() or int(turn_text) >= num_turns or not negative:
        return Hindsight(positive, "", None, True, text, boundary_valid=False)
    return Hindsight(positive, negative, int(turn_text), True, text)


@dataclass(frozen=True)
class WriterPrompt:
    """How the self, frozen and external writers ask for a trajectory's hindsight and read
    the answer back (``writer.prompt`` names one).

    Attributes:
        prompt: ``(domain, episode, max_observation_chars, placeholders) -> chat messages``,
            as :func:`analyzer_prompt` (``placeholders``: vision placeholders, may be empty).
        parse: ``(text, num_turns) -> Hindsight``; malformed text gives ``valid=False`` (never
            used silently), as :func:`parse_analyzer_output`.
        target: ``Hindsight -> text``: what Stage 1 and the warm start teach the policy to
            write (``parse(target(h), n)`` must give ``h`` back), as :func:`analyzer_target`.
        stop: strings that end a written answer (the analyzer's ``</negative>``).
    """

    prompt: Callable[..., list[dict]]
    parse: Callable[[str, int], Hindsight]
    target: Callable[[Hindsight], str]
    stop: tuple[str, ...] = ()


WRITER_PROMPTS: dict[str, WriterPrompt] = {}


def register_writer_prompt(name: str, prompt: WriterPrompt) -> WriterPrompt:
    """Register ``prompt`` as ``writer.prompt: <name>``; a taken name raises."""
    if not isinstance(prompt, WriterPrompt):
        raise ValueError(f"writer prompt {name!r}: expected a WriterPrompt, got {type(prompt).__name__}")
    if name in WRITER_PROMPTS:
        old = WRITER_PROMPTS[name].prompt
        raise ValueError(f"writer prompt {name!r} is already registered ({old.__module__}."
                         f"{old.__qualname__}); choose another name")
    WRITER_PROMPTS[name] = prompt
    return prompt


ANALYZER = register_writer_prompt("analyzer", WriterPrompt(analyzer_prompt, parse_analyzer_output,
                                                           analyzer_target, ("</negative>",)))


def writer_prompt(name: str) -> WriterPrompt:
    """The writer prompt registered as ``name``; an unknown name raises listing the valid ones."""
    if name not in WRITER_PROMPTS:
        raise ValueError(f"writer.prompt: unknown writer prompt {name!r}; valid: {', '.join(sorted(WRITER_PROMPTS))}")
    return WRITER_PROMPTS[name]

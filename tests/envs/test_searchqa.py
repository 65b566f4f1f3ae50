"""The built-in ``searchqa`` env, its protocol helpers, BM25 retriever and retrieval server."""

from __future__ import annotations

import hashlib
import json
import math
import random
import urllib.error
import urllib.request

import pytest

import envs
from envs.base import expert_policy, first_unrecovered_error, format_response, run_episode
from envs.retrieval import BM25Retriever, RetrievalServer, from_contents, to_contents
from envs.searchqa.env import SearchQAEnv, search_throughput
from envs.searchqa.kb import RELATIONS, corpus
from envs.searchqa.protocol import (
    INVALID_MESSAGE,
    exact_match,
    format_information,
    normalize_answer,
    parse_search_action,
)
from envs.searchqa.questions import EVAL_SPLITS, PANELS, SPLITS, panels
from support.hash_seeds import outputs_under_hash_seeds


@pytest.fixture(scope="module")
def env() -> SearchQAEnv:
    return envs.make("searchqa")


# -- protocol helpers ----------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("The  Eiffel-Tower!", "eiffeltower"),
    ("An apple, a day", "apple day"),
    ("Theatre of the Absurd", "theatre of absurd"),
    ("  Ada\tQuill. ", "ada quill"),
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match_uses_aliases_and_normalisation():
    assert exact_match("the republic of Tessaly.", ["Tessaly", "Republic of Tessaly"])
    assert not exact_match("Tessaly City", ["Tessaly", "Republic of Tessaly"])
    assert not exact_match("", ["Tessaly"])


@pytest.mark.parametrize("text, expected", [
    ("<think>x</think><search> who  founded\nX </search>", ("search", "who founded X")),
    ("<search>a</search> then <answer>Ada Quill</answer>", ("answer", "Ada Quill")),
    ("<answer>first</answer><answer>last</answer>", ("answer", "last")),
    ("<answer>a</answer><search>b</search>", ("search", "b")),
    ("<think></think><action><ANSWER>Yes</ANSWER></action>", ("answer", "Yes")),
    ("<answer>  </answer>", None),
    ("<search>unclosed", None),
    ("just text", None),
])
def test_parse_search_action_takes_last_span(text, expected):
    assert parse_search_action(text) == expected


def test_format_information_matches_search_r1():
    docs = [("Norvik Press", "A publisher.", 2.0), ("Ada Quill", "A novelist.", 1.0)]
    assert format_information(docs) == (
        '<information>Doc 1(Title: "Norvik Press") A publisher.\n'
        'Doc 2(Title: "Ada Quill") A novelist.</information>'
    )


# -- BM25 --------------------------------------------------------------------------------
def test_bm25_scores_match_hand_computation():
    # tokens (title + text, stopwords dropped): Alpha: 3, Beta: 4, Gamma: 2 -> avgdl = 3
    r = BM25Retriever([("Alpha", "apple banana"), ("Beta", "apple apple cherry"),
                       ("Gamma", "durian")])
    idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))  # df(apple) = 2 of N = 3
    alpha = idf * 1 * 1.9 / (1 + 0.9 * (1 - 0.4 + 0.4 * 3 / 3))
    beta = idf * 2 * 1.9 / (2 + 0.9 * (1 - 0.4 + 0.4 * 4 / 3))
    (i0, s0), (i1, s1) = r.search_ids("the apple", topk=3)
    assert (i0, i1) == (1, 0)
    assert s0 == pytest.approx(beta, rel=1e-6) and s1 == pytest.approx(alpha, rel=1e-6)
    gamma = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5)) * 1.9 / (1 + 0.9 * (0.6 + 0.4 * 2 / 3))
    assert r.search("durian", 1) == [("Gamma", "durian", pytest.approx(gamma, rel=1e-6))]
    assert r.search_ids("kiwi", 3) == []


def test_bm25_ties_break_by_index_and_topk_is_checked():
    r = BM25Retriever([("x", "same words"), ("y", "same words"), ("z", "same words")])
    assert [i for i, _ in r.search_ids("same", 2)] == [0, 1]
    with pytest.raises(ValueError, match="topk"):
        r.search_ids("same", 0)
    with pytest.raises(ValueError, match="empty corpus"):
        BM25Retriever([])


def test_contents_round_trip():
    assert to_contents("Ada Quill", "A novelist.") == '"Ada Quill"\nA novelist.'
    assert from_contents(to_contents("Ada Quill", "A novelist.")) == ("Ada Quill", "A novelist.")


def _post(url: str, payload: dict):
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(url, json.dumps(payload).encode(), headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_retrieval_server_speaks_search_r1_protocol():
    r = BM25Retriever([("Norvik Press", "founded by Ada Quill"), ("Ada Quill", "a novelist")])
    with RetrievalServer(r, port=0) as server:
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/retrieve")
        body = _post(server.url, {"queries": ["Norvik founded", "novelist"], "topk": 1,
                                  "return_scores": True})
        assert body == {"result": [
            [{"document": {"id": "0", "contents": '"Norvik Press"\nfounded by Ada Quill'},
              "score": pytest.approx(r.search_ids("Norvik founded", 1)[0][1])}],
            [{"document": {"id": "1", "contents": '"Ada Quill"\na novelist'},
              "score": pytest.approx(r.search_ids("novelist", 1)[0][1])}],
        ]}
        bare = _post(server.url, {"queries": ["novelist"], "topk": 3, "return_scores": False})
        assert bare == {"result": [[{"id": "1", "contents": '"Ada Quill"\na novelist'}]]}
        with pytest.raises(urllib.error.HTTPError) as bad:
            _post(server.url, {"queries": "not a list"})
        assert bad.value.code == 400
        with pytest.raises(urllib.error.HTTPError) as missing:
            _post(server.url.replace("/retrieve", "/search"), {"queries": ["x"]})
        assert missing.value.code == 404


# -- knowledge base and panels -------------------------------------------------------------
def test_every_fact_is_stated_by_a_passage_that_names_its_object():
    kb = corpus(0)
    stated: dict[tuple[str, str], list[str]] = {}
    for p in kb.passages:
        for fact in p.facts:
            stated.setdefault(fact, []).append(p.text)
    assert set(stated) == set(kb.facts)
    for (subject, relation), obj in kb.facts.items():
        assert RELATIONS[relation].subject == kb.entities[subject].type
        assert all(obj in text for text in stated[(subject, relation)]), (subject, relation)
    assert len(kb.passages) == kb.n_core_passages > 7000


def test_panels_have_documented_sizes_and_no_shared_questions(env):
    assert env.splits == SPLITS == ("train", "nq", "triviaqa", "popqa", "hotpotqa", "2wiki",
                                    "musique", "bamboogle")
    seen = set()
    for split in SPLITS:
        questions = panels()[split]
        assert len(questions) == PANELS[split][0]
        keys = {q.key for q in questions}
        assert len(keys) == len(questions) and not keys & seen
        seen |= keys
    with pytest.raises(ValueError, match="valid: train, nq"):
        env.panel("squad")


def test_question_facts_form_chains_that_reach_the_answer():
    kb = corpus(0)
    hops = {split: {len(q.facts) for q in panels()[split]} for split in SPLITS}
    assert hops["nq"] == hops["triviaqa"] == hops["popqa"] == {1}
    assert hops["musique"] == {2, 3, 4} and hops["bamboogle"] == {2} and 4 in hops["2wiki"]
    for q in panels()["musique"] + panels()["hotpotqa"]:
        for subject, relation, obj in q.facts:
            assert kb.facts[(subject, relation)] == obj
        if q.kind == "chain":
            assert all(a[2] == b[0] for a, b in zip(q.facts, q.facts[1:]))
            assert q.facts[0][0] in q.text and q.answers[0] == q.facts[-1][2]
        if q.kind == "comparison":
            (a, _, ya), (b, _, yb) = q.facts
            assert q.answers[0] == (a if int(ya) < int(yb) else b)


def test_panels_are_identical_across_processes_and_hash_seeds():
    def digest() -> str:
        payload = [(s, q.text, q.answers, q.facts) for s in SPLITS for q in panels()[s]]
        payload.append([(p.title, p.text) for p in corpus(0).passages])
        return hashlib.sha256(repr(payload).encode()).hexdigest()

    code = (
        "import hashlib\nfrom envs.searchqa.questions import SPLITS, panels\n"
        "from envs.searchqa.kb import corpus\n"
        "payload = [(s, q.text, q.answers, q.facts) for s in SPLITS for q in panels()[s]]\n"
        "payload.append([(p.title, p.text) for p in corpus(0).passages])\n"
        "print(hashlib.sha256(repr(payload).encode()).hexdigest())\n"
    )
    outputs = set(outputs_under_hash_seeds(code, timeout=60))
    assert outputs == {digest()}


# -- episodes ------------------------------------------------------------------------------
def _task(env, split: str, kind: str, hops: int):
    return next(t for t in env.panel(split)
                if t.spec["kind"] == kind and len(t.spec["facts"]) == hops)


def test_expert_episode_privileged_facts(env):
    task = _task(env, "musique", "chain", 3)
    observation = env.reset(task)
    assert observation == f"Question: {task.instruction}"
    assert env.distance_to_goal() == 4 and env.state_key() == "t0|"
    plan = env.plan()
    assert len(plan) == 4 and plan[-1] == f"<answer>{task.spec['answers'][0]}</answer>"
    episode = run_episode(env, task, expert_policy())
    assert episode.success and episode.score == 1.0 and episode.total_reward == 1.0
    assert episode.distances == list(range(len(episode.turns), -1, -1))
    last = episode.turns[-1]
    assert last.info["state_key"].endswith("|answered:right") and last.info["plan"] == []
    first = episode.turns[0]
    assert "<information>Doc 1(Title: " in first.next_observation
    assert first.info["plan"] == plan[1:] and first.info["action"] == plan[0]
    subject, relation, _ = task.spec["facts"][0]
    assert first.info["state_key"] == f"t1|{subject}.{relation}"


def test_invalid_step_and_wrong_answer(env):
    task = _task(env, "hotpotqa", "chain", 2)
    env.reset(task)
    result = env.step("<think>no tags here</think>")
    assert result.observation == INVALID_MESSAGE and result.reward == 0.0  # binary by default
    env.invalid_penalty = 0.1
    env.reset(task)
    result = env.step("<think>no tags here</think>")
    assert result.observation == INVALID_MESSAGE and result.reward == pytest.approx(-0.1)
    assert not result.done and result.info["valid"] is False and result.info["action"] == ""
    assert result.info["distance"] == 3 and result.info["state_key"] == "t1|"
    wrong = env.step("<answer>Nobody Atall</answer>")
    assert wrong.done and not wrong.success and wrong.reward == 0.0
    assert wrong.info["distance"] == 2 + 2  # n facts + 2: terminal failure
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("<answer>x</answer>")
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.expert_action()


def test_wrong_answer_is_the_first_unrecovered_error(env):
    task = _task(env, "2wiki", "chain", 2)
    env.reset(task)
    first = env.plan()[0]
    actions = [first, "<answer>Definitely Wrong</answer>"]
    episode = run_episode(env, task, lambda e, o, t: format_response(actions[len(t)]))
    assert episode.distances == [3, 2, 4]
    assert first_unrecovered_error(episode.distances, episode.success) == 1


def test_turn_budget_truncates_and_replay_restores_state(env):
    task = _task(env, "musique", "chain", 4)
    env.reset(task)
    results = [env.step(format_response("<search>weather records</search>")) for _ in range(5)]
    assert [r.done for r in results] == [False, False, False, False, True]
    assert not results[-1].success and env.max_turns == 5
    env.reset(task)
    plan = env.plan()
    stepped = [env.step(format_response(env.plan()[0])) for _ in range(2)]
    state = (env.state_key(), env.plan(), env.distance_to_goal())
    observation = env.reset(task, replay=[r.info["action"] for r in stepped])
    assert observation == stepped[-1].observation and observation.startswith("<information>")
    assert (env.state_key(), env.plan(), env.distance_to_goal()) == state
    assert env.turn == 2 and env.distance_to_goal() <= 3
    with pytest.raises(ValueError, match="after the episode ended"):
        env.reset(task, replay=[plan[-1], plan[0]])


def _success_rate(env, tasks, policy) -> float:
    """Success rate of ``policy(task_id) -> act`` (a fresh, task-seeded policy per episode)."""
    return sum(run_episode(env, t, policy(t.id)).success for t in tasks) / len(tasks)


def _random_policy(seed: str):
    rng = random.Random(seed)
    names = sorted(corpus(0).entities)

    def act(env, observation, turns):
        if rng.random() < 0.6:
            words = env.task.instruction.split()
            return f"<search>{' '.join(rng.sample(words, min(2, len(words))))}</search>"
        return f"<answer>{rng.choice(names)}</answer>"

    return act


@pytest.mark.parametrize("split", EVAL_SPLITS)
def test_expert_solves_and_random_fails_panel_prefix(env, split):
    tasks = env.panel(split)[:40]
    assert _success_rate(env, tasks, lambda seed: expert_policy(seed=seed)) >= 0.95
    assert _success_rate(env, tasks, _random_policy) <= 0.1


def test_epsilon_expert_errs(env):
    tasks = env.panel("bamboogle")[:40]
    assert _success_rate(env, tasks, lambda seed: expert_policy(1.0, seed)) <= 0.05
    rate = _success_rate(env, tasks, lambda seed: expert_policy(0.2, seed))
    assert 0.2 < rate < 0.95


def test_prompt_pieces(env):
    assert "<search>" in env.system_prompt() and "<answer>" in env.system_prompt()
    assert "exact match" in env.domain_description()
    kinds = {t.spec["kind"]: t for s in ("hotpotqa", "2wiki", "nq") for t in env.panel(s)}
    assert set(kinds) == {"single", "chain", "comparison", "same_publisher", "same_country"}
    flows = {k: tuple(env.workflow(t)) for k, t in kinds.items()}
    assert len(set(flows.values())) == 5 and all(len(f) >= 3 for f in flows.values())
    assert env.admissible_actions() is None


def test_search_throughput_reports_rate():
    stats = search_throughput(n_passages=0, n_queries=200)
    assert stats["passages"] == len(corpus(0).passages) and stats["searches_per_s"] > 0


# -- slow: full panels and the benchmark corpus ----------------------------------------------
@pytest.mark.slow
def test_expert_full_panels_on_benchmark_corpus():
    big = envs.make("searchqa", n_passages=20_000)
    assert len(big.kb.passages) == 20_000
    core = [p.title for p in corpus(0).passages]
    assert [p.title for p in big.kb.passages[: len(core)]] == core
    for split in EVAL_SPLITS:
        rate = _success_rate(big, big.panel(split), lambda seed: expert_policy(seed=seed))
        assert rate >= 0.95, split
    assert search_throughput(20_000, 2_000)["searches_per_s"] >= 500
    with pytest.raises(ValueError, match="below the core corpus"):
        corpus(100)

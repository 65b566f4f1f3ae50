"""The ``searchr1`` and ``webshop`` adapters against servers started on loopback."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

import envs
from envs.adapters import AdapterUnavailable, require_module
from envs.adapters.searchr1 import SearchR1Env, load_splits
from envs.adapters.webshop import WebShopEnv, parse_webshop_action
from envs.base import expert_policy, format_response, run_episode
from envs.retrieval import BM25Retriever, RetrievalServer
from envs.searchqa.env import retriever


@pytest.fixture(autouse=True)
def _no_adapter_env(monkeypatch):
    for var in ("SEARCHR1_URL", "SEARCHR1_DATA", "WEBSHOP_URL"):
        monkeypatch.delenv(var, raising=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- shared error type ---------------------------------------------------------------------
@pytest.mark.parametrize("name, needle", [("searchr1", "SEARCHR1_URL"), ("webshop", "WEBSHOP_URL")])
def test_unset_url_fails_with_one_clear_line(name, needle):
    with pytest.raises(AdapterUnavailable) as err:
        envs.make(name)
    message = str(err.value)
    assert message.startswith(f"{name}: no url given") and needle in message and "\n" not in message


def test_missing_module_names_the_package():
    with pytest.raises(AdapterUnavailable, match=r"pip install no-such-pkg"):
        require_module("demo", "no_such_module_xyz", "no-such-pkg")


# -- searchr1 ------------------------------------------------------------------------------
def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_searchr1_reads_jsonl_and_parquet_formats(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    train = _jsonl(tmp_path / "train.jsonl", [
        {"id": "0", "question": "who founded norvik press", "golden_answers": ["Ada Quill"]},
        {"id": "1", "question": "Where is Tessaly?", "golden_answers": "Nowhere"},
    ])
    table = pa.Table.from_pylist([
        {"data_source": "nq", "question": "q one",
         "reward_model": {"style": "rule", "ground_truth": {"target": ["A", "B"]}}},
        {"data_source": "hotpotqa", "question": "q two?",
         "reward_model": {"style": "rule", "ground_truth": {"target": ["C"]}}},
    ])
    pq.write_table(table, tmp_path / "test.parquet")
    splits = load_splits(f"{train},{tmp_path / 'test.parquet'}")
    assert list(splits) == ["train", "test", "nq", "hotpotqa"]
    assert splits["train"] == (("who founded norvik press?", ("Ada Quill",)),
                               ("Where is Tessaly?", ("Nowhere",)))
    assert splits["test"] == (("q one?", ("A", "B")), ("q two?", ("C",)))
    assert splits["nq"] == (("q one?", ("A", "B")),)
    named = load_splits(f"dev={train}")
    assert list(named) == ["dev"]


def test_searchr1_rejects_bad_rows_and_missing_files(tmp_path):
    bad = _jsonl(tmp_path / "bad.jsonl", [{"query": "no question field"}])
    with pytest.raises(ValueError, match=r"bad.jsonl:1: a Search-R1 row needs 'question'"):
        load_splits(str(bad))
    with pytest.raises(AdapterUnavailable, match="does not exist"):
        SearchR1Env(data=str(tmp_path / "absent.jsonl"), url="http://127.0.0.1:1/retrieve")


def test_searchr1_episode_against_builtin_server(tmp_path, monkeypatch):
    corpus = [("Norvik Press", "Norvik Press is a publishing house founded by Ada Quill."),
              ("Ada Quill", "Ada Quill is a novelist born in Tessaly.")]
    data = _jsonl(tmp_path / "qa.jsonl", [{"question": "Who founded Norvik Press?",
                                           "golden_answers": ["Ada Quill", "A. Quill"]}])
    with RetrievalServer(BM25Retriever(corpus)) as server:
        monkeypatch.setenv("SEARCHR1_URL", server.url)
        monkeypatch.setenv("SEARCHR1_DATA", str(data))
        env = envs.make("searchr1", max_turns=4)
        task = env.panel("qa")[0]
        assert task.id == "searchr1/qa/00000"
        assert env.reset(task) == "Question: Who founded Norvik Press?"
        found = env.step("<think>look it up</think><search>Norvik Press founded</search>")
        assert found.observation.startswith(
            '<information>Doc 1(Title: "Norvik Press") Norvik Press is a publishing house '
            'founded by Ada Quill.')
        assert found.info["state_key"] == "t1|Norvik Press"
        assert found.info["distance"] is None and found.info["plan"] is None and found.reward == 0.0
        more = env.step("<search>novelist Quill</search>")
        assert more.info["state_key"] == "t2|Ada Quill;Norvik Press"
        answer = env.step("<answer>the a. quill</answer>")
        assert answer.done and answer.success and answer.reward == 1.0
        assert answer.info["score"] == 1.0
        episode = run_episode(env, task, expert_policy())
        assert episode.success and [t.action for t in episode.turns] == [
            "<search>Who founded Norvik Press?</search>", "<answer>Ada Quill</answer>"]


def test_searchr1_matches_builtin_searchqa_step_for_step(tmp_path):
    builtin = envs.make("searchqa")
    tasks = builtin.panel("hotpotqa")[:4]
    data = _jsonl(tmp_path / "hotpot.jsonl", [
        {"question": t.instruction, "golden_answers": t.spec["answers"]} for t in tasks])
    with RetrievalServer(retriever(0)) as server:
        adapter = SearchR1Env(data=str(data), url=server.url)
        for task, twin in zip(tasks, adapter.panel("hotpot")):
            assert builtin.reset(task) == adapter.reset(twin)
            for action in builtin.plan():
                a, b = builtin.step(format_response(action)), adapter.step(format_response(action))
                assert (a.observation, a.reward, a.done, a.success) == (
                    b.observation, b.reward, b.done, b.success)
            assert a.success


def test_searchr1_unreachable_server_is_reported(tmp_path):
    data = _jsonl(tmp_path / "qa.jsonl", [{"question": "q?", "golden_answers": ["a"]}])
    env = SearchR1Env(data=str(data), url=f"http://127.0.0.1:{_free_port()}/retrieve", timeout_s=2)
    env.reset(env.panel("qa")[0])
    with pytest.raises(AdapterUnavailable, match="searchr1: server .* is unreachable"):
        env.step("<search>anything</search>")


# -- webshop -------------------------------------------------------------------------------
INSTRUCTION = "i need a red mug under 20 dollars"
PAGES = {  # page -> (observation, clickables, has_search_bar)
    "start": (f"WebShop [SEP] Instruction: [SEP] {INSTRUCTION} [SEP] Search", [], True),
    "results": (("Back to Search [SEP] Page 1 (Total results: 2) [SEP] B000MUG001 [SEP] Red Mug "
                 "[SEP] $9.99 [SEP] B000MUG002 [SEP] Blue Mug [SEP] $8.00"),
                ["back to search", "next >", "b000mug001", "b000mug002"], False),
    "item": ("Back to Search [SEP] < Prev [SEP] Mug [SEP] Price: $9.99 [SEP] Buy Now",
             ["back to search", "< prev", "description", "buy now"], False),
    "done": ("Thank you for shopping with us!", [], False),
}


class FakeWebShop(ThreadingHTTPServer):
    """AgentGym ``agentenv-webshop`` endpoints over a three-page shop (see webshop.py)."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _FakeHandler)
        self.envs: dict[int, dict] = {}
        self.calls: list[tuple[str, object]] = []

    def act(self, state: dict, action: str) -> tuple[float, bool]:
        kind, arg = action[:-1].split("[", 1)
        if kind == "search":
            state.update(page="results", asin="")
        elif arg == "buy now":
            state["page"] = "done"
            return (1.0 if state["asin"] == "b000mug001" else 0.25), True
        elif arg == "back to search":
            state.update(page="start", asin="")
        else:
            state.update(page="item", asin=arg)
        return 0.0, False


class _FakeHandler(BaseHTTPRequestHandler):
    server: FakeWebShop

    def do_GET(self):
        url = urlparse(self.path)
        state = self.server.envs[int(parse_qs(url.query)["env_idx"][0])]
        self.server.calls.append((url.path, None))
        observation, clickables, search_bar = PAGES[state["page"]]
        reply = {
            "/observation": observation,
            "/instruction_text": INSTRUCTION,
            "/available_actions": {"has_search_bar": search_bar, "clickables": clickables},
            "/state": {"url": f"http://fake/{state['page']}/{state['session']}/{state['asin']}",
                       "html": "", "instruction_text": INSTRUCTION},
        }[url.path]
        self._send(reply)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        self.server.calls.append((self.path, body))
        envs_ = self.server.envs
        if self.path == "/create":
            envs_[len(envs_)] = {"page": "start", "session": None, "asin": ""}
            return self._send(len(envs_) - 1)
        state = envs_[body["env_idx"]]
        if self.path == "/reset":
            state.update(page="start", session=body["session_id"], asin="")
            return self._send([PAGES["start"][0], None])
        if self.path == "/close":
            return self._send({"closed": envs_.pop(body["env_idx"], None) is not None})
        reward, done = self.server.act(state, body["action"])
        self._send({"state": PAGES[state["page"]][0], "reward": reward, "done": done, "info": None})

    def _send(self, reply):
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def shop():
    server = FakeWebShop()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("action, expected", [
    ("search[red mug]", ("search", "red mug")), ("click[Buy Now]", ("click", "Buy Now")),
    ("click[]", None), ("buy[x]", None), (None, None),
])
def test_parse_webshop_action(action, expected):
    assert parse_webshop_action(action) == expected


def test_webshop_episode_parsing(shop):
    env = WebShopEnv(url=f"http://127.0.0.1:{shop.server_address[1]}", invalid_penalty=0.1)
    assert len(env.panel("test")) == 500 and env.panel("train")[0].spec == {"session": 500}
    task = env.panel("test")[7]
    observation = env.reset(task)
    assert observation == f"{PAGES['start'][0]}\nAdmissible actions: search[<keywords>]"
    assert env.task_instruction(task) == INSTRUCTION and env.state_key() == "http://fake/start/7/"
    bad = env.step(format_response("click[b000mug001]"))  # not clickable on the start page
    assert bad.reward == pytest.approx(-0.1) and not bad.info["valid"] and not bad.done
    assert not any(path == "/step" for path, _ in shop.calls)
    found = env.step(format_response("search[red mug]"))
    assert found.info["valid"] and found.info["action"] == "search[red mug]"
    assert found.observation.endswith("Admissible actions: click[back to search], click[next >], "
                                      "click[b000mug001], click[b000mug002]")
    assert env.admissible_actions()[-1] == "click[b000mug002]"
    wrong = env.step(format_response("click[B000MUG002]"))  # matched case-insensitively
    assert wrong.info["action"] == "click[b000mug002]"
    assert wrong.info["state_key"] == "http://fake/item/7/b000mug002"
    bought = env.step(format_response("click[buy now]"))
    assert bought.done and not bought.success and bought.info["score"] == 0.25
    assert bought.info["distance"] is None and bought.info["plan"] is None


def test_webshop_heuristic_expert_buys_first_result(shop):
    env = WebShopEnv(url=f"http://127.0.0.1:{shop.server_address[1]}", max_turns=15)
    episode = run_episode(env, env.panel("test")[3], expert_policy())
    assert [t.action for t in episode.turns] == [
        f"search[{INSTRUCTION}]", "click[b000mug001]", "click[buy now]"]
    assert episode.success and episode.score == 1.0 and episode.total_reward == 1.0
    env.close()
    assert shop.calls[-1] == ("/close", {"env_idx": 0}) and shop.envs == {}


def test_webshop_turn_budget(shop):
    env = WebShopEnv(url=f"http://127.0.0.1:{shop.server_address[1]}", max_turns=2)
    env.reset(env.panel("train")[0])
    assert not env.step(format_response("search[mug]")).done
    last = env.step(format_response("click[b000mug002]"))
    assert last.done and not last.success and last.info["score"] == 0.0

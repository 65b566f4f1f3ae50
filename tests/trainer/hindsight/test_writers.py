"""The external writer against a fake OpenAI-compatible chat-completions server: the request
carries the configured sampling (top-k only when set), the key only as a header, and the
reply is parsed into hindsight."""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest

import envs
from envs.base import expert_policy, run_episode
from envs.oracle import Oracle
from support.chat import FakeChat
from trainer.config import WriterConfig
from trainer.episodes.samples import Trajectory
from trainer.hindsight.analyzer import analyzer_target
from trainer.hindsight.writers import ExternalWriter


@pytest.fixture
def episode():
    make = lambda: envs.make("household", level="small")
    env = make()
    task = env.panel("train")[0]
    ep = run_episode(env, task, expert_policy(epsilon=0.5, seed="w"))
    return ep, Oracle(make).write(ep)


@pytest.mark.parametrize("top_k", [0, 20])
def test_external_writer_request_and_reply(episode, monkeypatch, top_k):
    ep, oracle = episode
    server = FakeChat(analyzer_target(oracle))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("HS_TEST_KEY", "sk-secret")
        cfg = dataclasses.replace(WriterConfig(), kind="external", model="m", top_k=top_k,
                                  endpoint=f"http://127.0.0.1:{server.server_port}/v1",
                                  api_key_env="HS_TEST_KEY", temperature=0.6, top_p=0.95)
        writer = ExternalWriter("a household", cfg)
        (hindsight,) = writer.write([Trajectory(ep, [[1]] * len(ep.turns))])
    finally:
        server.shutdown()
        server.server_close()
    path, headers, body = server.requests[0]
    assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer sk-secret"
    assert (body["model"], body["temperature"], body["top_p"], body["max_tokens"]) == (
        "m", 0.6, 0.95, cfg.max_new_tokens)
    assert body.get("top_k") == (top_k or None)  # only sent when set
    assert "sk-secret" not in json.dumps(body)
    assert hindsight.valid and hindsight.positive_skill == oracle.positive_skill
    assert hindsight.error_turn == oracle.error_turn


class SlowChat(FakeChat):
    """FakeChat whose replies take ``delay`` seconds; counts the requests in flight, from
    arrival until the reply starts (counting until the handler returns raced: the client,
    already answered, sent its next request before the count went down)."""

    def __init__(self, reply: str, delay: float):
        super().__init__(reply)
        self.delay, self.in_flight, self.most, self.lock = delay, 0, 0, threading.Lock()
        handler = self.RequestHandlerClass
        server = self

        class Slow(handler):
            counted = False  # this request is counted in flight

            def do_POST(self):
                with server.lock:
                    server.in_flight += 1
                    server.most = max(server.most, server.in_flight)
                self.counted = True
                try:
                    threading.Event().wait(server.delay)
                    super().do_POST()
                finally:
                    self._done()

            def send_response(self, *args, **kwargs):
                self._done()
                super().send_response(*args, **kwargs)

            def _done(self):
                if self.counted:
                    self.counted = False
                    with server.lock:
                        server.in_flight -= 1

        self.RequestHandlerClass = Slow


@pytest.mark.parametrize("concurrency", [1, 4])
def test_external_writer_sends_a_bounded_pool_of_concurrent_requests(episode, concurrency):
    """12 trajectories, each answered after 0.2 s: at most ``writer.concurrency`` requests in
    flight and that many reached; the answers come back in trajectory order, each request
    with its own seed."""
    ep, oracle = episode
    server = SlowChat(analyzer_target(oracle), delay=0.2)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        cfg = dataclasses.replace(WriterConfig(), kind="external", model="m", concurrency=concurrency,
                                  endpoint=f"http://127.0.0.1:{server.server_port}/v1")
        trajectories = [Trajectory(ep, [[1]] * len(ep.turns)) for _ in range(12)]
        hindsights = ExternalWriter("a household", cfg).write(trajectories, seed=7)
    finally:
        server.shutdown()
        server.server_close()
    assert server.most == concurrency
    assert len(hindsights) == 12 and all(h.valid for h in hindsights)
    seeds = [body["seed"] for _, _, body in server.requests]
    assert len(set(seeds)) == 12

"""A fake OpenAI-compatible chat-completions endpoint on loopback (the external writer's
counterpart): answers every POST with a fixed reply and keeps the requests."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeChat(ThreadingHTTPServer):
    """Answers every POST /v1/chat/completions with ``reply``; keeps the requests as
    ``(path, headers, body)``."""

    def __init__(self, reply: str):
        self.reply, self.requests = reply, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append((self.path, dict(self.headers), body))
                data = json.dumps({"choices": [{"message": {"content": server.reply}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    def __enter__(self) -> FakeChat:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()

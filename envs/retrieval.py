"""The built-in retriever and an HTTP server speaking Search-R1's retrieval protocol.

:class:`BM25Retriever` is Okapi BM25 over a precomputed inverted index (numpy postings with
the per-posting term weight already computed), so a query costs one scatter-add per query
term plus a partial sort; ``rank_bm25`` rescans every document per term and is ~100x
slower on a 20,000-passage corpus.  Scoring (Robertson & Zaragoza 2009, Lucene's idf):

    score(q, d) = sum_{t in q} idf(t) * tf(t, d) * (k1 + 1)
                               / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

with Pyserini's defaults k1 = 0.9, b = 0.4 (the BM25 setting of Search-R1's retriever).

:class:`RetrievalServer` serves ``POST /retrieve`` exactly like Search-R1's
``search_r1/search/retrieval_server.py``:

    request:  {"queries": ["..."], "topk": 3, "return_scores": true}
    response: {"result": [[{"document": {"id": "17", "contents": "\\"Title\\"\\ntext"},
                            "score": 12.3}, ...], ...]}

(with ``return_scores`` false each inner list holds the bare documents).  It uses the
standard library's ``ThreadingHTTPServer`` on 127.0.0.1.  ``python -m
envs.searchqa.serve --port 8000`` serves the built-in searchqa corpus.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from typing_extensions import Self

TOKEN_RE = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset([
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "have", "he", "her",
    "his", "in", "is", "it", "its", "of", "on", "or", "she", "that", "the", "their", "they",
    "this", "to", "was", "were", "which", "who", "whom", "with", "what", "where", "when", "how",
    "did", "does", "do",
])


def tokenize(text: str) -> list[str]:
    """Lowercased alphanumeric tokens without stopwords."""
    return [t for t in TOKEN_RE.findall(text.lower()) if t not in STOPWORDS]


def to_contents(title: str, text: str) -> str:
    """A passage in wiki-18 ``contents`` form: the quoted title line, then the text."""
    return f'"{title}"\n{text}'


def from_contents(contents: str) -> tuple[str, str]:
    """Inverse of :func:`to_contents`: (title without its quotes, text)."""
    title, _, text = contents.partition("\n")
    return title.strip().strip('"'), text.strip()


class BM25Retriever:
    """Okapi BM25 over ``passages`` = [(title, text), ...]; the title is indexed with the text.

    ``search(query, topk)`` returns ``[(title, text, score), ...]`` best first;
    ``search_ids`` returns ``[(passage_index, score), ...]``.  Only passages sharing at
    least one query term are returned; ties are broken by passage index (deterministic).
    """

    def __init__(self, passages: Sequence[tuple[str, str]], k1: float = 0.9, b: float = 0.4):
        if not passages:
            raise ValueError("BM25Retriever needs at least one passage; got an empty corpus")
        self.passages = [(str(t), str(x)) for t, x in passages]
        self.k1, self.b = k1, b
        self.postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._build()

    def _build(self) -> None:
        counts = [Counter(tokenize(f"{t} {x}")) for t, x in self.passages]
        lengths = np.array([sum(c.values()) for c in counts], dtype=np.float64)
        norm = self.k1 * (1 - self.b + self.b * lengths / max(lengths.mean(), 1.0))  # [N]
        by_term: dict[str, tuple[list[int], list[int]]] = {}
        for doc, counter in enumerate(counts):
            for term, tf in counter.items():
                ids, tfs = by_term.setdefault(term, ([], []))
                ids.append(doc)
                tfs.append(tf)
        n = len(self.passages)
        for term, (ids, tfs) in by_term.items():
            ids_a, tf_a = np.asarray(ids, dtype=np.int64), np.asarray(tfs, dtype=np.float64)
            idf = np.log(1.0 + (n - len(ids) + 0.5) / (len(ids) + 0.5))
            weight = idf * tf_a * (self.k1 + 1) / (tf_a + norm[ids_a])  # [df(term)]
            self.postings[term] = (ids_a, weight.astype(np.float32))

    def __len__(self) -> int:
        return len(self.passages)

    def search_ids(self, query: str, topk: int = 3) -> list[tuple[int, float]]:
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        hits = [self.postings[t] for t in tokenize(query) if t in self.postings]
        if not hits:
            return []
        scores = np.zeros(len(self.passages), dtype=np.float32)  # [N]
        for ids, weight in hits:
            scores[ids] += weight
        candidates = np.flatnonzero(scores)  # [C] passages sharing a query term
        cand_scores = scores[candidates]
        if len(candidates) > topk:
            keep = np.argpartition(-cand_scores, topk - 1)[:topk]
            threshold = cand_scores[keep].min()
            candidates = candidates[cand_scores >= threshold]  # keep ties at the cut
            cand_scores = scores[candidates]
        order = np.lexsort((candidates, -cand_scores))[:topk]
        return [(int(candidates[i]), float(cand_scores[i])) for i in order]

    def search(self, query: str, topk: int = 3) -> list[tuple[str, str, float]]:
        return [(*self.passages[i], s) for i, s in self.search_ids(query, topk)]


# -- Search-R1 retrieval protocol ---------------------------------------------------------
def retrieve_response(retriever: BM25Retriever, request: dict, default_topk: int = 3) -> dict:
    """The JSON body Search-R1's ``/retrieve`` answers for ``request`` (see module doc)."""
    queries = request.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise ValueError(f"'queries' must be a list of strings, got {queries!r}")
    topk = int(request.get("topk") or default_topk)
    with_scores = bool(request.get("return_scores", False))
    result = []
    for query in queries:
        docs = []
        for idx, score in retriever.search_ids(query, topk):
            doc = {"id": str(idx), "contents": to_contents(*retriever.passages[idx])}
            docs.append({"document": doc, "score": score} if with_scores else doc)
        result.append(docs)
    return {"result": result}


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        if self.path.rstrip("/") != "/retrieve":
            return self._reply(404, {"error": f"unknown path {self.path!r}; valid: /retrieve"})
        try:
            length = int(self.headers.get("Content-Length", 0))
            request = json.loads(self.rfile.read(length) or b"{}")
            body = retrieve_response(self.server.retriever, request, self.server.default_topk)
        except (ValueError, TypeError) as exc:
            return self._reply(400, {"error": str(exc)})
        self._reply(200, body)

    def _reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # quiet
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    retriever: BM25Retriever
    default_topk: int


class RetrievalServer:
    """Search-R1's ``/retrieve`` endpoint over ``retriever``, served from a daemon thread.

    ``port=0`` picks a free ephemeral port; ``url`` is the full ``/retrieve`` URL.  Use as
    a context manager (``with RetrievalServer(r) as srv: post(srv.url, ...)``) or call
    :meth:`start` / :meth:`stop`.
    """

    def __init__(self, retriever: BM25Retriever, host: str = "127.0.0.1", port: int = 0,
                 default_topk: int = 3):
        self._httpd = _Server((host, port), _Handler)
        self._httpd.retriever = retriever
        self._httpd.default_topk = default_topk
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/retrieve"

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

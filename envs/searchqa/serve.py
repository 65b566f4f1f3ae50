"""Serve the built-in searchqa corpus over HTTP with BM25 (the Search-R1 retriever's
protocol, :mod:`envs.retrieval`): ``python -m envs.searchqa.serve --port N``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from envs.retrieval import BM25Retriever, RetrievalServer
from envs.searchqa.kb import corpus


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m envs.searchqa.serve --port N``: serve the built-in searchqa corpus."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 = a free ephemeral port")
    parser.add_argument("--topk", type=int, default=3, help="default topk when a request omits it")
    parser.add_argument("--passages", type=int, default=0,
                        help="corpus size (0 = the default training corpus; 20000 = benchmark)")
    args = parser.parse_args(argv)

    retriever = BM25Retriever(corpus(args.passages).documents())
    server = RetrievalServer(retriever, args.host, args.port, args.topk)
    print(f"serving {len(retriever)} passages at {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()

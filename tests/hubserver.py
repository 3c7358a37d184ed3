"""A Hugging Face Hub stand-in on 127.0.0.1, for tests that use the real ``huggingface_hub`` client.

It serves the endpoints memacct's Hub reader uses, as the Hub answers them:

* ``GET /api/models/{org}/{name}/revision/{rev}``: the model info (``sha``, ``siblings``
  with sizes);
* ``HEAD``/``GET /{org}/{name}/resolve/{rev}/{file}``: the file, with ``X-Repo-Commit``,
  ``ETag``, ``X-Linked-Size`` and ``Content-Length``; ``Range: bytes=a-b`` answered with
  ``206 Partial Content``;
* errors as the Hub sends them: ``401`` + ``X-Error-Code: RepoNotFound`` for a missing or
  private repository without a token, ``401``/``403`` + ``GatedRepo`` for a gated one's
  files (its model info stays public), ``404`` + ``RevisionNotFound`` / ``EntryNotFound``.

Every request is recorded (method, path, Range) so a test can count them (but
huggingface_hub's own ``/api/agent-harnesses`` look-up). It binds to
127.0.0.1 only and never forwards anything.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeHub", "Repo"]

_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


@dataclass
class Repo:
    """One repository: its files (name -> bytes) at one commit."""

    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    gated: bool = False
    private: bool = False
    branches: tuple[str, ...] = ("main",)
    ignore_range: bool = False  # answer a range request with the whole file, as some mirrors do


@dataclass
class FakeHub:
    """The server's state: the repositories and the requests it has answered."""

    repos: dict[str, Repo] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    token: str = "hf_test_token"
    url: str = ""

    def count(self, method: str | None = None) -> int:
        return sum(1 for m, _, _ in self.requests if method is None or m == method)


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
                  head: bool = False) -> None:  # fmt: skip
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _error(self, status: int, code: str, head: bool) -> None:
            body = json.dumps({"error": code}).encode()
            self._send(status, body, {"X-Error-Code": code, "Content-Type": "application/json"},
                       head)  # fmt: skip

        def _repo(self, repo_id: str, revision: str, head: bool,
                  files: bool = True) -> Repo | None:  # fmt: skip
            """The repository at ``revision``, or ``None`` after answering the Hub's error.

            As on the Hub, a gated repository's model info is public; its files are not.
            """
            repo = hub.repos.get(repo_id)
            authorized = self.headers.get("Authorization") == f"Bearer {hub.token}"
            if repo is None or (repo.private and not authorized):
                self._error(401, "RepoNotFound", head)
                return None
            if repo.gated and not authorized and files:
                self._error(403 if self.headers.get("Authorization") else 401, "GatedRepo", head)
                return None
            if revision not in (*repo.branches, repo.commit):
                self._error(404, "RevisionNotFound", head)
                return None
            return repo

        def _handle(self, head: bool) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/api/agent-harnesses":
                # huggingface_hub's own once-a-day look-up of its agent list
                # (utils/_detect_agent.py), not a request of memacct's: answered, not counted.
                self._send(200, b'{"harnesses": []}', {"Content-Type": "application/json"}, head)
                return
            hub.requests.append((self.command, path, self.headers.get("Range")))
            parts = path.strip("/").split("/")
            if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
                self._model_info(f"{parts[2]}/{parts[3]}", parts[5], head)
            elif len(parts) >= 5 and parts[2] == "resolve":
                self._resolve(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]), head)
            else:
                self._error(404, "NotFound", head)

        def _model_info(self, repo_id: str, revision: str, head: bool) -> None:
            repo = self._repo(repo_id, revision, head, files=False)
            if repo is None:
                return
            info = {
                "id": repo_id,
                "sha": repo.commit,
                "private": repo.private,
                "gated": "manual" if repo.gated else False,
                "siblings": [
                    {"rfilename": name, "size": len(data)} for name, data in repo.files.items()
                ],
            }
            self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"}, head)

        def _resolve(self, repo_id: str, revision: str, filename: str, head: bool) -> None:
            repo = self._repo(repo_id, revision, head)
            if repo is None:
                return
            data = repo.files.get(filename)
            if data is None:
                self._error(404, "EntryNotFound", head)
                return
            etag = hashlib.sha256(data).hexdigest()
            headers = {
                "X-Repo-Commit": repo.commit,
                "ETag": f'"{etag}"',
                "X-Linked-Size": str(len(data)),
                "Accept-Ranges": "bytes",
            }
            wanted = self.headers.get("Range")
            match = _RANGE.fullmatch(wanted or "")
            if match and not head and not repo.ignore_range:
                start = int(match.group(1))
                end = min(int(match.group(2) or len(data) - 1), len(data) - 1)
                headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                self._send(206, data[start : end + 1], headers)
                return
            self._send(200, data, headers, head)

        def do_GET(self) -> None:
            self._handle(head=False)

        def do_HEAD(self) -> None:
            self._handle(head=True)

    return Handler


def serve(hub: FakeHub) -> Iterator[FakeHub]:
    """Run ``hub`` on 127.0.0.1 (a free port) for the duration of the generator."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)

"""A local stand-in for the Hugging Face Hub's file routes, for tests (never the internet).

    with FakeHub({("model", "org/tiny", "config.json"): b"{...}"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)   # or endpoint=hub.endpoint
        hub.fail("model", "org/tiny", "config.json", status=500)
        ...
        assert hub.requests[-1].path == "/org/tiny/resolve/main/config.json"

Serves, on 127.0.0.1 at a free port, for repo types "model", "dataset" and "space":
- `HEAD`/`GET /{prefix}{repo_id}/resolve/{revision}/{filename}` (prefix "" for models,
  "datasets/", "spaces/"): the file, with the headers huggingface_hub's downloader needs
  (`ETag` = sha256 of the content, `X-Repo-Commit`, `Content-Length`, `Accept-Ranges`);
  `Range: bytes=a-b | a- | -n` gives 206 with `Content-Range`, 416 when unsatisfiable.
  Any revision is accepted: "main", or the repo's commit (`hub.commit(repo_type, repo_id)`).
- `GET /api/{models|datasets|spaces}/{repo_id}[/revision/{rev}]`: repo info with `sha` and
  `siblings`; `GET /api/{...}/{repo_id}/tree/{rev}[/{folder}]`: the file list (recursive).
- Misses answer like the Hub: an unknown repo 404 with `X-Error-Code: RepoNotFound`, an
  unknown file 404 with `X-Error-Code: EntryNotFound` (and the commit header).

Failures, per file (`fail`), consumed in order; `times=None` keeps one forever:
- `status=500` (or 401, 403, 404, 429...): answer that status (HEAD and GET);
- `truncate_to=N`: a GET announces the full length but sends N bytes, then drops the
  connection (a truncated download);
- `ignore_range=True`: GET answers 200 with the whole file even when a Range was asked;
- `corrupt=True`: GET sends the content with its first byte flipped (ETag unchanged: a
  checksum mismatch);
- `methods=("GET",)`: fail only those methods (default: HEAD and GET).
Hostile servers (issue 47): `retry_after="3600"` with a status (a 429/503 asking to wait);
`delay_s=S` (no answer for S seconds: a HEAD that never answers); `drop=True` (the
connection closed without an answer); `stall_s=S` (GET: the headers and `truncate_to` bytes,
then nothing for S seconds); `trickle_s=S` (GET: a byte every S seconds);
`redirect_loop=True` (302 to itself, forever); `declared_length=N` (announce N bytes).
`hub.tree_loop = True`: the file list's next page is itself; `hub.agent_registry = b"..."`:
what huggingface_hub's agent registry route answers; `hub.post_delay_s = S`: every POST
answers after S seconds.
Uploads (what huggingface_hub 2.4.0's `HfApi.create_repo` and `upload_folder` call), each
refused with 401 without an `Authorization` header:
- `POST /api/repos/create` ({"name", "organization", "type", "visibility"}): creates an empty
  repo (`hub.created[(type, id)]` = its visibility), 409 when it exists;
- `POST /api/validate-yaml` (a README.md's metadata): 400 when the `---` block is not closed;
- `POST /api/{models|datasets|spaces}/{repo_id}/preupload/{rev}`: every file "regular";
- `POST /api/{...}/{repo_id}/commit/{rev}` (NDJSON: a header, then base64 "file" lines): adds
  the files to the repo (404 RepoNotFound for a repo neither created nor holding files).
`refused_endpoint()` is a URL where nothing listens (connection refused).
The root `/` answers 200 and is not logged (COPE asks it whether the Hub is there).
`hub.requests` logs every request (method, path, range, status, bytes sent, authorization).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Mapping
from urllib.parse import unquote, urlsplit

REPO_TYPES = ("model", "dataset", "space")
_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}
_RESOLVE_RE = re.compile(r"^/(?:(?P<type>datasets|spaces)/)?(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_API_RE = re.compile(
    r"^/api/(?P<type>models|datasets|spaces)/(?P<repo>[^/]+/[^/]+)"
    r"(?:/revision/(?P<rev>[^/]+)|/tree/(?P<tree_rev>[^/]+)(?:/(?P<folder>.*))?)?$")
_UPLOAD_RE = re.compile(r"^/api/(?P<type>models|datasets|spaces)/(?P<repo>[^/]+/[^/]+)/(?P<op>preupload|commit)/"
                        r"(?P<rev>[^/]+)$")
_TYPE_OF = {None: "model", "datasets": "dataset", "spaces": "space",
            "models": "model"}


@dataclass
class Failure:
    status: int | None = None
    truncate_to: int | None = None
    ignore_range: bool = False
    corrupt: bool = False
    methods: tuple[str, ...] = ("HEAD", "GET")
    times: int | None = 1  # None: forever
    # hostile servers (issue 47)
    retry_after: str | None = None  # with `status`: a Retry-After header
    delay_s: float = 0.0  # wait this long before answering at all (a HEAD that never answers)
    drop: bool = False  # close the connection without an answer
    stall_s: float = 0.0  # GET: send the headers and `truncate_to` bytes (or none), then wait this long
    trickle_s: float = 0.0  # GET: send the body a byte at a time, this long between bytes
    redirect_loop: bool = False  # answer 302 to the same path, forever
    declared_length: int | None = None  # GET/HEAD: announce this Content-Length (the body is the real one)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    range: str | None
    status: int
    bytes_sent: int
    authorization: str | None = None


def refused_endpoint() -> str:
    """An http://127.0.0.1:PORT where nothing listens (the port was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class FakeHub:
    def __init__(self, files: Mapping[tuple[str, str, str], bytes] | None = None):
        self.files: dict[tuple[str, str, str], bytes] = {}
        self.failures: dict[tuple[str, str, str], list[Failure]] = {}
        self.requests: list[Request] = []
        self.created: dict[tuple[str, str], str] = {}  # (repo type, repo id) -> visibility
        self.tree_loop = False  # the file list's next page is itself (a list that never ends)
        self.agent_registry: bytes | None = None  # what /api/agent-harnesses answers (None: 404)
        self.post_delay_s = 0.0  # every POST (an upload) waits this long before its answer
        self._lock = threading.Lock()
        for key, data in (files or {}).items():
            self.add(*key, data)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- content -------------------------------------------------------------------
    def add(self, repo_type: str, repo_id: str, filename: str, data: bytes) -> None:
        if repo_type not in REPO_TYPES:
            raise ValueError(f"repo_type must be one of {REPO_TYPES}, got {repo_type!r}")
        self.files[(repo_type, repo_id, filename)] = bytes(data)

    def fail(self, repo_type: str, repo_id: str, filename: str, **failure) -> None:
        """Queue a failure for one file (see the module doc for the keywords)."""
        self.failures.setdefault((repo_type, repo_id, filename), []).append(Failure(**failure))

    @staticmethod
    def commit(repo_type: str, repo_id: str) -> str:
        return hashlib.sha1(f"{repo_type}/{repo_id}".encode()).hexdigest()

    def url(self, repo_type: str, repo_id: str, filename: str, revision: str = "main") -> str:
        return f"{self.endpoint}/{_PREFIX[repo_type]}{repo_id}/resolve/{revision}/{filename}"

    def bytes_sent(self, filename: str | None = None) -> int:
        """Body bytes served by GET (for one file name when given)."""
        return sum(r.bytes_sent for r in self.requests
                   if r.method == "GET" and (filename is None or r.path.endswith("/" + filename)))

    # --- life ------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeHub is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeHub":
        hub = self

        class Handler(_Handler):
            fake_hub = hub

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeHub":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- used by the handler -----------------------------------------------------------
    def _take_failure(self, key: tuple[str, str, str], method: str) -> Failure | None:
        with self._lock:
            queue = self.failures.get(key) or []
            for i, f in enumerate(queue):
                if method in f.methods:
                    if f.times is not None:
                        f.times -= 1
                        if f.times <= 0:
                            queue.pop(i)
                    return f
        return None

    def _log(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        """A client that hangs up on a hostile answer is expected: no traceback on stderr."""


class _Handler(BaseHTTPRequestHandler):
    fake_hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args) -> None:  # noqa: A002 - quiet
        pass

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        path = unquote(urlsplit(self.path).path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.fake_hub.post_delay_s:
            time.sleep(self.fake_hub.post_delay_s)
        if not self.headers.get("Authorization"):
            return self._reply("POST", path, 401, b'{"error": "Invalid credentials"}',
                               {"Content-Type": "application/json"})
        if path == "/api/repos/create":
            return self._create(path, json.loads(body))
        if path == "/api/validate-yaml":  # a README.md's metadata block: only its fences are checked here
            text = json.loads(body).get("content", "")
            fenced = not text.startswith("---") or "\n---\n" in text[3:]
            doc = {"errors": [] if fenced else [{"message": "metadata block not closed"}], "warnings": []}
            return self._reply("POST", path, 200 if fenced else 400, json.dumps(doc).encode(),
                               {"Content-Type": "application/json"})
        m = _UPLOAD_RE.match(path)
        if m is None:
            return self._reply("POST", path, 404, b"not found", {})
        repo_type, repo_id = _TYPE_OF[m["type"]], m["repo"]
        if (repo_type, repo_id) not in self.fake_hub.created and not self._repo_files(repo_type, repo_id):
            return self._reply("POST", path, 404, b'{"error": "Repository not found"}',
                               {"X-Error-Code": "RepoNotFound", "Content-Type": "application/json"})
        if m["op"] == "preupload":
            files = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
                     for f in json.loads(body)["files"]]
            return self._json("POST", path, {"files": files})
        for line in body.splitlines():
            item = json.loads(line)
            if item.get("key") == "file":
                value = item["value"]
                self.fake_hub.add(repo_type, repo_id, value["path"], base64.b64decode(value["content"]))
        commit = self.fake_hub.commit(repo_type, repo_id)
        url = f"{self.fake_hub.endpoint}/{_PREFIX[repo_type]}{repo_id}/commit/{commit}"
        return self._json("POST", path, {"commitUrl": url, "commitOid": commit})

    def _create(self, path: str, doc: dict) -> None:
        repo_type = doc.get("type") or "model"
        repo_id = f"{doc['organization']}/{doc['name']}" if doc.get("organization") else doc["name"]
        key = (repo_type, repo_id)
        if key in self.fake_hub.created or self._repo_files(repo_type, repo_id):
            return self._reply("POST", path, 409, b'{"error": "You already created this repo"}',
                               {"Content-Type": "application/json"})
        self.fake_hub.created[key] = doc.get("visibility") or ("private" if doc.get("private") else "public")
        return self._json("POST", path, {"url": f"{self.fake_hub.endpoint}/{_PREFIX[repo_type]}{repo_id}",
                                         "name": repo_id})

    def _json(self, method: str, path: str, doc) -> None:
        self._reply(method, path, 200, json.dumps(doc).encode(), {"Content-Type": "application/json"})

    # ---------------------------------------------------------------------------------
    def _serve(self, method: str) -> None:
        path = unquote(urlsplit(self.path).path)
        if path == "/api/agent-harnesses" and self.fake_hub.agent_registry is not None:
            return self._reply(method, path, 200, self.fake_hub.agent_registry, {"Content-Type": "application/json"})
        if path == "/":  # the endpoint's root: COPE's is-the-Hub-there check, not logged
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        m = _RESOLVE_RE.match(path)
        if m:
            return self._resolve(method, path, _TYPE_OF[m["type"]], m["repo"], m["rev"], m["file"])
        m = _API_RE.match(path)
        if m:
            return self._api(method, path, _TYPE_OF[m["type"]], m["repo"], m["tree_rev"], m["folder"])
        self._reply(method, path, 404, b"not found", {})

    def _repo_files(self, repo_type: str, repo_id: str) -> dict[str, bytes]:
        return {f: d for (t, r, f), d in self.fake_hub.files.items() if t == repo_type and r == repo_id}

    def _resolve(self, method, path, repo_type, repo_id, revision, filename) -> None:
        hub = self.fake_hub
        files = self._repo_files(repo_type, repo_id)
        commit = hub.commit(repo_type, repo_id)
        key = (repo_type, repo_id, filename)
        failure = hub._take_failure(key, method)
        if failure is not None and self._hostile(method, path, failure, commit):
            return
        if failure is not None and failure.status is not None:
            extra = {"Retry-After": failure.retry_after} if failure.retry_after is not None else {}
            return self._reply(method, path, failure.status, b"injected failure",
                               {"X-Repo-Commit": commit, **extra})
        if not files:
            return self._reply(method, path, 404, b"Repository not found",
                               {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"})
        if revision not in ("main", commit):
            return self._reply(method, path, 404, b"Revision not found",
                               {"X-Error-Code": "RevisionNotFound", "X-Error-Message": "Invalid rev id"})
        if filename not in files:
            return self._reply(method, path, 404, b"Entry not found",
                               {"X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found",
                                "X-Repo-Commit": commit})
        data = files[filename]
        headers = {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                   "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        status, body = 200, data
        asked = self.headers.get("Range")
        if asked and not (failure and failure.ignore_range):
            span = _parse_range(asked, len(data))
            if span is None:
                headers["Content-Range"] = f"bytes */{len(data)}"
                return self._reply(method, path, 416, b"", headers)
            start, end = span
            status, body = 206, data[start:end + 1]
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        if method == "GET" and failure and failure.corrupt and body:
            body = bytes([body[0] ^ 0xFF]) + body[1:]
        send = body
        if method == "GET" and failure and failure.truncate_to is not None:
            send = body[:failure.truncate_to]
        if failure and (failure.stall_s or failure.trickle_s or failure.declared_length is not None):
            return self._slow_body(method, path, status, body, headers, failure)
        self._reply(method, path, status, body, headers, send=send)

    def _hostile(self, method: str, path: str, failure: Failure, commit: str) -> bool:
        """A failure that is no HTTP answer at all, or a redirect loop: served here (True)."""
        if failure.delay_s:
            self.fake_hub._log(Request(method, path, self.headers.get("Range"), 0, 0))
            time.sleep(failure.delay_s)
        if failure.drop:
            self.fake_hub._log(Request(method, path, self.headers.get("Range"), 0, 0))
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return True
        if failure.redirect_loop:
            self._reply(method, path, 302, b"", {"Location": path, "X-Repo-Commit": commit})
            return True
        if failure.delay_s > 0 and failure.status is None and not (failure.stall_s or failure.trickle_s):
            self.close_connection = True  # waited, then gone without an answer
            return True
        return False

    def _slow_body(self, method, path, status, body: bytes, headers: dict[str, str], failure: Failure) -> None:
        """The headers now (Content-Length as declared), then the body slowly, or part and a stall."""
        length = failure.declared_length if failure.declared_length is not None else len(body)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(length))
        self.send_header("Connection", "close")
        self.end_headers()
        self.fake_hub._log(Request(method, path, self.headers.get("Range"), status, 0))
        self.close_connection = True
        if method != "GET":
            return
        try:
            if failure.stall_s:
                self.wfile.write(body[:failure.truncate_to or 0])
                self.wfile.flush()
                time.sleep(failure.stall_s)
            elif failure.trickle_s:
                for i in range(len(body)):
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                    time.sleep(failure.trickle_s)
            else:
                self.wfile.write(body)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _api(self, method, path, repo_type, repo_id, tree_rev, folder) -> None:
        files = self._repo_files(repo_type, repo_id)
        if not files:
            return self._reply(method, path, 404, b'{"error": "Repository not found"}',
                               {"X-Error-Code": "RepoNotFound", "Content-Type": "application/json"})
        commit = self.fake_hub.commit(repo_type, repo_id)
        if tree_rev is not None:
            prefix = (folder.rstrip("/") + "/") if folder else ""
            doc = [{"type": "file", "path": f, "size": len(d), "oid": hashlib.sha1(d).hexdigest()}
                   for f, d in sorted(files.items()) if f.startswith(prefix)]
            if self.fake_hub.tree_loop:  # a file list whose next page is itself, forever
                return self._reply(method, path, 200, json.dumps(doc).encode(),
                                   {"Content-Type": "application/json", "X-Repo-Commit": commit,
                                    "Link": f'<{self.fake_hub.endpoint}{self.path}>; rel="next"'})
        else:
            doc = {"id": repo_id, "sha": commit, "private": False,
                   "siblings": [{"rfilename": f, "size": len(d)} for f, d in sorted(files.items())]}
        self._reply(method, path, 200, json.dumps(doc).encode(),
                    {"Content-Type": "application/json", "X-Repo-Commit": commit})

    def _reply(self, method, path, status, body: bytes, headers: dict[str, str], *, send: bytes | None = None) -> None:
        send = body if send is None else send
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        truncated = method == "GET" and len(send) < len(body)
        if truncated:
            self.send_header("Connection", "close")
        self.end_headers()
        # Log before the body goes out: a client that has read its reply must find its
        # request in the log (logging afterwards raced with the test's assertions).
        self.fake_hub._log(Request(method, path, self.headers.get("Range"), status,
                                   len(send) if method in ("GET", "POST") else 0, self.headers.get("Authorization")))
        if method in ("GET", "POST"):
            try:
                self.wfile.write(send)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
        if truncated:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _parse_range(value: str, size: int) -> tuple[int, int] | None:
    """(first, last) byte of a single `bytes=` range, or None when unsatisfiable."""
    m = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", value)
    if not m or (m[1] == "" and m[2] == ""):
        return None
    if m[1] == "":
        n = int(m[2])
        if n == 0:
            return None
        return max(size - n, 0), size - 1
    start = int(m[1])
    end = int(m[2]) if m[2] else size - 1
    if start >= size or end < start:
        return None
    return start, min(end, size - 1)

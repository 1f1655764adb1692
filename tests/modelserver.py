"""A scripted OpenAI-compatible chat server on loopback, for tests of the model paths.

It is a real HTTP server on 127.0.0.1 that the real ``openai`` client talks to:

    with ScriptedModel([answer_fn, "literal answer", 500, answer_fn]) as model:
        cfg = ModelConfig(model.url, "scripted", "sk-test")
        ...
    model.requests  # every request: {"path", "auth", "body"} (body: the parsed JSON)

Each chat completion takes the next script entry (under a lock, so concurrent requests
each get their own entry):

- a callable ``messages -> str``: answered with that content (HTTP 200);
- a str: answered with that content;
- an int: answered with that HTTP status and an OpenAI-style error body (the SDK retries
  408/409/429/5xx; the response carries ``retry-after-ms`` so the retry is quick);
- ``HANG``: the request is read and never answered (until the server shuts down);
- ``Raw(bytes)``: those bytes as a 200 response's body (not JSON: a broken endpoint).

An exhausted script (or any other path) answers 404.
"""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RETRY_AFTER_MS = 20
HANG = object()


class Raw(bytes):
    """A script entry answered with these bytes as the body, whatever they are."""


class ScriptedModel:
    """Answers chat completions from a script (see the module docstring)."""

    def __init__(self, script):
        self.script = list(script)
        self.requests = []
        self.lock = threading.Lock()
        self.closing = threading.Event()  # releases the requests that HANG
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d/v1" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def next_entry(self, body, path, auth):
        """Record the request and pop its script entry (None: nothing left or a wrong path)."""
        with self.lock:
            self.requests.append({"path": path, "auth": auth, "body": body})
            if path.rstrip("/") != "/v1/chat/completions" or not self.script:
                return None, len(self.requests)
            return self.script.pop(0), len(self.requests)

    @property
    def remaining(self):
        with self.lock:
            return len(self.script)

    def _handler(self):
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status, payload, headers=()):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status, message):
                self._send(
                    status,
                    {"error": {"message": message, "type": "scripted_error", "code": status}},
                    headers=[("retry-after-ms", str(RETRY_AFTER_MS))],
                )

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                entry, n = model.next_entry(body, self.path, self.headers.get("Authorization"))
                if entry is None:
                    self._error(404, "scripted model: no answer left for %s" % self.path)
                    return
                if isinstance(entry, int):
                    self._error(entry, "scripted failure %d" % entry)
                    return
                if entry is HANG:
                    model.closing.wait()
                    return
                if isinstance(entry, Raw):
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(entry)))
                    self.end_headers()
                    self.wfile.write(entry)
                    return
                content = entry if isinstance(entry, str) else entry(body["messages"])
                self._send(
                    200,
                    {
                        "id": "chatcmpl-%d" % n,
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    },
                )

        return Handler

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()


def closed_port_url():
    """A loopback base URL where nothing listens (a port bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "http://127.0.0.1:%d/v1" % port

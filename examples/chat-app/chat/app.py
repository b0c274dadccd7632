"""A chat-completions wrapper, hosted on Tributary: POST /v1/chat/completions with the same body
as the platform's, answered by calling the platform with the key from the app's secrets and
streaming the answer back as it comes (SSE when the body says stream: true).

Plain ASGI and the standard library only: the app has no network of its own, it reaches the
platform through the Unix socket the app host provides ($TRIBUTARY_PLATFORM_SOCKET).
"""

import asyncio
import http.client
import json
import os
import socket
import threading
from urllib.parse import urlsplit

MAX_BODY_BYTES = 1024 * 1024
READ_BYTES = 16 * 1024
BASE_PATH = urlsplit(os.environ.get("TRIBUTARY_BASE_URL", "http://platform/v1")).path.rstrip("/")


class PlatformConnection(http.client.HTTPConnection):
    """HTTP/1.1 to the platform over the app host's Unix socket."""

    def __init__(self, timeout=300):
        super().__init__("platform", timeout=timeout)

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(os.environ["TRIBUTARY_PLATFORM_SOCKET"])
        self.sock = sock


async def send_json(send, status, body):
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


async def read_body(receive):
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def call_platform(body, loop, queue):
    """Runs in a thread: the platform's answer, head then chunks, into the queue (bounded: a slow
    client holds this thread, not memory)."""

    def put(item):
        asyncio.run_coroutine_threadsafe(queue.put(item), loop).result()

    try:
        conn = PlatformConnection()
        conn.request(
            "POST",
            f"{BASE_PATH}/chat/completions",
            body=body,
            headers={"Authorization": f"Bearer {os.environ['PLATFORM_API_KEY']}", "Content-Type": "application/json"},
        )
        response = conn.getresponse()
        put(("head", response.status, response.getheader("content-type", "application/json")))
        while True:
            chunk = response.read1(READ_BYTES)
            if not chunk:
                break
            put(("body", chunk))
        conn.close()
        put(("end",))
    except Exception as error:  # the platform could not be reached: the client gets a 502
        put(("error", str(error)))


async def chat_completions(receive, send):
    raw = await read_body(receive)
    if raw is None:
        return await send_json(send, 413, {"error": {"message": "body too large or client gone", "type": "invalid_request_error"}})
    try:
        request = json.loads(raw)
    except ValueError:
        return await send_json(send, 400, {"error": {"message": "the body is not JSON", "type": "invalid_request_error"}})
    if not isinstance(request, dict):
        return await send_json(send, 400, {"error": {"message": "the body must be a JSON object", "type": "invalid_request_error"}})
    request.setdefault("model", os.environ.get("CHAT_DEFAULT_MODEL", ""))

    loop = asyncio.get_running_loop()
    queue = asyncio.Queue(maxsize=8)
    threading.Thread(target=call_platform, args=(json.dumps(request).encode(), loop, queue), daemon=True).start()
    started = False
    while True:
        item = await queue.get()
        if item[0] == "head":
            await send({"type": "http.response.start", "status": item[1], "headers": [(b"content-type", item[2].encode())]})
            started = True
        elif item[0] == "body":
            await send({"type": "http.response.body", "body": item[1], "more_body": True})
        elif item[0] == "end":
            return await send({"type": "http.response.body", "body": b""})
        else:
            if not started:
                return await send_json(send, 502, {"error": {"message": f"the platform could not be reached: {item[1]}", "type": "server_error"}})
            return await send({"type": "http.response.body", "body": b""})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                return await send({"type": "lifespan.shutdown.complete"})
    if scope["type"] != "http":
        return
    path, method = scope["path"], scope["method"]
    if path == "/v1/chat/completions":
        if method != "POST":
            return await send_json(send, 405, {"error": {"message": "use POST", "type": "invalid_request_error"}})
        return await chat_completions(receive, send)
    if path in ("/", "/healthz") and method in ("GET", "HEAD"):
        return await send_json(send, 200, {"status": "ok", "project": os.environ.get("TRIBUTARY_PROJECT_SLUG")})
    if path == "/ping":
        return await send_json(send, 200, {"pong": True})
    return await send_json(send, 404, {"error": {"message": f"no route {path}", "type": "invalid_request_error"}})

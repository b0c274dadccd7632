# The program every app instance runs (Debian's python3 and uvicorn, read-only from the host's /usr):
# uvicorn serving the manifest's entrypoint on the instance's Unix socket, as
#   python3 -m uvicorn ENTRYPOINT --uds SOCKET --app-dir APP_DIR --no-access-log --no-use-colors
# would, with one layer around the app. A request that came through a path address
# (/apps/<organization>/<project>/...) carries its prefix in X-Forwarded-Prefix, which the
# gateway sets there and drops from every client request, and the app gets it as its ASGI
# root_path; the path it is asked for is what followed the prefix (scope path and raw_path, as
# uvicorn 0.17's --root-path gives them). One instance serves both addresses, so the root_path is
# set per request: uvicorn's own --root-path is one value for all, and it reads no prefix header.
# A second layer gives a response that the app sends in one body message a Content-Length
# (WholeResponses): uvicorn would otherwise send it chunked, its head, body and end in three
# writes, and an app host lost between them cuts a response it could have sent whole.
#
# argv: ENTRYPOINT SOCKET APP_DIR

import sys

import uvicorn

PREFIX_HEADER = b"x-forwarded-prefix"


class RootPathFromPrefix:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            for name, value in scope["headers"]:
                if name == PREFIX_HEADER:
                    scope = dict(scope, root_path=scope.get("root_path", "") + value.decode("latin-1"))
                    break
        return await self.app(scope, receive, send)


class WholeResponses:
    """Holds a response's start until its first body message; when that is the whole body (and
    the response has no length or framing of its own), sends it with a Content-Length: uvicorn
    then writes it as head and body, which the app host relays as one message. Anything else
    (a stream, a HEAD, a status without a body) passes as the app sent it."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] == "HEAD":
            return await self.app(scope, receive, send)
        held = None

        async def whole(message):
            nonlocal held
            if message["type"] == "http.response.start":
                framed = any(name.lower() in (b"content-length", b"transfer-encoding") for name, _ in message.get("headers", []))
                bodiless = message["status"] < 200 or message["status"] in (204, 304)
                if framed or bodiless or message.get("trailers"):
                    return await send(message)
                held = message
                return
            if held is not None and message["type"] == "http.response.body":
                start, held = held, None
                if not message.get("more_body", False):
                    length = str(len(message.get("body", b""))).encode()
                    start = dict(start, headers=[*start.get("headers", []), (b"content-length", length)])
                await send(start)
            return await send(message)

        return await self.app(scope, receive, whole)


class Server(uvicorn.Server):
    async def serve(self, sockets=None):
        # The app is imported where uvicorn's own serve() would import it (inside the running
        # event loop), then wrapped; serve() then finds it loaded.
        if not self.config.loaded:
            self.config.load()
            self.config.loaded_app = RootPathFromPrefix(WholeResponses(self.config.loaded_app))
        await super().serve(sockets=sockets)


def main():
    entrypoint, socket_path, app_dir = sys.argv[1:4]
    sys.path.insert(0, app_dir)
    config = uvicorn.Config(entrypoint, uds=socket_path, access_log=False, use_colors=False)
    Server(config).run()


main()

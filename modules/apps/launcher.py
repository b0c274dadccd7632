# The program every app instance runs (Debian's python3 and uvicorn, read-only from the host's /usr):
# uvicorn serving the manifest's entrypoint on the instance's Unix socket, as
#   python3 -m uvicorn ENTRYPOINT --uds SOCKET --app-dir APP_DIR --no-access-log --no-use-colors
# would, with one layer around the app. A request that came through a path address
# (/apps/<organization>/<project>/...) carries its prefix in X-Forwarded-Prefix, which the
# gateway sets there and drops from every client request, and the app gets it as its ASGI
# root_path; the path it is asked for is what followed the prefix (scope path and raw_path, as
# uvicorn 0.17's --root-path gives them). One instance serves both addresses, so the root_path is
# set per request: uvicorn's own --root-path is one value for all, and it reads no prefix header.
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


class Server(uvicorn.Server):
    async def serve(self, sockets=None):
        # The app is imported where uvicorn's own serve() would import it (inside the running
        # event loop), then wrapped; serve() then finds it loaded.
        if not self.config.loaded:
            self.config.load()
            self.config.loaded_app = RootPathFromPrefix(self.config.loaded_app)
        await super().serve(sockets=sockets)


def main():
    entrypoint, socket_path, app_dir = sys.argv[1:4]
    sys.path.insert(0, app_dir)
    config = uvicorn.Config(entrypoint, uds=socket_path, access_log=False, use_colors=False)
    Server(config).run()


main()

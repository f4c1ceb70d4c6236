"""A server in a thread of this process on 127.0.0.1 and a free port: a harness for tests, benchmarks
and scripts (they put tests/ on sys.path)."""
from __future__ import annotations

import threading
import time


class AppThread:
    def __init__(self, app, start_timeout: float = 60.0):
        """app: an ASGI app, served until stop()."""
        import uvicorn

        self.app = app
        config = uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="llamay-test-server", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + start_timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=30)


class ServerThread(AppThread):
    def __init__(self, argv: list[str], start_timeout: float = 60.0, log=None):
        """argv: `llamay serve` arguments (without --host/--port); log: gets each request's log line."""
        from llamay.cli import serve
        from llamay.cli.main import build_parser
        super().__init__(serve.build_app(build_parser().parse_args(["serve", *argv]), log), start_timeout)

    @property
    def registry(self):
        return self.app.state.registry

    def check_pages(self):
        """The state engine's invariants hold on every loaded model, and only named contexts hold pages
        (besides the prefix cache). Raises AssertionError or the state engine's InvariantError.
        -> pages held by contexts (named ones) over every model."""
        held = 0
        for loaded in list(self.registry.loaded.values()):
            def look(store):
                store.check()
                ctxs = store.contexts()
                return ctxs, sum(len(store.pages(c)) for c in ctxs)

            ctxs, pages = loaded.scheduler.call(look).result(timeout=30)
            held += pages
            named = {nc.ctx for nc in self.app.state.contexts.values() if nc.model == loaded.info.name}
            assert set(ctxs) == named, f"engine contexts {sorted(ctxs)}, named {sorted(named)}"
        return held

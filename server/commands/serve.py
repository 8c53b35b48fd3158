"""`datahunt serve`: run the review service (API and review page) on uvicorn.

The app is built by `server.app.create_app`; on start it upgrades the catalog schema and resumes campaigns a
previous server left unfinished (`--no-resume` leaves them to another replica). Without DATAHUNT_API_TOKEN it
makes a token for the run and prints the page's address with it (`#token=…`, a fragment the browser never
sends): the page's buttons work from the first click.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from types import TracebackType
from typing import Any

import typer
from pydantic import SecretStr

from server.commands.failure import EXIT_FAILED, fail, outage_line


def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to listen on (0.0.0.0 to share with a team)."),
    port: int = typer.Option(8000, min=1, max=65535, help="TCP port."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Resume unfinished campaigns at start-up "
                                "(either way, campaigns whose holder stops renewing its lease are taken over)."),
    log_level: str = typer.Option("info", help="uvicorn log level."),
) -> None:
    """Serve the API and the review page."""
    import uvicorn

    from core.settings import get_settings
    from server.app import create_app
    from server.usecases.catalog import open_catalog

    settings = get_settings()
    # Open and migrate the catalog before uvicorn starts: a database that is down or unwritable is one line and
    # exit 1 here (as for `campaign`), where inside the app's start-up it would be a traceback.
    try:
        open_catalog(settings=settings).dispose()
    except Exception as exc:
        fail(_catalog_failure(exc), EXIT_FAILED)
    try:
        sock = bind_socket(host, port)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc} (pick another --port)", EXIT_FAILED)
    made_token = settings.api_token is None
    if made_token:  # without one every button on the page would be refused: this run makes its own
        settings = settings.model_copy(update={"api_token": SecretStr(secrets.token_urlsafe(18))})
    bound = f"[{host}]" if ":" in host else host
    if host in ("0.0.0.0", "::"):
        typer.echo(f"note: answering only to the hosts {settings.allowed_hosts} (DATAHUNT_ALLOWED_HOSTS): add the name"
              " or address your team opens the page with")
    elif bound.lower() not in settings.allowed_host_list:  # the address it listens on always works
        settings = settings.model_copy(update={"allowed_hosts": f"{settings.allowed_hosts},{bound}"})
    page = f"http://{bound}:{port}/"
    if made_token:
        token = settings.api_token.get_secret_value() if settings.api_token else ""
        typer.echo(f"datahunt review page: {page}#token={token}  (API docs: {page}docs)")
        typer.echo(f"note: DATAHUNT_API_TOKEN is not set, so this run made a token: the link above signs the page in "
                   f"(or paste {token} into its API token box; API calls send `Authorization: Bearer {token}`); set "
                   "DATAHUNT_API_TOKEN to choose one that lasts")
    else:
        typer.echo(f"datahunt review page: {page}  (API docs: {page}docs; buttons ask for DATAHUNT_API_TOKEN)")
    typer.echo("next: approve what should train the draft, then `Export manifest` on the page (or `datahunt catalog "
               "approve ID`, `datahunt manifest export`); Ctrl-C stops the server")
    config = uvicorn.Config(create_app(settings, resume_unfinished=resume, sweep_abandoned=True), log_level=log_level)
    with sock:
        uvicorn.Server(config).run(sockets=[sock])


def _catalog_failure(exc: Exception) -> str:
    """The one line for a catalog that cannot be opened (its error, or the database's outage); re-raise a bug."""
    from curation.catalog import store

    if isinstance(exc, store.CatalogError):
        return str(exc)
    if store.is_outage(exc):
        return outage_line(exc)
    raise exc


def bind_socket(host: str, port: int) -> socket.socket:
    """Return a TCP socket bound to (host, port), so a busy port fails before anything says the service is up."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: restarts reuse TIME_WAIT ports
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class BackgroundServer:
    """uvicorn serving `app` from a thread on 127.0.0.1 (port 0 picks a free one); a context manager.

    For embedding the service in another program, the browser tests and the load benchmark.
    """

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, start_timeout_s: float = 30.0) -> None:
        import uvicorn

        self._server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, name="datahunt-server", daemon=True)
        self._timeout = start_timeout_s
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        """Base URL of the running server, without a trailing slash."""
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + self._timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the datahunt server did not start (see the log above)")
            time.sleep(0.02)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=self._timeout)


def register(app: typer.Typer) -> None:
    """Attach `serve` to the main app."""
    app.command("serve")(serve)

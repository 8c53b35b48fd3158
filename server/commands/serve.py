"""`datahunt serve`: run the review service (API and review page) on uvicorn.

The app is built by `server.app.create_app`; on start it upgrades the catalog schema and resumes campaigns a
previous server left unfinished (`--no-resume` leaves them to another replica).
"""

from __future__ import annotations

import typer


def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to listen on (0.0.0.0 to share with a team)."),
    port: int = typer.Option(8000, min=1, max=65535, help="TCP port."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Resume unfinished campaigns at start-up."),
    log_level: str = typer.Option("info", help="uvicorn log level."),
) -> None:
    """Serve the API and the review page."""
    import uvicorn

    from core.settings import get_settings
    from server.app import create_app

    settings = get_settings()
    if settings.api_token is None:
        print("note: DATAHUNT_API_TOKEN is not set, so approvals, exports and campaign launches are refused")
    print(f"datahunt review page: http://{host}:{port}/  (API docs: http://{host}:{port}/docs)")
    uvicorn.run(create_app(settings, resume_unfinished=resume), host=host, port=port, log_level=log_level)


def register(app: typer.Typer) -> None:
    """Attach `serve` to the main app."""
    app.command("serve")(serve)

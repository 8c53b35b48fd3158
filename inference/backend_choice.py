"""Which backend a run answers with: the `--api` choice turned into a backend, checked before any row is sent.

`regen` and `write-prompts` both pick one of three: `openai` (an OpenAI-compatible server renders the chat
template), `sglang` (SGLang's native `/generate`, the prompt rendered here with the target's tokenizer), or
`local` (the model in this process; no servers). `http_backend` and `local_backend` build them and raise
`BackendChoiceError` with a message a person can act on (`usage` marks a wrong combination of options, as
against a model that does not load). `check_servers` asks the servers which model they serve before a run.
The module imports no HTTP client or model library until a backend is built, so a command line naming `Api`
starts fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from inference.errors import InferenceError

if TYPE_CHECKING:
    from core.server_info import ServerInfo
    from inference.backend import HttpBackend, RawBackend
    from inference.generation import Reasoning


class Api(StrEnum):
    """How a run reaches the target: an OpenAI-compatible server, SGLang's native API, or in process."""

    OPENAI = "openai"
    SGLANG = "sglang"
    LOCAL = "local"


class BackendChoiceError(InferenceError, ValueError):
    """The backend asked for cannot be built; `usage` is True when the options themselves do not fit together."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


def http_backend(api: Api, *, model: str | None, tokenizer: str | None = None, chat_template: str | None = None,
                 reasoning: Reasoning | None = None, send_text: bool = False) -> HttpBackend:
    """Return the backend for a server API: OpenAI chat, or SGLang native with a renderer loaded from
    `tokenizer` (a path or Hub id; `chat_template` overrides the tokenizer's); `reasoning` defaults to keep."""
    from inference.chat_template import ChatRenderer, TemplateError
    from inference.generation import Reasoning
    from inference.openai_api import OpenAIChatBackend
    from inference.sglang_api import SGLangNativeBackend

    reasoning = reasoning or Reasoning.KEEP
    if api is Api.OPENAI:
        return OpenAIChatBackend(model=model, reasoning=reasoning)
    if api is not Api.SGLANG:
        raise BackendChoiceError(f"--api {api.value} is not a server API", usage=True)
    if not tokenizer:
        raise BackendChoiceError("--api sglang renders prompts itself: pass --tokenizer PATH (or a manifest with "
                                 "a target)")
    try:
        renderer = ChatRenderer.load(tokenizer, chat_template=chat_template)
    except TemplateError as exc:
        raise BackendChoiceError(str(exc)) from None
    return SGLangNativeBackend(renderer, model=model, reasoning=reasoning, send_text=send_text)


def local_backend(folder: str | Path | None, *, servers: list[str], chat_template: str | None, batch: int,
                  max_tokens: int | None = None) -> RawBackend:
    """Return the in-process backend over the model folder `folder`, batching up to `batch` turns; with
    `max_tokens`, refuse a KV cache the device cannot hold (`check_fits`)."""
    from inference.local_backend import LocalTransformersBackend

    if servers:
        raise BackendChoiceError("--api local runs the model in this process: leave out --server", usage=True)
    if not folder or not Path(folder).is_dir():
        raise BackendChoiceError(f"--api local needs --model DIR, a local model folder (got {folder!r})", usage=True)
    try:
        backend = LocalTransformersBackend.load(Path(folder), chat_template=chat_template, max_batch=batch)
    except (OSError, ValueError) as exc:
        raise BackendChoiceError(f"cannot load {folder}: {exc}") from None
    if max_tokens is not None:
        try:
            backend.check_fits(max_tokens)
        except ValueError as exc:
            raise BackendChoiceError(str(exc), usage=True) from None
    return backend


@dataclass(frozen=True)
class ServerCheck:
    """What the servers said before a run: models that are not the target, the model served, SGLang's info."""

    mismatches: list[str]
    served: str | None
    info: ServerInfo | None


async def check_servers(urls: list[str], expected: str | None) -> ServerCheck:
    """Return the model mismatches against `expected`, the first server's advertised model and its info."""
    import httpx

    from inference.server_info import (
        ServerInfoError,
        fetch_model_name,
        fetch_server_info,
        find_model_mismatches,
    )

    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as client:
        try:
            info: ServerInfo | None = await fetch_server_info(client, urls[0])
        except ServerInfoError:
            info = None  # not SGLang (llama.cpp, vLLM) or unreachable: the model list may still name the model
        served = info.model_path if info is not None else await fetch_model_name(client, urls[0])
        mismatches = await find_model_mismatches(client, urls, expected) if expected else []
    return ServerCheck(mismatches, served, info)

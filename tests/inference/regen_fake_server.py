"""A small real HTTP server on 127.0.0.1 that speaks SGLang's native and OpenAI shapes and injects faults.

It answers with the recorded responses under tests/data/recorded (the text made from the prompt so turns can
be told apart) and, per request, can inject a fault: `429`, `500`, `400`, `garbage` (200 with non-JSON),
`drop` (connection closed without an answer), `timeout` (no answer for a long time). Faults come from a
queue (`script`), from per-fault rates with a seeded RNG, or from a marker in the prompt (`POISON` → 400).
On the OpenAI route, `LOOP` in a question makes the answer repeat itself and `LONG` ends it at the token limit.
Like SGLang it serves `/server_info` and `/model_info` (and, with `legacy_info`, only the deprecated `get_`
aliases), tokenizes `text` with special tokens added while taking `input_ids` as given (with `tokenizer`,
so `prompt_tokens` and the decoded prompt show a doubled BOS), and with `counters_every=N` leaves the
speculative counters off all but every N-th answer (0: off every answer), as SGLang does on answers that
verified nothing. `info` overrides server-info fields (another draft path, deterministic inference). Every
POST body is logged in `bodies`, every path counted in `requests`.
`/v1/completions` answers a raw prompt (token ids decoded with `tokenizer`) in the `text_completion` shape of
`openai/completions.json` (recorded from llama.cpp's `llama-server` with SmolLM2-135M-Instruct, the model path cut
to its file name; a `realserver` test keeps its shape equal to a live answer's); a prompt ending in an open user
turn (`<|user|>` after the last `<|end|>`, what the prompt writer sends) gets a user-style message, on `/generate` too.
`stop()` closes the listener and aborts every open connection, like a server that dies. `write_samples` writes
curated input rows for the tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import random
import re
import threading
from collections import Counter, deque
from pathlib import Path
from typing import Any

RECORDED = Path(__file__).resolve().parent.parent / "data" / "recorded"
STATUS_TEXT = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error"}


def _recorded(name: str) -> dict[str, Any]:
    return json.loads((RECORDED / name).read_text())


class FakeServer:
    """Run with `start()`; `url` is its base URL; `stop()` kills it; a new one may reuse `port`."""

    def __init__(
        self,
        port: int = 0,
        *,
        model: str = "meta-llama/Llama-3.1-8B-Instruct",
        script: list[str] | None = None,
        rates: dict[str, float] | None = None,
        delay_s: float = 0.0,
        seed: int = 0,
        reasoning: str | None = None,
        tokenizer: Any = None,
        counters_every: int = 1,
        info: dict[str, Any] | None = None,
        legacy_info: bool = False,
    ) -> None:
        self.port = port
        self.model = model
        self.script: deque[str] = deque(script or [])
        self.rates = rates or {}
        self.delay_s = delay_s
        self.reasoning = reasoning
        self.tokenizer = tokenizer
        self.counters_every = counters_every
        self.info = info or {}
        self.legacy_info = legacy_info
        self.prompt_ids: list[list[int]] = []
        self.rng = random.Random(seed)
        self.requests: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> FakeServer:
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake server did not start")
        return self

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._closing = asyncio.Event()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port, reuse_address=True)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    def stop(self) -> None:
        if self._loop is None:
            return

        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            self._closing.set()
            current = asyncio.current_task()
            handlers = [t for t in asyncio.all_tasks() if t is not current]
            await asyncio.gather(*handlers, return_exceptions=True)
            self._loop.stop()  # type: ignore[union-attr]

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop)
        assert self._thread is not None
        self._thread.join(10)
        self._loop = None

    # --- HTTP ----------------------------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:] if ":" in x)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if not await self._respond(writer, method, path, body):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, RuntimeError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _send(self, writer: asyncio.StreamWriter, status: int, payload: bytes, ctype: str) -> None:
        retry = "Retry-After: 0.25\r\n" if status == 429 else ""
        head = (
            f"HTTP/1.1 {status} {STATUS_TEXT.get(status, 'X')}\r\nContent-Type: {ctype}\r\n{retry}"
            f"Content-Length: {len(payload)}\r\nConnection: keep-alive\r\n\r\n"
        )
        writer.write(head.encode() + payload)
        await writer.drain()

    def _next_fault(self, prompt: str) -> str | None:
        if "POISON" in prompt:
            return "400"
        if self.script:
            return self.script.popleft()
        for fault, rate in self.rates.items():
            if self.rng.random() < rate:
                return fault
        return None

    async def _nap(self, seconds: float) -> None:
        """Sleep `seconds`, or less when the server is stopping."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), timeout=seconds)

    async def _respond(self, writer: asyncio.StreamWriter, method: str, path: str, raw: bytes) -> bool:
        self.requests[path] += 1
        if method == "GET":
            status, data = self._get(path)
            await self._send(writer, status, json.dumps(data).encode(), "application/json")
            return True
        body = json.loads(raw or b"{}")
        self.bodies.append(body)
        prompt = body.get("text") or json.dumps(body.get("messages")) or json.dumps(body.get("input_ids"))
        if path == "/generate" and self.tokenizer is not None:
            prompt = self._as_sglang_sees_it(body)
        fault = self._next_fault(prompt)
        if self.delay_s:
            await self._nap(self.delay_s * (0.5 + self.rng.random()))
        if fault:
            self.faults[fault] += 1
        if self._closing.is_set():
            return False
        if fault == "drop":
            writer.transport.abort()
            return False
        if fault == "timeout":
            await self._nap(30)
            return False
        if fault in ("429", "500"):
            await self._send(writer, int(fault), b'{"error": "injected"}', "application/json")
            return True
        if fault == "400":
            await self._send(writer, 400, json.dumps(_recorded("openai/error_400.json")).encode(), "application/json")
            return True
        if fault == "garbage":
            await self._send(writer, 200, b"<html>502 Bad Gateway</html>", "text/html")
            return True
        if path == "/v1/chat/completions":
            data = self._chat(body)
        elif path == "/v1/completions":
            data = self._completion(body)
        elif path == "/generate":
            data = self._generate(body, prompt)
        else:
            await self._send(writer, 404, b'{"detail": "Not Found"}', "application/json")
            return True
        await self._send(writer, 200, json.dumps(data).encode(), "application/json")
        return True

    def _get(self, path: str) -> tuple[int, dict[str, Any]]:
        if path == "/health":
            return 200, {}
        if path == "/v1/models":
            data = _recorded("openai/models.json")
            data["data"][0]["id"] = self.model
            return 200, data
        names = {"/server_info": "server_info", "/model_info": "model_info"}
        if self.legacy_info:
            names = {"/get_server_info": "server_info", "/get_model_info": "model_info"}
        if path in names:
            data = _recorded(f"sglang/{names[path]}.json")
            data["model_path"] = data["tokenizer_path"] = self.model
            if names[path] == "server_info":
                data.update(self.info)
            return 200, data
        return 404, {"detail": "Not Found"}

    def _as_sglang_sees_it(self, body: dict[str, Any]) -> str:
        """Tokenize the prompt as SGLang does (text: special tokens added; ids: as sent); return it decoded."""
        if "input_ids" in body:
            ids = list(body["input_ids"])
        else:
            ids = list(self.tokenizer(body["text"], add_special_tokens=True)["input_ids"])
        self.prompt_ids.append(ids)
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))

    @staticmethod
    def answer_for(question: str) -> str:
        """The deterministic answer the fake gives to a user turn."""
        return f"ANSWER[{question}]"

    def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        question = messages[-1]["content"]
        content = self.answer_for(question)
        if "LOOP" in question:  # a base model's loop: the same words over and over
            content = " ".join(["and so it goes on"] * 4)
        data = copy.deepcopy(_recorded("openai/chat_completions.json"))
        if "LONG" in question:  # an answer cut at max_tokens
            data["choices"][0]["finish_reason"] = "length"
        message = data["choices"][0]["message"]
        thinking_off = (body.get("chat_template_kwargs") or {}).get("enable_thinking") is False
        message["content"] = content
        message["reasoning_content"] = None if thinking_off else self.reasoning
        data["model"] = self.model
        words = len(content.split())
        data["usage"] = {"prompt_tokens": sum(len(m["content"].split()) for m in messages),
                         "completion_tokens": words, "total_tokens": words}
        return data

    @staticmethod
    def user_turn_for(prompt: str) -> str | None:
        """The message the fake writes when `prompt` ends inside an open user turn, else None."""
        opened, closed = prompt.rfind("<|user|>"), prompt.rfind("<|end|>")
        if opened < 0 or opened < closed:
            return None
        return f"Please help me with this task: {prompt[opened + len('<|user|>'):].strip()} thanks"

    def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        ids = body["prompt"]
        prompt = str(self.tokenizer.decode(ids, skip_special_tokens=False)) if self.tokenizer else json.dumps(ids)
        data = copy.deepcopy(_recorded("openai/completions.json"))
        text = self.user_turn_for(prompt) or self.answer_for(prompt)
        data["choices"][0]["text"] = text
        data["model"] = self.model
        data["usage"] = {"prompt_tokens": len(ids), "completion_tokens": len(text.split()),
                         "total_tokens": len(ids) + len(text.split())}
        return data

    def _generate(self, body: dict[str, Any], prompt: str) -> dict[str, Any]:
        users = re.findall(r"<\|user\|>(.*?)<\|end\|>", prompt, re.DOTALL)
        question = users[-1] if users else prompt
        data = copy.deepcopy(_recorded("sglang/generate.json"))
        think = f"<think>{self.reasoning}</think>\n" if self.reasoning and "NOTHINK" not in prompt else ""
        data["text"] = think + (self.user_turn_for(prompt) or self.answer_for(question))
        meta = data["meta_info"]
        meta["completion_tokens"] = len(data["text"].split())
        if self.prompt_ids:
            meta["prompt_tokens"] = len(self.prompt_ids[-1])
        answered = self.requests["/generate"]
        if not self.counters_every or answered % self.counters_every:
            for key in [k for k in meta if k.startswith("spec_")]:
                del meta[key]
        return data


def write_samples(path: Path, count: int, *, turns: int = 1, prefix: str = "q") -> list[dict]:
    """Write `count` curated samples (every third without an id) to `path`; return them."""
    rows = []
    for i in range(count):
        messages = [{"role": "system", "content": "Be brief."}] if i % 4 == 0 else []
        for t in range(turns):
            messages.append({"role": "user", "content": f"{prefix}{i} turn{t}"})
            messages.append({"role": "assistant", "content": f"dataset answer {i}.{t}"})
        row = {"messages": messages, "needs_regeneration": True, "category": "general_chat", "source": {"row": i}}
        if i % 3:
            row["id"] = f"row-{i}"
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows

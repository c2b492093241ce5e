"""The real agent clients through the gateway: Claude Code (`claude -p`) and Codex CLI (`codex exec`), the versions
node/package.json pins, over a scripted stand-in upstream on loopback.

    .venv/bin/python -m pytest -q tests/serving/gateway/test_agent_clients.py     # needs `npm ci --prefix node`

Each run is a two-step task in a temporary folder holding note.txt: the
stand-in answers turn 1 with a call of the client's own file tool (Claude
Code's Read, Codex's exec_command running `cat note.txt`), and once the file's
content comes back in a tool result, turn 2 with a final text quoting it. The
test asserts the client printed that text and the upstream saw the file's
content: the tool really ran. The stand-in speaks each pool model's provider
API (`api:` in the pool: Chat Completions, Messages or Responses) and its prompt
style (native tool calls, or the text a prompt-style model writes), as JSON or,
when asked to stream (the real clients stream), as that API's events, so `router`
(whatever the tiny router picks) and a named pool model both run end to end. A
native pool model behind the client's own API gets the client's body passed
through (Claude Code's Messages to `open-mistral-nemo-2407-FC-Auto` here, Codex's
Responses to `gpt-4o-2024-08-06-FC`): the stand-in reads its tools as that API
declares them (namespaces, freeform tools, `additional_tools` items) and answers
in it.
With no model set, each client asks for its own default model, routed by the
default aliases: Claude Code's `claude-opus-*`, and Codex's `gpt-*`, for which
Codex declares its tools in an `additional_tools` item and runs commands
through one freeform JavaScript tool (`exec` in the `functions` namespace),
which the stand-in calls with `text(await tools.exec_command(…))`. Codex with an MCP server configured gets
the server's tools in a `namespace` tool; the stand-in calls one, and Codex runs it on the server.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from data.wire.anthropic_messages import message_body, message_events
from data.wire.openai_responses import response_body, response_events
from serving.gateway.apis.responses_tools import Tools
from serving.app import create_app
from serving.gateway.config import ServingConfig
from tests.routers import REPO
from tests.serving.gateway.helpers import POOL, pool_env
from tests.serving.helpers import KEY, Loopback

pytestmark = [pytest.mark.integration, pytest.mark.slow]
BIN = REPO / "node" / "node_modules" / ".bin"
CLAUDE, CODEX = BIN / "claude", BIN / "codex"
# The pool models' provider APIs here: a native model behind Responses and one behind Messages (each passed its
# client's body through), prompt-style ones behind Messages.
APIS = {"gpt-4o-2024-08-06-FC": "openai_responses", "claude-3-haiku-20240307": "anthropic_messages",
        "claude-3-5-sonnet-20240620": "anthropic_messages", "claude-3-opus-20240229": "anthropic_messages",
        "open-mistral-nemo-2407-FC-Auto": "anthropic_messages"}
NATIVE_CODEX, PROMPT_CLAUDE = "gpt-4o-2024-08-06-FC", "claude-3-haiku-20240307"
NATIVE_CLAUDE = "open-mistral-nemo-2407-FC-Auto"  # native, behind Messages
NATIVE_CHAT = "gemini-1.5-flash-preview-0514"  # native, behind Chat Completions
MCP_READ = "mcp__files__read_text_file"  # the filesystem MCP server's read_text_file in Codex's `mcp__files` namespace
TIMEOUT_S = 240


def needs(binary: Path) -> None:
    if not binary.exists():
        pytest.skip(f"{binary.name} is not installed: run `npm ci --prefix node` (node/package.json pins it)")


class StandIn:
    """A scripted upstream speaking Chat Completions, Messages and Responses, as JSON or streamed: a call of the
    client's file tool until the note's content is in the request, then a final text quoting it. Records every
    body it gets (`seen`) and its headers (`headers`)."""

    def __init__(self) -> None:
        self.note = ""  # the secret text of note.txt for this run
        self.path = ""  # note.txt's absolute path
        self.load = ""  # a deferred tool to load with Claude Code's ToolSearch first (then answer), if any
        self.seen: list[tuple[str, dict]] = []
        self.headers: list[dict[str, str]] = []

    def answer(self, body: dict) -> dict:
        """The chat message the model 'says': native tool calls when tools are offered, else a prompt-style
        model's text."""
        text, tools = json.dumps(body), offered(body)
        if self.load:
            if self.load in tools:
                return {"role": "assistant", "content": self.final()}
            name, args = "ToolSearch", {"query": f"select:{self.load}"}
        elif self.note and self.note in text:
            return {"role": "assistant", "content": self.final()}
        elif MCP_READ in tools:  # an MCP server's tool, which Codex sends inside a namespace
            name, args = MCP_READ, {"path": self.path}
        elif "functions__exec" in tools or "functions__exec" in text:  # Codex's default model: one freeform
            # JavaScript tool calling the others (a prompt-style model reads its flat name in its prompt)
            name, args = "functions__exec", {"input": 'text(await tools.exec_command({cmd: "cat note.txt"}));'}
        elif "exec_command" in tools or "exec_command" in text:
            name, args = "exec_command", {"cmd": "cat note.txt"}
        else:
            name, args = "Read", {"file_path": self.path}
        if tools:
            return {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args)}}]}
        return {"role": "assistant", "content": f"[{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})]"}

    def final(self) -> str:
        return f"Loaded {self.load}." if self.load else f"The note says {self.note}."

    def app(self) -> FastAPI:
        app = FastAPI()
        usage = {"input": 1000, "output": 20, "cached": 0, "written": 0}  # common.usage_numbers

        @app.post("/v1/{path:path}")
        async def upstream(path: str, request: Request):
            body = await request.json()
            self.seen.append((path, body))
            self.headers.append(dict(request.headers))
            msg = self.answer(body)
            finish = "tool_calls" if msg.get("tool_calls") else "stop"
            if path == "messages":
                answer = message_body(msg, finish, usage, body["model"])
                events = message_events(answer) if body.get("stream") else None
            elif path == "responses":  # a call of a namespaced or freeform tool, as the Responses API answers it
                answer = response_body(msg, finish, usage, body["model"], body)
                answer["output"] = Tools.of(body).output(answer["output"])
                events = response_events(answer) if body.get("stream") else None
            else:
                answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
                          "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                          "usage": {"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020}}
                events = chat_events(answer) if body.get("stream") else None
            if events is None:
                return answer
            return StreamingResponse(events, media_type="text/event-stream")

        return app


def chat_events(answer: dict):
    """A chat completion as its stream: the message in one delta, the finish, the usage chunk, [DONE]."""
    base = {k: answer[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = answer["choices"][0]
    message = dict(choice["message"])
    if message.get("tool_calls"):
        message["tool_calls"] = [{**tc, "index": i} for i, tc in enumerate(message["tool_calls"])]
    for delta, finish in ((message, None), ({}, choice["finish_reason"])):
        yield f"data: {json.dumps({**base, 'choices': [{'index': 0, 'delta': delta, 'finish_reason': finish}]})}\n\n"
    yield f"data: {json.dumps({**base, 'choices': [], 'usage': answer['usage']})}\n\n"
    yield "data: [DONE]\n\n"


def offered(body: dict) -> set[str]:
    """The names of the native tools a request offers, in any of the three APIs (a namespace's inner tools as
    `<namespace>__<name>`, with those of Responses' `additional_tools` items)."""
    items = body.get("input") if isinstance(body.get("input"), list) else []
    tools = [*(body.get("tools") or []), *(t for item in items if isinstance(item, dict)
                                             and item.get("type") == "additional_tools" for t in item["tools"])]
    names = set()
    for t in tools:
        if t.get("type") == "namespace":
            names |= {f"{t['name']}__{inner['name']}" for inner in t.get("tools") or []}
        elif t.get("name") or t.get("function", {}).get("name"):
            names.add(t.get("name") or t["function"]["name"])
    return names


@contextlib.contextmanager
def gateway_over(stand_in: StandIn, client, observers: list | None = None):
    """The gateway's URL, every pool model answered by the stand-in under its provider API (APIS)."""
    mp = pytest.MonkeyPatch()
    pool_env(mp)
    try:
        with Loopback(stand_in.app()) as upstream:
            models = [m.model_copy(update={"base_url": upstream + "/v1", "api": APIS.get(m.name, m.api)})
                      for m in POOL.models]
            app = create_app(ServingConfig(), client=client, pool=POOL.model_copy(update={"models": models}),
                             observers=observers)
            with Loopback(app) as url:
                yield url
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def agent_gateway(client):
    """(gateway URL, stand-in)."""
    stand_in = StandIn()
    with gateway_over(stand_in, client) as url:
        yield url, stand_in


@pytest.fixture
def task(agent_gateway, tmp_path):
    """(workdir, home, stand-in) for one run: note.txt with a fresh secret, the stand-in told about it."""
    _, stand_in = agent_gateway
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir(), home.mkdir()
    stand_in.note = f"NOTE-{uuid.uuid4().hex[:10]}"
    stand_in.path = str(work / "note.txt")
    (work / "note.txt").write_text(stand_in.note + "\n")
    stand_in.seen.clear()
    stand_in.headers.clear()
    stand_in.load = ""
    return work, home, stand_in


def run(argv: list, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    base = {k: os.environ[k] for k in ("PATH", "LANG", "TMPDIR") if k in os.environ}
    return subprocess.run([str(a) for a in argv], cwd=cwd, env={**base, **env}, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=TIMEOUT_S)


def claude(url: str, work: Path, home: Path, model: str | None, *extra: str,
           prompt: str = "Read note.txt and tell me what it says.") -> subprocess.CompletedProcess:
    env = {"HOME": str(home), "ANTHROPIC_BASE_URL": url, "ANTHROPIC_AUTH_TOKEN": KEY,
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
           "CLAUDE_CODE_MAX_RETRIES": "1"}  # a failure shows at once, not after minutes of backoff
    if model is not None:
        env["ANTHROPIC_MODEL"] = model
    return run([CLAUDE, "-p", *extra, prompt, "--allowedTools", "Read"], work, env)


def codex(url: str, work: Path, home: Path, model: str | None, mcp: bool = False) -> subprocess.CompletedProcess:
    codex_home = home / ".codex"
    codex_home.mkdir()
    servers = (f'\n[mcp_servers.files]\ncommand = "{BIN / "mcp-server-filesystem"}"\nargs = ["{work}"]\n' if mcp
               else "")
    (codex_home / "config.toml").write_text(
        (f'model = "{model}"\n' if model else "") + 'model_provider = "switchcraft"\n\n[model_providers.switchcraft]\n'
        f'name = "switchcraft"\nbase_url = "{url}/v1"\nwire_api = "responses"\nenv_key = "SWITCHCRAFT_API_KEY"\n'
        + servers)
    env = {"HOME": str(home), "CODEX_HOME": str(codex_home), "SWITCHCRAFT_API_KEY": KEY}
    return run([CODEX, "exec", "--skip-git-repo-check", "--sandbox", "danger-full-access",
                "Run `cat note.txt` and tell me what it says."], work, env)


def tool_ran(stand_in: StandIn) -> list[str]:
    """The upstream paths of requests that carried the note's content (a tool result): the tool ran."""
    return [path for path, body in stand_in.seen if stand_in.note in json.dumps(body)]


@pytest.mark.parametrize("model", ["router", PROMPT_CLAUDE, NATIVE_CLAUDE, None])
def test_claude_code_reads_a_file_and_answers_through_the_gateway(agent_gateway, task, model):
    needs(CLAUDE)
    url, _ = agent_gateway
    work, home, stand_in = task
    done = claude(url, work, home, model)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    assert stand_in.final() in done.stdout
    assert tool_ran(stand_in), [path for path, _ in stand_in.seen]
    if model == PROMPT_CLAUDE:  # asked its own way: Messages, its functions in the system prompt
        assert {path for path, _ in stand_in.seen} == {"messages"}
        assert all("tools" not in body and POOL.get(PROMPT_CLAUDE).model_id == body["model"]
                   for _, body in stand_in.seen)
    if model == NATIVE_CLAUDE:  # passed through: Claude Code's own body and beta headers
        assert {path for path, _ in stand_in.seen} == {"messages"}
        assert all(isinstance(body["system"], list) and body["model"] == POOL.get(NATIVE_CLAUDE).model_id
                   and body["stream"] is True for _, body in stand_in.seen)
        assert all(h.get("anthropic-beta") for h in stand_in.headers), stand_in.headers[0]


def test_claude_codes_tool_search_loads_a_deferred_tool_through_the_gateway(agent_gateway, task):
    """ToolSearch answers with tool_reference blocks; the deferred tool is offered from the next turn on."""
    needs(CLAUDE)
    url, _ = agent_gateway
    work, home, stand_in = task
    stand_in.load = "CronList"
    done = claude(url, work, home, NATIVE_CHAT)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    assert stand_in.final() in done.stdout
    first, last = stand_in.seen[0][1], stand_in.seen[-1][1]
    assert "CronList" not in offered(first) and "ToolSearch" in offered(first)
    assert "CronList" in offered(last)
    result = next(m for m in last["messages"] if m["role"] == "tool")
    assert result["content"].startswith("<function>") and '"name": "CronList"' in result["content"]


@pytest.mark.parametrize("model", ["router", NATIVE_CODEX, None])
def test_codex_runs_a_shell_command_and_answers_through_the_gateway(agent_gateway, task, model):
    needs(CODEX)
    url, _ = agent_gateway
    work, home, stand_in = task
    done = codex(url, work, home, model)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    assert stand_in.final() in done.stdout
    assert tool_ran(stand_in), [path for path, _ in stand_in.seen]
    if model == NATIVE_CODEX:  # asked its own way: Responses, with native function tools
        assert {path for path, _ in stand_in.seen} == {"responses"}
        first = stand_in.seen[0][1]
        assert "exec_command" in offered(first) and first["model"] == "gpt-4o-2024-08-06"
        assert first["stream"] is True and "store" in first  # passed through: Codex's own body



def test_codex_calls_an_mcp_servers_tool_through_its_namespace(agent_gateway, task):
    """Codex sends an MCP server's tools as one `namespace` tool: offered flat, the call answered back into the
    namespace, Codex runs it on the server (the filesystem MCP server from node/package.json)."""
    needs(CODEX)
    needs(BIN / "mcp-server-filesystem")
    url, _ = agent_gateway
    work, home, stand_in = task
    done = codex(url, work, home, NATIVE_CODEX, mcp=True)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    assert stand_in.final() in done.stdout
    first = stand_in.seen[0][1]
    assert MCP_READ in offered(first)
    assert any(item.get("type") == "function_call_output" and stand_in.note in item["output"]
               for item in stand_in.seen[-1][1]["input"])


@pytest.fixture
def observed(client, task):
    """(gateway URL, the `switchcraft.session` trace of every request it served) over the stand-in."""
    _, _, stand_in = task
    sessions: list[dict] = []
    with gateway_over(stand_in, client, [lambda served: sessions.append(served.meta.get("session"))]) as url:
        yield url, sessions


def one_session(sessions: list[dict], named_by: str) -> None:
    assert sessions and all(s is not None for s in sessions), sessions  # the first turn too
    assert {s["id"] for s in sessions} == {sessions[0]["id"]}
    assert {s["named_by"] for s in sessions} == {named_by}
    assert [s["turn"] for s in sessions] == list(range(1, len(sessions) + 1))


def test_claude_code_continue_is_one_session_named_by_its_own_id(observed, task):
    """`claude -p`, then `claude -p --continue`: every request of both runs is one gateway session, named by
    Claude Code's x-claude-code-session-id."""
    needs(CLAUDE)
    (url, sessions), (work, home, stand_in) = observed, task
    first = claude(url, work, home, PROMPT_CLAUDE)
    again = claude(url, work, home, PROMPT_CLAUDE, "--continue", prompt="Say it once more.")
    assert first.returncode == 0 and again.returncode == 0, again.stderr[-2000:] + again.stdout[-2000:]
    assert stand_in.final() in again.stdout and len(sessions) >= 3  # 2 turns, then the continuation
    one_session(sessions, "x-claude-code-session-id")


def test_codex_turns_are_one_session_named_by_its_own_id(observed, task):
    needs(CODEX)
    (url, sessions), (work, home, stand_in) = observed, task
    done = codex(url, work, home, NATIVE_CODEX)
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    assert stand_in.final() in done.stdout and len(sessions) >= 2
    one_session(sessions, "session-id")


@pytest.fixture
def novel(exported, bfcl_examples, task, tmp_path):
    """(gateway URL, every routed decision): the tiny router with a novelty index fitted on the 1,630 BFCL v1
    requests (training/novelty.py), so the real clients' requests are scored against benchmark traffic."""
    import numpy as np

    from serving.client import RouterClient
    from tests.routers import with_novelty
    from training.export import RequestEncoder
    from training.folds import grouped_folds
    from training.novelty import Novelty

    encoder = RequestEncoder.from_dir(exported[0])
    rows = [encoder.encode(e.messages, e.tools) for e in bfcl_examples]
    fitted = Novelty.fit([r[0] for r in rows], np.array([r[1] for r in rows]),
                         grouped_folds([e.id for e in bfcl_examples], 5, 0), safe_model=NATIVE_CODEX)
    client = RouterClient.from_dir(with_novelty(exported[0], fitted, tmp_path / "router"), threads=1)
    _, _, stand_in = task
    decisions: list[dict] = []
    with gateway_over(stand_in, client, [lambda served: decisions.append(served.meta.get("decision"))]) as url:
        yield url, decisions, fitted
    client.close()


def test_the_real_clients_requests_go_to_the_safe_model_as_unlike_benchmark_requests(novel, task):
    """Every routed request of a `claude -p` and a `codex exec` run is over the novelty threshold that flags 2%
    of held-out BFCL v1 requests, and runs on the safe model (docs/router.md, "Novelty")."""
    needs(CLAUDE), needs(CODEX)
    (url, decisions, fitted), (work, home, _) = novel, task
    assert claude(url, work, home, "router").returncode == 0
    (home / "codex").mkdir()
    assert codex(url, work, home / "codex", "router").returncode == 0
    routed = [d for d in decisions if d]
    assert len(routed) >= 4 and fitted.held_out_flagged <= 0.02
    flagged = [d for d in routed if d["novelty"]["flagged"]]
    print(f"novelty: {len(flagged)} of {len(routed)} real-client requests flagged (held-out BFCL v1: "
          f"{fitted.held_out_flagged:.1%}); scores {sorted(round(d['novelty']['score'], 2) for d in routed)}")
    assert len(flagged) == len(routed)
    assert all(d["chosen"] == NATIVE_CODEX and d["strategy_why"]["rule"] == "novelty" for d in flagged)


def tmux(*args: str, check: bool = True) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=check, timeout=30).stdout


def test_an_interactive_claude_code_session_in_tmux_reads_a_file_and_answers(agent_gateway, task):
    """Claude Code as a person runs it: the full-screen interface in a terminal (tmux), a prompt typed and
    submitted, the answer read off the screen; then a second prompt in the same session."""
    import shutil
    import time

    needs(CLAUDE)
    if not shutil.which("tmux"):
        pytest.skip("tmux is not installed (apt-get install tmux): the interactive session needs a terminal")
    url, _ = agent_gateway
    work, home, stand_in = task
    # A first start asks for a theme and whether to trust the folder: answered as a returning user would have.
    (home / ".claude.json").write_text(json.dumps({
        "hasCompletedOnboarding": True, "theme": "dark",
        "projects": {str(work): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}}}))
    env = {"HOME": str(home), "ANTHROPIC_BASE_URL": url, "ANTHROPIC_AUTH_TOKEN": KEY,
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "ANTHROPIC_MODEL": "router"}
    name = f"sc-{uuid.uuid4().hex[:8]}"
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    tmux("new-session", "-d", "-s", name, "-x", "160", "-y", "50", "-c", str(work),
         f"env PATH={os.environ['PATH']} {exports} {CLAUDE} --allowedTools Read")

    def screen_until(*texts: str, timeout_s: float = 90) -> str:
        deadline, screen = time.monotonic() + timeout_s, ""
        while time.monotonic() < deadline:
            screen = tmux("capture-pane", "-p", "-t", name, check=False)
            if any(t in screen for t in texts):
                return screen
            time.sleep(0.5)
        raise AssertionError(f"none of {texts} showed; the screen:\n{screen}")

    try:
        screen_until("Do you want to use this API key?")  # the gateway key, from the environment: said yes to
        tmux("send-keys", "-t", name, "Up")
        tmux("send-keys", "-t", name, "Enter")
        screen_until("? for shortcuts", "shift+tab to cycle")  # the prompt box is up
        tmux("send-keys", "-t", name, "-l", "Read note.txt and tell me what it says.")
        tmux("send-keys", "-t", name, "Enter")
        screen_until(stand_in.final())
        assert tool_ran(stand_in), [path for path, _ in stand_in.seen]
        asked = len(stand_in.seen)
        tmux("send-keys", "-t", name, "-l", "And once more, please.")
        tmux("send-keys", "-t", name, "Enter")
        deadline = time.monotonic() + 60
        while len(stand_in.seen) == asked and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(stand_in.seen) > asked  # the second turn went through the gateway
        second = stand_in.seen[-1][1]
        assert stand_in.note in json.dumps(second)  # with the first turn's history: one session
        print(f"interactive: {len(stand_in.seen)} upstream requests over two prompts")
    finally:
        tmux("kill-session", "-t", name, check=False)

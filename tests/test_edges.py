"""The edges a careful attacker or an unlucky run finds (issue 26): one test per defect, each failing on the
code before its fix. Real parts: the stdio and HTTP servers, git-backed state, files, FIFOs and links.
(Jobs whose supervisor is killed: `tests/test_faults.py`; the state history's growth: `tests/test_state.py`.)"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from aci import registry
from aci.context import Context
from aci.errors import ACIError
from tests.conftest import mcp_client
from tests.eval_helpers import call, copy_model, entries, init_run


def _plan(workdir, **fields):
    return registry.call("plan", fields, Context(workdir=workdir))


# -- row 2: the base model is fixed after plan init --------------------------------------------------------
def test_the_base_model_changes_only_by_a_journaled_re_init(workdir):
    """`plan update --base-model` swapped the base mid-run under the strict profile, so a folder named like an
    instruct model then counted as the base. Only `init --force` may change it, and that is a weakening."""
    _plan(workdir, action="init", base_model="Qwen/Qwen3-1.7B-Base", benchmark="gsm8k", profile="posttrainbench")
    with pytest.raises(ACIError) as e:
        _plan(workdir, action="update", base_model="Qwen/Qwen3-1.7B-Instruct")
    assert e.value.rule == "base-model-only" and "init --force" in str(e.value)
    assert Context(workdir=workdir).card.base_model == "Qwen/Qwen3-1.7B-Base"
    again = _plan(workdir, action="init", base_model="Qwen/Qwen3-1.7B-Instruct", benchmark="gsm8k")
    assert again.card["base_model"] == "Qwen/Qwen3-1.7B-Base"  # init without --force keeps it, as before

    out = _plan(workdir, action="init", base_model="Qwen/Qwen3-1.7B-Instruct", benchmark="gsm8k",
                profile="posttrainbench", force=True)
    assert out.card["base_model"] == "Qwen/Qwen3-1.7B-Instruct"
    assert any("base model changed" in w for w in out.warnings)
    ctx = Context(workdir=workdir)
    change = ctx.state.journal()[-1]["data"]["base_model_change"]
    assert change["from"] == "Qwen/Qwen3-1.7B-Base" and change["to"] == "Qwen/Qwen3-1.7B-Instruct"
    s = registry.call("status", {}, ctx)
    assert any("base model Qwen/Qwen3-1.7B-Base -> Qwen/Qwen3-1.7B-Instruct" in w for w in s.state.rules_weakened)
    assert any("Rules weakened mid-run" in r for r in s.run.reminders)


# -- row 3: a model folder's links stay inside the allowed roots ------------------------------------------
def test_a_checkpoint_linking_outside_the_roots_is_refused_at_registration_and_promotion(
        workdir, tiny_model, tmp_path_factory, monkeypatch):
    """A link in a checkpoint to a file outside the roots was copied into final_model/ as what it points to
    (the copy follows links), and finalize passed. It is now refused when the folder is registered, and
    again at promotion for a link made after registration (the content hash reads through links, so a link
    to an identical copy elsewhere passes it, and that copy can change after the check)."""
    for name in ("HF_HOME", "ACI_ROOTS"):
        monkeypatch.delenv(name, raising=False)
    outside = tmp_path_factory.mktemp("outside")
    init_run(workdir, tiny_model)
    call(workdir, checkpoint="base", limit=40)

    def link_out(folder, name):
        shutil.copy(folder / name, outside / f"{folder.name}-{name}")
        (folder / name).unlink()
        (folder / name).symlink_to(outside / f"{folder.name}-{name}")

    first = copy_model(tiny_model, workdir / "ck-linked", 0.9)
    link_out(first, "tokenizer_config.json")
    with pytest.raises(ACIError, match=r"tokenizer_config.json is a symbolic link to .*outside the allowed roots"):
        call(workdir, checkpoint="ck-linked", parent="base", limit=40)
    assert not entries(workdir, "registered")

    inside = copy_model(tiny_model, workdir / "ck-inside", 0.9)  # a link that stays inside is fine
    (inside / "tokenizer.json").unlink()
    (inside / "tokenizer.json").symlink_to(workdir / "base" / "tokenizer.json")
    assert call(workdir, checkpoint="ck-inside", parent="base", limit=40).result["score"] == pytest.approx(0.9)

    later = copy_model(tiny_model, workdir / "ck-later", 0.95)
    call(workdir, checkpoint="ck-later", parent="base", limit=40)
    link_out(later, "tokenizer_config.json")
    with pytest.raises(ACIError, match=r"ck-later: tokenizer_config.json is a symbolic link"):
        call(workdir, action="promote", checkpoint="ck-later")
    assert not (workdir / "final_model").exists()
    assert call(workdir, action="promote", checkpoint="ck-inside").promotion.promoted
    assert not any(p.is_symlink() for p in (workdir / "final_model").rglob("*"))


# -- row 5: the HTTP transport answers its own address, with a bearer token --------------------------------
def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _post(host: str, port: int, headers: dict) -> int:
    import http.client

    hello = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    c = http.client.HTTPConnection(host, port, timeout=10)
    try:
        c.request("POST", "/mcp", body=hello, headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})
        return c.getresponse().status
    finally:
        c.close()


def test_http_refuses_foreign_hosts_and_origins_and_needs_a_token_it_generates(workdir):
    """`--host 127.0.0.2` took `Host: evil.example` with a foreign Origin (DNS rebinding: a web page reaching
    the tools) and, without --token, any local user's request. Now the server prints a token it made, once,
    and answers only its own address."""
    host = "127.0.0.2"
    port = _free_port(host)
    env = {k: v for k, v in os.environ.items() if k != "ACI_HTTP_TOKEN"}
    proc = subprocess.Popen([sys.executable, "-m", "aci.cli", "serve", "--http", "--host", host, "--port", str(port)],
                            cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        import select

        line = proc.stderr.readline() if select.select([proc.stderr], [], [], 60)[0] else ""
        assert "Authorization: Bearer " in line, line
        token = line.split("Bearer ", 1)[1].split("'", 1)[0]
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                socket.create_connection((host, port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        auth = {"Authorization": f"Bearer {token}"}
        assert _post(host, port, {}) == 401
        assert _post(host, port, {"Authorization": "Bearer wrong"}) == 401
        assert _post(host, port, {**auth, "Host": "evil.example", "Origin": "http://evil.example"}) == 421
        assert _post(host, port, {**auth, "Host": f"evil.example:{port}"}) == 421
        assert _post(host, port, {**auth, "Origin": "http://evil.example"}) == 403
        assert _post(host, port, {**auth, "Origin": f"http://{host}:{port}"}) == 200
        assert _post(host, port, auth) == 200
    finally:
        proc.terminate()
        proc.wait(10)
    assert token not in " ".join(proc.args)  # never on the command line, where `ps` shows it

    from aci.server import http_token

    (workdir / "token").write_text("chosen\n")
    assert http_token(str(workdir / "token")) == ("chosen", False)
    (workdir / "token").write_text("")
    with pytest.raises(ACIError, match="is empty"):
        http_token(str(workdir / "token"))


# -- row 6: JSON text reaches a text field as text -----------------------------------------------------------
def test_a_json_grader_spec_is_accepted_as_text_over_mcp(workdir):
    """The SDK parsed every JSON-looking string for a field not typed exactly `str`, so the documented JSON
    grader spec was refused: "Input should be a valid string"."""
    spec = '{"type": "regex", "pattern": "#### ([0-9]+)"}'

    async def go():
        async with mcp_client(workdir) as c:
            plan = await c.call_tool("plan", {"action": "init", "base_model": "b", "benchmark": "toy", "grader": spec})
            note = await c.call_tool("log-state", {"message": '["a list", "as text"]'})
            bad = await c.call_tool("histogram", {"features": '["no-such-feature"]', "path": "x.jsonl"})
            return plan, note, bad

    plan, note, bad = asyncio.run(go())
    assert not plan.is_error, plan.content[0].text
    assert plan.structured_content["card"]["grader"] == spec
    assert not note.is_error and note.structured_content["event"]["message"] == '["a list", "as text"]'
    assert bad.is_error and "valid list" not in bad.content[0].text  # a JSON list for a list field still parses


# -- row 10: errors say what broke -------------------------------------------------------------------------------
def test_unexpected_errors_and_nul_bytes_are_answered_with_a_reason(workdir):
    """A NUL byte in a path answered only "Error executing tool histogram" (a ValueError the server did not
    catch); any other exception did the same. Now a NUL is refused by name, and a bug answers with its type
    and message."""
    async def go():
        async with mcp_client(workdir) as c:
            nul = await c.call_tool("histogram", {"path": "data\x00.jsonl"})
            (workdir / "state").mkdir()
            (workdir / "state" / "run.json").mkdir()  # an unlucky state: a folder where the run card goes
            broken = await c.call_tool("status", {})
            alive = await c.call_tool("log-state", {"action": "summary"})
            return nul, broken, alive

    nul, broken, alive = asyncio.run(go())
    assert nul.is_error and "NUL byte" in nul.content[0].text, nul.content[0].text
    text = broken.content[0].text
    assert broken.is_error and text.startswith("Error executing tool status: IsADirectoryError: "), text
    assert "run.json" in text and "Traceback" not in text
    assert alive.is_error and "IsADirectoryError" in alive.content[0].text  # the server still answers


# -- row 11: regular files only ----------------------------------------------------------------------------------
def test_a_fifo_given_as_a_file_is_refused_without_being_opened(workdir):
    """A FIFO given as a data file hung the call forever (one server worker thread each time). Every place a
    tool takes a file refuses it from a stat, before any open() could block."""
    fifo = workdir / "data.jsonl"
    os.mkfifo(fifo)
    (workdir / "ok.jsonl").write_text('{"prompt": "q", "completion": "a"}\n')
    calls = [("histogram", {"path": "data.jsonl"}),
             ("contamination", {"path": "ok.jsonl", "reference": "data.jsonl"}),
             ("plan", {"action": "init", "base_model": "b", "benchmark": "toy", "reference": "data.jsonl"}),
             ("verify-task", {"tasks": "data.jsonl"})]

    async def go():
        out = []
        async with mcp_client(workdir) as c:
            for name, args in calls:
                try:
                    r = await asyncio.wait_for(c.call_tool(name, args), 20)
                    out.append(r.content[0].text if r.is_error else "succeeded")
                except asyncio.TimeoutError:  # a reader blocked in open(): a writer lets it go, so the server can end
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                    out.append("hung")
        return out

    for (name, _), text in zip(calls, asyncio.run(go()), strict=True):
        assert "named pipe (FIFO)" in text, (name, text)

    from aci.tasks.rows import read_rows

    with pytest.raises(ACIError, match="named pipe"):  # a path that reached the reader some other way
        next(read_rows(fifo))


def test_a_clean_copy_is_written_only_inside_the_roots(workdir, tmp_path_factory, monkeypatch):
    """Issue 33: `contamination --clean-output` had no test of the roots check (the review passed the training
    set itself, and the "same file" check answered first). A new file outside the roots, named absolutely,
    through `..` or through a link in the workdir, is refused by name over the MCP server, and nothing is
    written there; the same call with a path inside writes the copy, so the refusal is the roots check's."""
    monkeypatch.delenv("ACI_ROOTS", raising=False)
    outside = tmp_path_factory.mktemp("outside")
    (workdir / "escape").symlink_to(outside, target_is_directory=True)
    (workdir / "ref.jsonl").write_text(json.dumps({"question": "How many legs do three spiders have?",
                                                   "answer": "24"}) + "\n")
    (workdir / "train.jsonl").write_text(json.dumps({"messages": [
        {"role": "user", "content": "Name a colour of the sky at dusk."},
        {"role": "assistant", "content": "Orange."}]}) + "\n")
    given = [str(outside / "clean.jsonl"), f"../{outside.name}/clean.jsonl", "escape/clean.jsonl", "clean.jsonl"]

    async def go():
        async with mcp_client(workdir) as c:
            return [await c.call_tool("contamination", {"path": "train.jsonl", "reference": "ref.jsonl",
                                                        "clean_output": g, "record": False}) for g in given]

    *refused, inside = asyncio.run(go())
    for g, r in zip(given[:-1], refused, strict=True):
        assert r.is_error and f"clean output {g!r} resolves to {outside / 'clean.jsonl'}, outside the allowed " \
                              f"roots" in r.content[0].text, (g, r.content)
    assert list(outside.iterdir()) == []
    assert not inside.is_error and inside.structured_content["kept_rows"] == 1, inside.content
    assert (workdir / "clean.jsonl").read_text() == (workdir / "train.jsonl").read_text()

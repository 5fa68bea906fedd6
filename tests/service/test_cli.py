"""`spanseek serve`: flags mirror the settings, the environment fills the rest, bad paths fail before uvicorn."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import time
from pathlib import Path

import pytest

from spanseek.core.model import ModelError
from spanseek.core.phrase_index import IndexFormatError
from spanseek.service.cli import check_servable, register, serve_flags, settings_from_args
from spanseek.service.settings import Settings


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["serve", *argv])


def test_flags_mirror_the_settings():
    """Every setting has a flag (warmup: --no-warmup) whose help is the setting's description and names its
    environment variable and its default (--no-warmup named neither)."""
    flags = serve_flags()
    assert [dest for _, dest, _ in flags] == list(Settings.model_fields)
    for flag, dest, help_text in flags:
        assert flag == ("--no-warmup" if dest == "warmup" else "--" + dest.replace("_", "-"))
        field = Settings.model_fields[dest]
        assert field.description and field.description in help_text and f"SPANSEEK_{dest.upper()}" in help_text
        if not field.is_required():
            assert f"; default {field.get_default(call_default_factory=True)!r})" in help_text, flag


def test_the_help_of_a_setting_with_choices_lists_them(capsys):
    """``--reader-precision READER_PRECISION`` said nothing of the values it takes: each setting that takes one of
    a few values shows them, as the settings model has them."""
    parser = argparse.ArgumentParser(prog="spanseek")
    register(parser.add_subparsers())
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--help"])
    usage = capsys.readouterr().out
    for flag, choices in (("--reader-precision", "{auto,fp32,bf16}"), ("--precision", "{auto,fp32,bf16}"),
                          ("--runtime", "{auto,torch,onnx}"), ("--pipeline", "{auto,on,full,off}"),
                          ("--fair-share-by", "{connection,peer}"), ("--log-format", "{text,json}")):
        assert f"{flag} {choices}" in usage
    assert "--no-warmup " in usage and "(SPANSEEK_WARMUP; default True)" in usage
    assert not settings_from_args(parse(["--index", "x", "--no-warmup"])).warmup
    assert settings_from_args(parse(["--index", "x"])).warmup


def test_flags_override_environment_which_overrides_defaults(monkeypatch, tmp_path):
    monkeypatch.setenv("SPANSEEK_INDEX", str(tmp_path / "from-env"))
    monkeypatch.setenv("SPANSEEK_MAX_WAIT_MS", "7.5")
    monkeypatch.setenv("SPANSEEK_MAX_BATCH_SIZE", "3")
    s = settings_from_args(parse(["--max-batch-size", "48", "--port", "9001", "--cors-origins", "https://a,https://b",
                                  "--api-key", "k", "--no-warmup", "--pipeline", "off"]))
    assert s.index == tmp_path / "from-env" and s.max_wait_ms == 7.5  # environment
    assert s.max_batch_size == 48 and s.port == 9001 and not s.warmup and s.pipeline == "off"  # flags
    assert s.cors_origins == ["https://a", "https://b"] and s.api_key.get_secret_value() == "k"
    assert s.model == "default" and s.host == "127.0.0.1" and s.max_queue == 512  # defaults


def test_invalid_settings_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"default_top_k \(50\) exceeds max_top_k \(10\)"):
        Settings(index=tmp_path, default_top_k=50, max_top_k=10)
    with pytest.raises(ValueError, match=r"max_batch_size\s+Input should be greater than or equal to 1"):
        Settings(index=tmp_path, max_batch_size=0)
    with pytest.raises(ValueError, match=r"max_queue must hold at least one full request"):
        Settings(index=tmp_path, max_queue=4, max_queries_per_request=8)
    assert Settings(index=tmp_path, default_top_k=10, max_top_k=10, max_queue=16,
                    max_queries_per_request=16)  # each bound met exactly


@pytest.mark.parametrize(("flags", "message"), [
    (["--max-batch-size", "0", "--port", "70000"],
     "--port / SPANSEEK_PORT: Input should be less than or equal to 65535 (got 70000); --max-batch-size / "
     "SPANSEEK_MAX_BATCH_SIZE: Input should be greater than or equal to 1 (got 0)"),
    (["--default-top-k", "50", "--max-top-k", "10"], "default_top_k"),
])
def test_invalid_serve_flags_are_one_line_naming_the_flag(tmp_path, capsys, flags, message):
    from spanseek.cli import main

    assert main(["serve", "--index", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("spanseek serve: error: invalid settings: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_serve_fails_fast_on_a_missing_index_or_model(tmp_path, tiny_index):
    with pytest.raises(IndexFormatError):
        check_servable(Settings(index=tmp_path / "none"))
    with pytest.raises(ModelError):
        check_servable(Settings(index=tiny_index, model=str(tmp_path)))


def test_spanseek_serve_is_registered():
    from spanseek.cli import build_parser

    args = build_parser().parse_args(["serve", "--index", "x", "--model", "default"])
    assert args.func.__module__ == "spanseek.service.cli" and args.index == "x"


def test_spanseek_serve_runs_the_service(tiny_index, tiny_model_dir):
    """The real command on loopback: ready, answers a search, logs JSON lines (uvicorn's too) whose access line
    carries the request id it was sent with, and stops on Ctrl-C without a traceback."""
    import json
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "SPANSEEK_DEVICE": "cpu", "SPANSEEK_PRECISION": "fp32", "OMP_WAIT_POLICY": "PASSIVE",
           "SPANSEEK_LOG_FORMAT": "json"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "spanseek.cli", "serve", "--index", str(tiny_index), "--model", str(tiny_model_dir),
         "--port", str(port), "--max-batch-size", "4"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "spanseek serve never became ready"
            try:
                if httpx.get(url + "/ready").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        r = httpx.post(url + "/search?unit=doc", json={"query": "who built the castle?", "top_k": 2},
                       headers={"X-Request-ID": "json-1"})
        assert r.status_code == 200 and len(r.json()["results"][0]["hits"]) == 2
        assert r.headers["x-request-id"] == "json-1" and r.json()["request_id"] == "json-1"
        assert httpx.post(url + "/search", json={"query": "x", "top_k": 0}).status_code == 400
        assert httpx.get(url + "/info").json()["service"]["max_batch_size"] == 4
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: a graceful stop
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err, err
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]  # every line is one JSON object
    assert all({"time", "level", "logger", "message", "request_id"} <= set(line) for line in lines)
    assert any(line["logger"].startswith("uvicorn") for line in lines)  # uvicorn's own lines are JSON too
    assert not any("color_message" in line for line in lines)
    [search] = [line for line in lines if line["logger"] == "spanseek.access" and line["request_id"] == "json-1"]
    assert (search["method"], search["path"], search["status"]) == ("POST", "/search", 200)
    assert search["duration_ms"] > 0
    refused = [line for line in lines if line["logger"] == "spanseek.access" and line["status"] == 400]
    assert len(refused) == 1 and len(refused[0]["request_id"]) == 32  # a generated id


def test_spanseek_serve_refuses_a_missing_index(tmp_path, capsys):
    """The command's entry point in this process (``test_spanseek_serve_runs_the_service`` runs the real process)."""
    from spanseek.cli import main

    assert main(["serve", "--index", str(tmp_path / "none")]) == 2
    assert "no such index directory" in capsys.readouterr().err


def test_serve_logs_every_line_in_its_format_and_names_the_model_it_serves(tiny_index, tiny_model_dir, monkeypatch,
                                                                           capfd):
    """What the start-up checks logged (an index built by an earlier bundled default) came as plain text before
    the JSON lines, and the first line named the model asked for, not the one served."""
    import json
    import logging
    import socket

    import uvicorn

    from spanseek.cli import main
    from spanseek.service import cli

    def checks(settings):
        logging.getLogger("spanseek.core.loading").warning("built with an earlier model: using it")
        return tiny_model_dir

    monkeypatch.setattr(cli, "check_servable", checks)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["serve", "--index", str(tiny_index), "--model", "default", "--port", str(port), "--log-format",
                 "json"]) == 0
    out, err = capfd.readouterr()
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]  # every line is JSON
    assert out == "" and [x["message"] for x in lines if x["level"] == "WARNING"] == [
        "built with an earlier model: using it"]
    assert any(f"with model {tiny_model_dir} on" in x["message"] for x in lines)
    logging.getLogger().handlers.clear()  # (the command configured the root logger)


def test_serve_stops_and_exits_1_once_no_search_can_be_answered(tiny_index, tiny_model_dir, monkeypatch):
    """The batcher's queue owner ending on a fault (ServiceState.batcher_stopped) stops the server gracefully and
    ``spanseek serve`` exits with status 1, so that a restart policy starts it again; before, it served on, every
    search a 503, and /ready said 200."""
    import uvicorn

    from spanseek.cli import main
    from spanseek.service import cli

    stopped = []

    def run(self, sockets=None):  # the server runs until the batcher stops, then uvicorn's loop would see should_exit
        self.config.app.state.service.batcher_stopped("RuntimeError: a fault")
        stopped.append(self.should_exit)

    monkeypatch.setattr(cli, "check_servable", lambda settings: tiny_model_dir)
    monkeypatch.setattr(uvicorn.Server, "run", run)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["serve", "--index", str(tiny_index), "--model", "default", "--port", str(port)]) == 1
    assert stopped == [True]


def test_a_file_given_as_the_index_is_named_not_quoted(tmp_path):
    """A corpus given as --index was read as an alias's pointer file: its first line, taken for a path too long,
    came back in the error (any file's first line: the message must not show a file's contents)."""
    from spanseek.core.alias import AliasError

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "a", "title": "secret", "paragraphs": ["' + "word " * 100 + '"]}\n')
    with pytest.raises(AliasError) as e:
        check_servable(Settings(index=corpus))
    message = str(e.value)
    assert str(corpus) in message and "names no directory" in message  # the file named...
    assert "secret" not in message and "word" not in message  # ...its text never shown


def test_a_key_is_read_from_a_file_once_and_a_key_given_two_ways_at_one_level_is_refused(tmp_path, monkeypatch,
                                                                                          capsys):
    """--api-key shows in `ps` to every user of the machine: --api-key-file / SPANSEEK_API_KEY_FILE (and the admin
    key's) read it from a file when the settings are made; a key and its file given at one level (both flags, both
    variables), or a file without a usable key, is refused in one line that names the flags and never shows the
    key."""
    from spanseek.cli import main

    for name in ("API_KEY", "ADMIN_API_KEY", "API_KEY_FILE", "ADMIN_API_KEY_FILE"):
        monkeypatch.delenv(f"SPANSEEK_{name}", raising=False)
    key, admin = tmp_path / "key", tmp_path / "admin"
    key.write_text("read-key\n")
    admin.write_text("admin-key\r\n")
    s = settings_from_args(parse(["--index", str(tmp_path), "--api-key-file", str(key)]))
    assert s.api_key.get_secret_value() == "read-key" and s.api_key_file == key and s.admin_api_key is None
    monkeypatch.setenv("SPANSEEK_ADMIN_API_KEY_FILE", str(admin))
    s = settings_from_args(parse(["--index", str(tmp_path), "--writes"]))
    assert s.admin_api_key.get_secret_value() == "admin-key" and s.api_key is None
    key.write_text("changed")  # read once: settings made before keep the key they read
    assert s.admin_api_key.get_secret_value() == "admin-key"
    monkeypatch.setenv("SPANSEEK_ADMIN_API_KEY_FILE", "")  # empty, as compose passes an unset variable: no file
    assert Settings(index=tmp_path).admin_api_key is None
    assert main(["serve", "--index", str(tmp_path), "--api-key", "flag-key", "--api-key-file", str(key)]) == 2
    err = capsys.readouterr().err
    assert ("invalid settings: api_key and api_key_file are both given at one level (both as flags, or both as "
            "environment variables); give the key one way (the file keeps it out of the command line) (--api-key / "
            "SPANSEEK_API_KEY, --api-key-file / SPANSEEK_API_KEY_FILE)") in err
    assert "flag-key" not in err and "changed" not in err and len(err.strip().splitlines()) == 1
    monkeypatch.setenv("SPANSEEK_API_KEY", "env-key")
    monkeypatch.setenv("SPANSEEK_API_KEY_FILE", str(key))
    assert main(["serve", "--index", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "api_key and api_key_file are both given at one level" in err and "env-key" not in err
    monkeypatch.delenv("SPANSEEK_API_KEY")
    monkeypatch.delenv("SPANSEEK_API_KEY_FILE")
    key.write_text("")
    assert main(["serve", "--index", str(tmp_path), "--api-key-file", str(key)]) == 2
    assert (f"api_key_file: key file {key}: holds no key (it is empty or blank) (--api-key-file / "
            f"SPANSEEK_API_KEY_FILE)") in capsys.readouterr().err
    assert main(["serve", "--index", str(tmp_path), "--admin-api-key-file", str(tmp_path / "none")]) == 2
    assert f"key file {tmp_path / 'none'}: no such file" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["api_key", "admin_api_key"])
def test_a_flag_overrides_a_key_or_key_file_in_the_environment_either_way(tmp_path, monkeypatch, name):
    """Flags over the environment over the defaults, for a key as for every setting: a key and its file are one
    setting, so the flag of either overrides the variable of either (--api-key-file beside SPANSEEK_API_KEY was
    refused as "both given", while --api-key beside SPANSEEK_API_KEY_FILE was too, and --api-key beside
    SPANSEEK_API_KEY won)."""
    for other in ("API_KEY", "ADMIN_API_KEY", "API_KEY_FILE", "ADMIN_API_KEY_FILE"):
        monkeypatch.delenv(f"SPANSEEK_{other}", raising=False)
    flag, variable = f"--{name.replace('_', '-')}", f"SPANSEEK_{name.upper()}"
    env_file, flag_file = tmp_path / "env-key", tmp_path / "flag-key"
    env_file.write_text("env-file-key\n")
    flag_file.write_text("flag-file-key\n")

    def key(*args: str) -> tuple[str | None, Path | None]:
        s = settings_from_args(parse(["--index", str(tmp_path), *args]))
        secret = getattr(s, name)
        return (None if secret is None else secret.get_secret_value()), getattr(s, f"{name}_file")

    monkeypatch.setenv(variable, "env-key")
    assert key(f"{flag}-file", str(flag_file)) == ("flag-file-key", flag_file)
    assert key(flag, "flag-key") == ("flag-key", None)
    assert key() == ("env-key", None)
    monkeypatch.delenv(variable)
    monkeypatch.setenv(f"{variable}_FILE", str(env_file))
    assert key(flag, "flag-key") == ("flag-key", None)
    assert key(f"{flag}-file", str(flag_file)) == ("flag-file-key", flag_file)
    assert key() == ("env-file-key", env_file)
    assert key(flag, "") == ("env-file-key", env_file)  # an empty flag gives no key, as an empty variable


def test_a_key_file_may_be_a_pipe(tmp_path, monkeypatch):
    """``spanseek serve --api-key-file <(pass show spanseek)``: the key from a secret manager through a pipe, read
    once when the settings are made (it was refused as "not a regular file")."""
    monkeypatch.delenv("SPANSEEK_API_KEY", raising=False)
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"piped-key\n")
        os.close(write_end)
        s = settings_from_args(parse(["--index", str(tmp_path), "--api-key-file", f"/dev/fd/{read_end}"]))
    finally:
        os.close(read_end)
    assert s.api_key.get_secret_value() == "piped-key"


def test_serve_warns_of_a_key_on_its_command_line_and_of_a_key_file_others_may_read(tiny_index, tiny_model_dir,
                                                                                    tmp_path, monkeypatch, capfd):
    import logging
    import socket

    import uvicorn

    from spanseek.cli import main
    from spanseek.service import cli

    monkeypatch.setattr(cli, "check_servable", lambda settings: tiny_model_dir)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)
    key = tmp_path / "key"
    key.write_text("file-key\n")
    key.chmod(0o600)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = ["serve", "--index", str(tiny_index), "--port", str(port)]
    assert main([*start, "--api-key-file", str(key)]) == 0
    assert "WARNING" not in capfd.readouterr().err
    key.chmod(0o644)
    assert main([*start, "--api-key-file", str(key), "--admin-api-key", "cli-key"]) == 0
    warnings = [line for line in capfd.readouterr().err.splitlines() if "WARNING" in line]
    assert len(warnings) == 2 and not any("cli-key" in w or "file-key" in w for w in warnings)
    assert ("--admin-api-key puts the key on the command line, which `ps` shows to every user of this machine: give "
            "it in a file readable by you only (--admin-api-key-file) or in SPANSEEK_ADMIN_API_KEY") in warnings[1]
    assert (f"--api-key-file / SPANSEEK_API_KEY_FILE: key file {key} can be read or changed by users other than its "
            f"owner (mode -rw-r--r--); `chmod 600 {key}` keeps the key to its owner") in warnings[0]
    logging.getLogger().handlers.clear()  # (the command configured the root logger)


def test_serve_refuses_a_search_device_this_machine_lacks_in_one_line(tiny_index, tiny_model_dir, capsys):
    """It warned and served from the CPU (the encoder's ``--device`` was refused the same way). The address is bound
    first: a free port, so that a server on the default one is not what the command refuses."""
    import socket

    from spanseek.cli import main

    with pytest.raises(ValueError, match=r"--search-device / SPANSEEK_SEARCH_DEVICE: search_device 'cuda:99'"):
        check_servable(Settings(index=tiny_index, model=str(tiny_model_dir), device="cpu", search_device="cuda:99"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["serve", "--index", str(tiny_index), "--model", str(tiny_model_dir), "--device", "cpu",
                 "--search-device", "cuda:99", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("spanseek serve: error: --search-device / SPANSEEK_SEARCH_DEVICE: search_device 'cuda:99'")
    assert len(err.strip().splitlines()) == 1


def _loading_forever(gate, entered):
    """A searcher factory that blocks its thread until ``gate`` is set, as reading a large index does (``entered`` is
    set once it has begun)."""

    def factory(settings):
        entered.set()
        gate.wait(30)
        raise RuntimeError("gave up")

    return factory


async def test_a_stopped_server_names_its_threads_still_loading_and_waits_for_none_that_ended(settings_for):
    """``spanseek serve`` exits once the server has stopped: the threads of the app that still run a job (the load
    of the index, here held) are named, and one that ends meanwhile is waited for (``unfinished``)."""
    import threading

    from spanseek.service.app import create_app

    gate, entered = threading.Event(), threading.Event()
    app = create_app(settings_for(), _loading_forever(gate, entered))
    state = app.state.service
    async with app.router.lifespan_context(app):
        deadline = time.monotonic() + 10
        while not entered.is_set():  # the load reads the index (a thread started before is idle between its steps)
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
    t0 = time.process_time()
    [busy] = state.unfinished(0.1)
    assert busy.startswith("spanseek-encode_0 (_loading_forever.<locals>.factory, "), busy  # (the tests' factory)
    gate.set()
    assert state.unfinished(10) == []
    assert time.process_time() - t0 < 1


async def test_a_stopped_server_names_the_job_each_busy_thread_runs(settings_for, counting_factory, hold_worker,
                                                                    until, caplog, monkeypatch):
    """The warning of a server exiting past its threads names what each one runs: a search batch held in the encoder
    was "still loading" (as was anything else), which sent operators looking for a slow index."""
    import functools
    import logging

    import httpx

    from spanseek.service import server
    from spanseek.service.app import create_app
    from spanseek.service.logs import in_this_context, with_request_ids
    from spanseek.service.pools import job_name
    from spanseek.service.reload import default_reopener

    factory, encoder = counting_factory(block=True)
    app = create_app(settings_for(pipeline="off"), factory)
    state = app.state.service
    exits: list[int] = []
    monkeypatch.setattr(server.os, "_exit", exits.append)
    monkeypatch.setattr(server.atexit, "_run_exitfuncs", lambda: None)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=30) as client:
                await until(lambda: state.status == "ready")
                (await hold_worker(client, encoder)).cancel()
        with caplog.at_level(logging.WARNING, logger="spanseek.service"):
            server.exit_past_unfinished_work(app, wait_s=0.1, status=3)
    finally:
        encoder.gate.set()
    assert exits == [3]
    [line] = [r.getMessage() for r in caplog.records if "not waiting" in r.getMessage()]
    assert "the jobs still running: spanseek-encode_0 (a search batch, 0 s)" in line and "loading" not in line, line
    # what runs inside a partial, a batcher's step or a copied context is named, and an unknown job by its name
    assert job_name(functools.partial(with_request_ids, ["id"]), (job_name, 1)) == "job_name"
    assert job_name(in_this_context(server.bind_sockets), ("::", 0)) == "bind_sockets"
    assert job_name(default_reopener, ()) == "loading an index to reload"


def test_exit_past_unfinished_work_ends_the_process_only_while_a_thread_still_runs(monkeypatch):
    from types import SimpleNamespace

    from spanseek.service import server

    exits = []
    monkeypatch.setattr(server.os, "_exit", exits.append)
    monkeypatch.setattr(server.atexit, "_run_exitfuncs", lambda: exits.append("exit handlers"))
    busy = SimpleNamespace(state=SimpleNamespace(service=SimpleNamespace(unfinished=lambda wait_s: ["spanseek-reload_0"])))
    idle = SimpleNamespace(state=SimpleNamespace(service=SimpleNamespace(unfinished=lambda wait_s: [])))
    server.exit_past_unfinished_work(idle)
    server.exit_past_unfinished_work(object())  # an app without the service's state (tests' own apps)
    assert exits == []
    server.exit_past_unfinished_work(busy)
    assert exits == ["exit handlers", 0]


@pytest.mark.slow
def test_exiting_past_unfinished_work_still_exports_the_last_spans(tmp_path):
    """The process ended by ``exit_past_unfinished_work`` runs what an exit runs (but the wait for threads): the
    spans of the requests answered as the server stopped are exported (the tracer provider exports them at exit),
    where they were lost with the process, the logs alone flushed."""
    import subprocess
    import sys

    pytest.importorskip("opentelemetry.sdk.trace")
    script = tmp_path / "exit.py"
    script.write_text(
        "import sys\n"
        "from types import SimpleNamespace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter\n"
        "from spanseek.service.server import exit_past_unfinished_work\n"
        "provider = TracerProvider()\n"
        "provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stdout), schedule_delay_millis=60000))\n"
        "provider.get_tracer('test').start_span('answered-as-it-stopped').end()\n"
        "busy = SimpleNamespace(unfinished=lambda wait_s: ['spanseek-reload_0'])\n"
        "exit_past_unfinished_work(SimpleNamespace(state=SimpleNamespace(service=busy)))\n"
        "print('not reached')\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "answered-as-it-stopped" in done.stdout and "not reached" not in done.stdout, done.stdout
    assert "not waiting for the jobs still running: spanseek-reload_0; exiting" in done.stderr


@pytest.mark.slow
def test_sigterm_while_the_index_loads_exits_at_once(tiny_index, tiny_model_dir, tmp_path):
    """SIGTERM to ``spanseek serve`` while it reads its index: the process exits within seconds, where it logged
    "stopped" at once and then waited for the read to end (23 s for the 325 MB demo index on a loaded machine; a
    large index, minutes)."""
    import signal
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "serve.py"
    script.write_text(
        "import sys, threading, time\n"
        "from spanseek.service import app, cli\n"
        "cli.check_servable = lambda settings: settings.model\n"
        "def slow(settings):\n"
        "    print('loading', file=sys.stderr, flush=True)\n"
        "    time.sleep(60)\n"
        "app.default_searcher_factory = slow\n"
        "from spanseek.cli import main\n"
        f"sys.exit(main(['serve', '--index', {str(tiny_index)!r}, '--model', {str(tiny_model_dir)!r}, "
        f"'--port', '{port}']))\n")
    env = {**os.environ, "SPANSEEK_DEVICE": "cpu", "SPANSEEK_PRECISION": "fp32"}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while not any("loading" == line.strip() for line in lines):
            line = proc.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=50)
        took = time.monotonic() - t0
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert took < 15, took  # (the load would have gone on for a minute)
    assert "not waiting for spanseek-encode_0, still loading: exiting" in err

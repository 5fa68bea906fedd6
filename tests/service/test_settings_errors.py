"""`spanseek serve` refuses every bad setting with one line naming the flag and the variable (status 2, no traceback),
before the model loads: values, settings that contradict each other, what the paths name, the listen address.

    .venv/bin/python -m pytest -q tests/service/test_settings_errors.py
"""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from spanseek.core.phrase_index import IndexFormatError
from spanseek.service import server
from spanseek.service.cli import check_servable
from spanseek.service.settings import Settings


def serve_error(argv: list[str], capsys) -> str:
    """The one error line of ``spanseek serve ARGV``, which must exit with status 2."""
    from spanseek.cli import main

    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("spanseek serve: error: ") and len(err.strip().splitlines()) == 1, err
    return err.strip()


# Each was accepted before: the service started and then answered 500s, never protected, or quietly differed.
@pytest.mark.parametrize(("env", "flags", "message"), [
    # an infinite Retry-After was a 500; an infinite header timeout turned the slowloris protection off
    ({"SPANSEEK_RELOAD_MIN_INTERVAL_S": "inf"}, [],
     "--reload-min-interval-s / SPANSEEK_RELOAD_MIN_INTERVAL_S: Input should be a finite number (got inf)"),
    ({"SPANSEEK_HEADER_TIMEOUT_S": "1e400"}, [],
     "--header-timeout-s / SPANSEEK_HEADER_TIMEOUT_S: Input should be a finite number (got 1e400)"),
    ({}, ["--max-request-cost", "inf"], "--max-request-cost / SPANSEEK_MAX_REQUEST_COST: Input should be a finite"),
    # torch took 10^5 threads; faiss refuses an nprobe past 2^64 (a 500 per request)
    ({"SPANSEEK_TORCH_THREADS": "100000"}, [],
     "--torch-threads / SPANSEEK_TORCH_THREADS: Input should be less than or equal to 1024 (got 100000)"),
    ({}, ["--max-nprobe", str(10**20)], "--max-nprobe / SPANSEEK_MAX_NPROBE: Input should be less than or equal to"),
    # an empty host listened on every interface; an empty index was the working directory
    ({"SPANSEEK_HOST": ""}, [], "--host / SPANSEEK_HOST: must not be empty"),
    ({"SPANSEEK_MODEL": " "}, [], "--model / SPANSEEK_MODEL: must not be empty"),
    # a path or a trailing slash never matches the Origin a browser sends
    ({"SPANSEEK_CORS_ORIGINS": "https://app.example.com/,https://b.example.com"}, [],
     "--cors-origins / SPANSEEK_CORS_ORIGINS: 'https://app.example.com/' is not an origin"),
    ({"SPANSEEK_CORS_ORIGINS": "[https://a.example.com"}, [],
     "--cors-origins / SPANSEEK_CORS_ORIGINS: not a JSON list of origins"),  # was "Value error, Expecting value"
    ({"SPANSEEK_WARMUP": "nope"}, [], "--no-warmup / SPANSEEK_WARMUP: Input should be a valid boolean"),  # no --warmup
    # contradictions, each followed by the flags and variables of the settings it names
    ({"SPANSEEK_MAX_BATCH_SIZE": "1024"}, [],
     "max_batch_size (1024) exceeds max_queue (512): batches are cut from the queue, so none could be that large "
     "(--max-batch-size / SPANSEEK_MAX_BATCH_SIZE, --max-queue / SPANSEEK_MAX_QUEUE)"),
    ({}, ["--max-top-k", "500"],
     "max_top_k (500) exceeds max_offset_top_k (200): a top_k above max_offset_top_k is refused even at offset 0 "
     "(--max-top-k / SPANSEEK_MAX_TOP_K, --max-offset-top-k / SPANSEEK_MAX_OFFSET_TOP_K)"),
    ({}, ["--max-queries-per-request", "128"],
     "max_request_cost (64) is below max_queries_per_request (128): a request of that many questions would always "
     "be refused for its cost (--max-request-cost / SPANSEEK_MAX_REQUEST_COST, --max-queries-per-request / "
     "SPANSEEK_MAX_QUERIES_PER_REQUEST)"),
    # a cap the process that reads uploads cannot start under: every upload's reader stopped
    ({"SPANSEEK_FILE_READ_MEMORY_BYTES": "1000000"}, [],
     "--file-read-memory-bytes / SPANSEEK_FILE_READ_MEMORY_BYTES: 1,000,000 bytes is too little for the process "
     "that reads files to start"),
    # keys no client can send: every request was a 401
    ({"SPANSEEK_API_KEY": "s3cret\n"}, [], "--api-key / SPANSEEK_API_KEY: the key begins or ends with whitespace"),
    ({"SPANSEEK_ADMIN_API_KEY": "clé"}, [], "--admin-api-key / SPANSEEK_ADMIN_API_KEY: the key holds characters an "
                                            "HTTP header cannot carry"),
    ({"SPANSEEK_API_KEY": ""}, ["--writes"],  # every write was a 403
     "writes need a key (admin_api_key or api_key): without one every write is refused (403) (--writes / "
     "SPANSEEK_WRITES, --admin-api-key / SPANSEEK_ADMIN_API_KEY, --api-key / SPANSEEK_API_KEY)"),
    ({}, ["--default-top-k", "50", "--max-top-k", "10"],
     "default_top_k (50) exceeds max_top_k (10) (--default-top-k / SPANSEEK_DEFAULT_TOP_K, "
     "--max-top-k / SPANSEEK_MAX_TOP_K)"),
])
def test_a_bad_setting_is_one_line_naming_it(tmp_path, monkeypatch, capsys, env, flags, message):
    """Refused before anything is read (the index here does not exist: its error would come later)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    err = serve_error(["--index", str(tmp_path / "none"), *flags], capsys)
    assert err.startswith("spanseek serve: error: invalid settings: ") and message in err, err
    assert "Value error" not in err
    assert "s3cret" not in err and "clé" not in err  # a key is never shown


def test_the_reading_memory_bound_is_the_reading_process_s_own(tmp_path, monkeypatch):
    """The least file_read_memory_bytes was defined twice (here and for from-files' --read-memory-bytes in
    indexer.read_process), free to drift apart: the service's follows the reading process's."""
    from spanseek.indexer import read_process

    assert Settings(index=tmp_path, file_read_memory_bytes=read_process.MIN_READ_MEMORY).file_read_memory_bytes
    monkeypatch.setattr(read_process, "MIN_READ_MEMORY", 512 << 20)
    with pytest.raises(ValueError, match="give at least 536,870,912"):
        Settings(index=tmp_path, file_read_memory_bytes=300 << 20)
    assert Settings(index=tmp_path, file_read_memory_bytes=0).file_read_memory_bytes == 0  # 0: no limit


def test_a_missing_setting_is_named_without_the_others(monkeypatch, capsys):
    """Before: `--index / SPANSEEK_INDEX: Field required (got {'port': '18766'})`, every other setting as a dict."""
    monkeypatch.delenv("SPANSEEK_INDEX", raising=False)
    err = serve_error(["--port", "18766"], capsys)
    assert err == "spanseek serve: error: invalid settings: --index / SPANSEEK_INDEX: Field required", err


def test_an_empty_optional_setting_is_unset(monkeypatch, tmp_path):
    """As compose passes an unset variable: ``SPANSEEK_READER=`` was the reader directory ``.``, ``SPANSEEK_LIVE_DIR=``
    the working directory, and an empty nprobe or thread count was refused."""
    for name in ("READER", "LIVE_DIR", "DEFAULT_NPROBE", "TORCH_THREADS"):
        monkeypatch.setenv(f"SPANSEEK_{name}", "")
    s = Settings(index=tmp_path)
    assert (s.reader, s.live_dir, s.default_nprobe, s.torch_threads) == (None, None, None, None)
    assert Settings(index=tmp_path, cors_origins="*, https://a.example.com:8443").cors_origins == [
        "*", "https://a.example.com:8443"]


@pytest.fixture
def unfitted_reader(tmp_path):
    """The bundled reader without its fitted reading.json."""
    from spanseek.core.reader import READER_CONFIG_NAME, READER_WEIGHTS_NAME, resolve_reader

    reader = tmp_path / "reader"
    reader.mkdir()
    for name in (READER_CONFIG_NAME, READER_WEIGHTS_NAME):
        (reader / name).symlink_to(resolve_reader("default") / name)
    return reader


# Each started the service, which then answered 503 on /ready for good (its loading failed). A value in <> is the
# path of that fixture.
@pytest.mark.parametrize(("update", "error", "message"), [
    ({"model": "<filter_model_dir>"}, IndexFormatError,
     r"^--model / SPANSEEK_MODEL '.*filter': .*index was built with a different model .*\(it was built with the model "
     r"'.*tiny'\)$"),
    ({"reader": "<unfitted_reader>"}, ValueError,
     r"^--reader / SPANSEEK_READER: .*reader has no reading.json \(fit one with `spanseek train fit-reading`\)$"),
    ({"device": "gpu"}, ValueError, r"^--device / SPANSEEK_DEVICE: device must be auto, cpu, cuda or cuda:N"),
    ({"device": "cuda:99"}, ValueError, r"^--device / SPANSEEK_DEVICE: device 'cuda:99': "),  # on any machine
    ({"runtime": "onnx", "precision": "bf16"}, ValueError,
     r"^--runtime / SPANSEEK_RUNTIME with --precision / SPANSEEK_PRECISION bf16: runtime onnx runs fp32 on a CPU"),
])
def test_serve_names_what_would_fail_only_once_loaded(request, tiny_index, tiny_model_dir, update, error, message):
    """From the manifest, configs and fingerprints: no weights are loaded."""
    settings = Settings(index=tiny_index, model=str(tiny_model_dir), device="cpu")
    check_servable(settings)  # the good case passes
    update = {k: str(request.getfixturevalue(v[1:-1])) if v.startswith("<") else v for k, v in update.items()}
    with pytest.raises(error, match=message):
        check_servable(settings.model_copy(update=update))


def test_serve_refuses_a_live_directory_of_writes_made_over_another_index(tiny_index, tiny_model_dir, tmp_path):
    """Before, the service replayed them over this index, or served the base a merge had made from the other one
    (a compose volume kept across a change of the mounted index)."""
    import json

    from spanseek.indexer.live import LiveStoreError, index_digest

    live = tmp_path / "live"
    (live / "wal").mkdir(parents=True)
    (live / "wal" / "wal-000001.jsonl").write_text('{"op": "delete", "ids": ["d0"]}\n')  # a write to lose
    settings = Settings(index=tiny_index, model=str(tiny_model_dir), device="cpu", writes=True, api_key="k",
                        live_dir=live)
    for digest, ok in ((index_digest(tiny_index), True), ("0" * 32, False)):
        state = {"index": digest, "base": None, "wals": ["wal-000001.jsonl"], "merges": 0}
        (live / "state.json").write_text(json.dumps(state))
        if ok:
            check_servable(settings)
            continue
        with pytest.raises(LiveStoreError, match=rf"^{live / 'state.json'}: its writes were made over another index "
                                                 rf"than {tiny_index} .* or move {live} away to serve {tiny_index} "
                                                 "without them$"):
            check_servable(settings)


@pytest.fixture
def busy_port():
    """A port another socket listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


def test_a_port_in_use_is_refused_first(busy_port, tmp_path, capsys):
    """Before, uvicorn started the app (and its loading), logged the error among its start-up lines and exited 3;
    now the address is bound first: the port is named before the index (missing here) is looked at."""
    err = serve_error(["--index", str(tmp_path / "none"), "--port", str(busy_port)], capsys)
    assert err == (f"spanseek serve: error: --host / --port (SPANSEEK_HOST / SPANSEEK_PORT): cannot listen on "
                   f"127.0.0.1:{busy_port}: address already in use")


def test_an_address_that_cannot_be_bound_or_resolved_names_the_host(monkeypatch):
    with pytest.raises(ValueError, match=r"^--host / --port .*: cannot listen on 192\.0\.2\.1:8000: cannot assign"):
        server.bind_sockets("192.0.2.1", 8000)  # TEST-NET-1: no interface of this machine has it

    def no_such_name(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    with pytest.raises(ValueError, match=r"^--host / SPANSEEK_HOST: cannot listen on 'nosuch\.invalid': Name or "):
        server.bind_sockets("nosuch.invalid", 8000)


def test_bound_sockets_listen_at_once_so_a_second_server_is_refused_at_its_bind():
    """The first server's sockets listen from the start: a second one started meanwhile on the port (SO_REUSEADDR
    lets two sockets bind an address nobody listens on) is refused at its own bind, naming the setting, rather than
    later inside uvicorn; a client connecting meanwhile waits in the backlog instead of being refused."""
    sockets = server.bind_sockets("127.0.0.1", 0)
    try:
        assert [s.family for s in sockets] == [socket.AF_INET]
        port = sockets[0].getsockname()[1]
        with pytest.raises(ValueError, match=rf"--host / --port .*cannot listen on 127\.0\.0\.1:{port}: address "
                                             "already in use"):
            server.bind_sockets("127.0.0.1", port)
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        for s in sockets:
            s.close()


def test_the_bound_sockets_are_closed_when_the_server_fails_to_start(tiny_index, tiny_model_dir, monkeypatch):
    """uvicorn closes its sockets only once it has started: a start-up that fails inside it (its lifespan's exit
    status 3) leaves them to serve, which closes them, so an in-process caller gets the port back."""
    import uvicorn

    from spanseek.cli import main
    from spanseek.service import app, cli

    sockets = server.bind_sockets("127.0.0.1", 0)
    port = sockets[0].getsockname()[1]
    monkeypatch.setattr(server, "bind_sockets", lambda host, p: sockets)
    monkeypatch.setattr(cli, "check_servable", lambda settings: tiny_model_dir)
    stand_in = SimpleNamespace(state=SimpleNamespace(service=SimpleNamespace(status="starting")))  # the app serve holds
    monkeypatch.setattr(app, "create_app", lambda settings, **kwargs: stand_in)
    monkeypatch.setattr(server, "server_config", lambda *args: None)

    def fails(self, sockets=None):
        raise SystemExit(3)

    monkeypatch.setattr(uvicorn.Server, "__init__", lambda self, config: None)
    monkeypatch.setattr(uvicorn.Server, "run", fails)
    with pytest.raises(SystemExit):
        main(["serve", "--index", str(tiny_index), "--model", str(tiny_model_dir), "--port", str(port)])
    assert all(s.fileno() == -1 for s in sockets)  # closed
    server.bind_sockets("127.0.0.1", port)[0].close()  # the port is free again


def test_an_address_family_the_kernel_lacks_is_skipped(monkeypatch):
    """As asyncio does: a host that resolves to IPv6 too, on a kernel without IPv6, is served on its IPv4 address;
    with no family at all left, one line names the host."""
    real_socket, real_getaddrinfo = socket.socket, socket.getaddrinfo

    def no_ipv6(family=socket.AF_INET, *args, **kwargs):
        if family == socket.AF_INET6:
            raise OSError(97, "Address family not supported by protocol")
        return real_socket(family, *args, **kwargs)

    def both(host, port, *args, **kwargs):
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", port, 0, 0)),
                *real_getaddrinfo("127.0.0.1", port, *args, **kwargs)]

    monkeypatch.setattr(server.socket, "socket", no_ipv6)
    monkeypatch.setattr(server.socket, "getaddrinfo", both)
    sockets = server.bind_sockets("localhost", 0)
    try:
        assert [s.family for s in sockets] == [socket.AF_INET]
    finally:
        for s in sockets:
            s.close()
    monkeypatch.setattr(server.socket, "getaddrinfo", lambda host, port, *a, **k: both(host, port, *a, **k)[:1])
    with pytest.raises(ValueError, match="--host / SPANSEEK_HOST: cannot listen on 'localhost': none of its"):
        server.bind_sockets("localhost", 0)


def test_a_mistyped_variable_is_warned_of():
    """It was ignored without a word (SPANSEEK_MAX_BATCHSIZE=64 served batches of 16); the compose file's and the
    demo's own SPANSEEK_* variables are left alone."""
    others = ["SPANSEEK_INDEX_DIR", "SPANSEEK_MODEL_DIR", "SPANSEEK_INDEX_ALIAS", "SPANSEEK_PUBLISH",
              "SPANSEEK_ONNX_CACHE", "SPANSEEK_ONNX_CACHE_BYTES", "SPANSEEK_DOCKER_CACHE", "SPANSEEK_DEMO_PORT", "SPANSEEK_DEMO_HOST",
              "SPANSEEK_DEMO_MODEL", "SPANSEEK_DEMO_INDEX", "SPANSEEK_DEMO_NO_SERVE", "SPANSEEK_MAX_BATCH_SIZE"]
    from spanseek.service import cli

    assert cli.unknown_settings({**dict.fromkeys(others, "1"), "SPANSEEK_MAX_BATCHSIZE": "64", "PATH": "/bin"}) == [
        "SPANSEEK_MAX_BATCHSIZE is not a setting, and is ignored: did you mean SPANSEEK_MAX_BATCH_SIZE?"]


def test_a_mistyped_variable_is_named_when_the_settings_fail(monkeypatch, capsys):
    """A setting missing or wrong because its variable was mistyped named the typo (before: `--index /
    SPANSEEK_INDEX: Field required`, and the warning that said why came only once the server started)."""
    monkeypatch.delenv("SPANSEEK_INDEX", raising=False)
    monkeypatch.setenv("SPANSEEK_INDX", "work/idx")
    err = serve_error(["--port", "18766"], capsys)
    assert err == ("spanseek serve: error: invalid settings: --index / SPANSEEK_INDEX: Field required; SPANSEEK_INDX "
                   "is not a setting, and is ignored: did you mean SPANSEEK_INDEX?"), err


def test_a_mistyped_variable_is_warned_of_before_the_index_is_checked(monkeypatch, tmp_path, capsys):
    """The warning came after the checks of the index, the model and the address, so a server refused for one of
    them never said that the variable meant to set it was ignored."""
    from spanseek.cli import main

    monkeypatch.setenv("SPANSEEK_MAX_BATCHSIZE", "64")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["serve", "--index", str(tmp_path / "nowhere"), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert "SPANSEEK_MAX_BATCHSIZE is not a setting, and is ignored: did you mean SPANSEEK_MAX_BATCH_SIZE?" in err, err
    assert err.strip().splitlines()[-1].startswith("spanseek serve: error: "), err


def test_a_live_dir_that_cannot_be_written_is_refused_before_the_model_loads(tiny_index, tiny_model_dir, tmp_path,
                                                                             monkeypatch, capsys):
    """The service started, and its loading failed when the live store made its log (NotADirectoryError), a 503 on
    /ready for good; now `spanseek serve --writes` refuses it at once (a path under a file fails for root too)."""
    from spanseek.service import app

    def loads(*args, **kwargs):
        raise AssertionError("the app (and its model) would load")

    monkeypatch.setattr(app, "create_app", loads)
    monkeypatch.setattr(server, "bind_sockets", lambda host, port: [])  # no port needed
    (tmp_path / "a-file").write_text("")
    err = serve_error(["--index", str(tiny_index), "--model", str(tiny_model_dir), "--device", "cpu", "--writes",
                       "--api-key", "k", "--live-dir", str(tmp_path / "a-file" / "live")], capsys)
    assert err == (f"spanseek serve: error: --live-dir / SPANSEEK_LIVE_DIR: the live directory of --writes: "
                   f"{tmp_path}/a-file/live cannot be made: {tmp_path}/a-file is a file, not a directory")


@pytest.mark.parametrize(("live", "unwritable", "message"), [
    ("a-file", None, "{t}/a-file is a file, not a directory"),
    ("live", None, "{t}/live/wal is a file, not a directory"),  # its wal/ (the log's folder) is a file
    ("live", "live", "{t}/live is not writable"),
    ("new/live", "", "{t}/new/live cannot be made: {t} is not writable"),  # "": the folder it would be made in
    (None, "", " (the default: the index path + '.live'): {t}/index.live cannot be made: {t} is not writable"),
])
def test_a_live_dir_is_checked_only_with_writes(tiny_index, tiny_model_dir, tmp_path, monkeypatch, live, unwritable,
                                                message):
    """A file, a file in its place of wal/, a folder root cannot write either (a read-only volume: os.access says so
    for root too, simulated here) where it is or would be made; writes off, it is not looked at."""
    import os
    import shutil

    index = shutil.copytree(tiny_index, tmp_path / "index")  # its default live dir is tmp_path/index.live
    (tmp_path / "a-file").write_text("")
    (tmp_path / "live").mkdir()
    (tmp_path / "live" / "wal").write_text("")
    if unwritable is not None:
        (tmp_path / "live" / "wal").unlink()
        denied = tmp_path / unwritable
        access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != denied and access(path, mode))
    settings = Settings(index=index, model=str(tiny_model_dir), device="cpu",
                        live_dir=None if live is None else tmp_path / live)
    check_servable(settings)  # writes off
    with pytest.raises(ValueError) as caught:
        check_servable(settings.model_copy(update={"writes": True, "api_key": "k"}))
    assert str(caught.value) == ("--live-dir / SPANSEEK_LIVE_DIR: the live directory of --writes"
                                 f"{'' if live is None else ': '}{message.format(t=tmp_path)}")

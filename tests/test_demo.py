"""``make demo`` refuses a port another process listens on, before starting its own service; a bad setting is one
line, not a traceback."""

import socket
import subprocess

import pytest

from spanseek import demo


def test_a_taken_port_is_refused_before_the_service_starts(monkeypatch, tmp_path):
    with socket.socket() as other:  # another server, listening
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"127.0.0.1:{port}.*SPANSEEK_DEMO_PORT={port + 1}"):
            demo.check_port_free("127.0.0.1", port)

        def no_service(*args, **kwargs):
            raise AssertionError("the service was started on a taken port")

        monkeypatch.setattr(subprocess, "Popen", no_service)
        monkeypatch.setenv("SPANSEEK_DEMO_PORT", str(port))
        monkeypatch.setattr(demo, "ensure_index", lambda **kwargs: tmp_path)
        assert demo.main() == 1  # a message, not a traceback
    demo.check_port_free("127.0.0.1", port)  # free again once the other server is gone


@pytest.mark.parametrize("port", ["80a", "0", "70000"])
def test_a_port_that_is_not_one_is_named_before_anything_is_built(monkeypatch, capsys, port):
    """It was a ValueError traceback from int(), after the index was built."""
    monkeypatch.setenv("SPANSEEK_DEMO_PORT", port)
    monkeypatch.setattr(demo, "ensure_index", lambda **kwargs: pytest.fail("built before the port was read"))
    assert demo.main() == 2
    err = capsys.readouterr().err
    assert err == f"spanseek demo: error: SPANSEEK_DEMO_PORT={port!r} is not a port: give a number from 1 to 65535\n"


def test_an_unknown_model_is_one_line_not_a_traceback(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("SPANSEEK_DEMO_MODEL", "no-such-model")
    monkeypatch.setenv("SPANSEEK_DEMO_INDEX", str(tmp_path / "index"))
    assert demo.main() == 2
    err = capsys.readouterr().err
    assert err.startswith("spanseek demo: error: no-such-model: not a spanseek model") and err.count("\n") == 1
    assert not (tmp_path / "index").exists()


def test_ctrl_c_during_the_build_says_how_to_resume(monkeypatch, capsys):
    def interrupted(**kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "ensure_index", interrupted)
    assert demo.main() == 130
    assert "run it again: an index build resumes where it stopped" in capsys.readouterr().err


def test_the_wait_for_the_service_is_announced(monkeypatch, capsys, tmp_path):
    """Between "starting the service" and its answers the demo said nothing for half a minute."""
    class Service:
        returncode = 0

        def poll(self):
            return 0

    def not_ready(base, proc):
        assert "waiting until it is ready" in capsys.readouterr().err  # said before the wait, not after
        raise RuntimeError("the service exited with status 1")

    monkeypatch.setattr(subprocess, "Popen", lambda *args, **kwargs: Service())
    monkeypatch.setattr(demo, "wait_ready", not_ready)
    monkeypatch.setattr(demo, "check_port_free", lambda host, port: None)
    with pytest.raises(RuntimeError, match="exited"):
        demo.serve(tmp_path, "default", "127.0.0.1", 8000)


def test_output_piped_into_a_reader_that_stops_ends_quietly(monkeypatch, capsys, tmp_path):
    """`make demo | head` ended with "spanseek demo: error: [Errno 32] Broken pipe" and status 1 once head had read
    its lines; it ends as the spanseek command does then: status 0, nothing on stderr."""
    def closed_pipe(index, model):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setenv("SPANSEEK_DEMO_NO_SERVE", "1")
    monkeypatch.setattr(demo, "ensure_index", lambda **kwargs: tmp_path)
    monkeypatch.setattr(demo, "print_answers", closed_pipe)
    assert demo.main() == 0
    assert capsys.readouterr().err == ""

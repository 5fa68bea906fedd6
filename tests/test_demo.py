"""``make demo`` refuses a port another process listens on, before starting its own service."""

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

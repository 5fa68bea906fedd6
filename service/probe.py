"""The images' healthcheck: asks the service in this container (or on this host) whether it is ready, at the address
it listens on.

    python -m spanseek.service.probe            # GET /ready; exit status 0 when it answers 200, else 1
    python -m spanseek.service.probe /health

The address comes from SPANSEEK_HOST and SPANSEEK_PORT, as ``spanseek serve`` reads them: a wildcard address is
asked on the loopback address of its family (``0.0.0.0`` on 127.0.0.1, ``::``, which listens on IPv6 alone, on
::1), any other address or name as it is. A fixed 127.0.0.1 never reached a service listening on IPv6 only
(SPANSEEK_HOST=::) or on one address of the host, so such a container was never healthy. Only the standard library
is imported: it runs every few seconds.
"""

from __future__ import annotations

import http.client
import os
import socket
import sys
from collections.abc import Mapping

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8000  # as service.settings.Settings has them
WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1"}  # a wildcard address's loopback address (of its family)


def probe_addresses(host: str, port: int) -> list[tuple[str, int]]:
    """Where to ask a service listening on ``host``:``port``: each address ``spanseek serve`` listens on for it
    (resolved as service.server.bind_sockets resolves it), a wildcard as the loopback address of its family."""
    host = host.strip().removeprefix("[").removesuffix("]")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return [(WILDCARDS.get(host, host), port)]  # the connection's error says why
    return list(dict.fromkeys((WILDCARDS.get(str(info[4][0]), str(info[4][0])), port) for info in infos))


def probe(environ: Mapping[str, str], path: str = "/ready", timeout_s: float = 4.0) -> tuple[bool, str]:
    """Ask ``path`` of the service that the SPANSEEK_HOST and SPANSEEK_PORT of ``environ`` describe: (whether an
    address answered 200, what each said)."""
    try:
        port = int(environ.get("SPANSEEK_PORT") or DEFAULT_PORT)
    except ValueError:
        return False, f"SPANSEEK_PORT is not a port number: {environ['SPANSEEK_PORT']!r}"
    said = []
    for host, _ in probe_addresses(environ.get("SPANSEEK_HOST", DEFAULT_HOST), port):
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
        try:
            connection.request("GET", path)
            answer = connection.getresponse()
            body = answer.read(2000).decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as e:
            said.append(f"{where}: {e}")
            continue
        finally:
            connection.close()
        if answer.status == 200:
            return True, f"{where}: {body}"
        said.append(f"{where}: {answer.status} {body}")
    return False, "; ".join(said)


def main(argv: list[str] | None = None) -> int:
    """``python -m spanseek.service.probe [PATH]``: 0 when the service answers PATH (default /ready) with 200, else
    1, what it said printed (``docker inspect`` shows it)."""
    args = sys.argv[1:] if argv is None else argv
    ok, said = probe(os.environ, args[0] if args else "/ready")
    print(said, file=sys.stdout if ok else sys.stderr)  # noqa: T201  (a command's output)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Deployment files: compose validates with safe defaults, Prometheus config and rules check, the dashboard is sane,\nthe Dockerfiles keep their shape. Runs without Docker (make test-docker builds and runs the images).\n"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "spanseek.json"


def needs(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.skip(f"{binary} not installed (make system-deps installs it)")
    return path


def dashboard_exprs() -> list[str]:
    """Every PromQL expression of the Grafana dashboard."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"] for p in panels for t in p.get("targets", [])]


def compose_config(*files: str, where: Path = DEPLOY, **env: str) -> subprocess.CompletedProcess[str]:
    """``docker-compose config`` of deploy/ (or a copy of it, ``where``) with ``files`` and only ``env`` (plus PATH)
    in the environment."""
    compose = needs("docker-compose")
    args = [a for f in files for a in ("-f", str(where / f))]
    return subprocess.run([compose, *args, "config"], capture_output=True, text=True, timeout=60, cwd=where,
                          env={"PATH": os.environ.get("PATH", ""), **env})


def test_compose_file_validates_with_safe_defaults():
    out = compose_config("docker-compose.yml", GRAFANA_ADMIN_PASSWORD="s3cret")
    assert out.returncode == 0, out.stderr
    services = yaml.safe_load(out.stdout)["services"]
    assert set(services) == {"spanseek", "spanseek-replica", "prometheus", "grafana"}
    # every port on loopback unless told otherwise; the CPU image and no GPU reservation by default
    for name, service in services.items():
        assert all(p.startswith("127.0.0.1:") for p in service["ports"]), name  # host_ip:published:target/tcp
    spanseek = services["spanseek"]
    assert spanseek["image"] == "spanseek:cpu" and "deploy" not in spanseek
    assert spanseek["environment"]["SPANSEEK_API_KEY"] == ""  # unset = empty = no key
    mounts = {v.split(":")[1]: v.split(":")[2] for v in spanseek["volumes"]}  # source:target:mode
    assert mounts == {"/data/index": "ro", "/models/custom": "ro", "/data/live": "rw", "/data/onnx": "rw",
                      "/data/backups": "rw"}
    # SIGTERM's drain (uvicorn's graceful shutdown: 10 s) ends before Docker's SIGKILL
    assert float(str(spanseek["stop_grace_period"]).rstrip("s")) > 10
    assert spanseek["environment"]["SPANSEEK_WRITES"] == "false" and spanseek["environment"]["SPANSEEK_LIVE_DIR"] == "/data/live"
    assert services["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "s3cret"


def test_the_writer_has_a_writable_backup_folder_apart_from_the_index_and_its_writes(tmp_path):
    """With writes on, the live index is the read-only index mount and the spanseek-live volume together, and the
    stack had nowhere to write a `spanseek index snapshot` of them (not in either: refused; the container's own
    layer: lost with it). The writer mounts /data/backups writable: a volume of its own, or a host folder; the images
    make it the service user's (a new volume takes its owner), and the guide's commands use those paths."""
    out = compose_config("docker-compose.yml", GRAFANA_ADMIN_PASSWORD="s3cret")
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load(out.stdout)
    services = config["services"]
    assert "spanseek-backups:/data/backups:rw" in services["spanseek"]["volumes"]
    assert "spanseek-backups" in config["volumes"]
    assert not any(v.split(":")[1] == "/data/backups" for v in services["spanseek-replica"]["volumes"])
    environment = services["spanseek"]["environment"]
    backups = Path("/data/backups")
    for served in (environment["SPANSEEK_INDEX"], environment["SPANSEEK_LIVE_DIR"]):  # where a snapshot may not lie
        assert Path(served) not in (backups, *backups.parents) and backups not in Path(served).parents
    out = compose_config("docker-compose.yml", GRAFANA_ADMIN_PASSWORD="s3cret", SPANSEEK_BACKUP_DIR=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert f"{tmp_path}:/data/backups:rw" in yaml.safe_load(out.stdout)["services"]["spanseek"]["volumes"]
    for name in ("Dockerfile.cpu", "Dockerfile.cuda"):
        text = (ROOT / "docker" / name).read_text()
        assert re.search(r"mkdir -p [^\n]*/data/backups", text) and re.search(r"chown spanseek [^#\n]*/data/backups",
                                                                               text), name
    guide = (ROOT / "docs" / "deploy.md").read_text()
    section = guide[guide.index("### Backing up and restoring the live index"):guide.index("### Alerts")]
    commands = [line for line in section.splitlines() if line.startswith(("docker compose", "SPANSEEK_", "  '"))]
    assert any("index snapshot" in c and "--out /data/backups/" in c for c in commands), commands
    assert any("cp -a /data/backups/" in c and "/data/live/" in c for c in commands), commands
    assert "SPANSEEK_BACKUP_DIR" in section


def test_compose_runs_one_writer_and_read_replicas_following_its_merges():
    """`--scale spanseek=N` with writes on was the only way to more replicas: the fixed host port clashed, and a
    container refused the writer lock exited 2 and was restarted over and over. Now replicas are a service of their
    own: no writes, the writer's pointer polled, the live volume read-only, a loopback port range, started after the
    writer is healthy, scraped by Prometheus with the writer; the writer stands by instead of exiting."""
    out = compose_config("docker-compose.yml", GRAFANA_ADMIN_PASSWORD="x", SPANSEEK_WRITES="true",
                         SPANSEEK_ADMIN_API_KEY="k", SPANSEEK_MAX_BATCH_SIZE="32")
    assert out.returncode == 0, out.stderr
    services = yaml.safe_load(out.stdout)["services"]
    writer, replica = services["spanseek"], services["spanseek-replica"]
    assert replica["profiles"] == ["replicas"] and "profiles" not in writer
    env = replica["environment"]
    assert (env["SPANSEEK_WRITES"], env["SPANSEEK_INDEX"], float(env["SPANSEEK_INDEX_POLL_S"])) == (
        "false", "/data/live/merged", 5.0)
    assert [writer["environment"][f"SPANSEEK_{v}"] for v in ("WRITES", "WRITES_STANDBY")] == ["true", "true"]
    # the replicas get every other setting the writer gets, as given
    same = set(writer["environment"]) - {"SPANSEEK_INDEX", "SPANSEEK_INDEX_POLL_S", "SPANSEEK_WRITES",
                                         "SPANSEEK_WRITES_STANDBY"}
    assert {k: env[k] for k in same} == {k: writer["environment"][k] for k in same}
    assert env["SPANSEEK_MAX_BATCH_SIZE"] == "32" and env["SPANSEEK_ADMIN_API_KEY"] == "k"
    mounts = {v.split(":")[1]: v.split(":")[2] for v in replica["volumes"]}
    assert mounts == {"/data/index": "ro", "/models/custom": "ro", "/data/live": "ro", "/data/onnx": "rw"}
    (port,) = replica["ports"]
    host_ip, published, _ = port.split(":")
    first, last = map(int, published.split("-"))
    assert host_ip == "127.0.0.1" and last - first >= 8 and not first <= 8000 <= last, port
    assert replica["depends_on"] == {"spanseek": {"condition": "service_healthy"}}
    assert replica["restart"] == writer["restart"] and replica["image"] == writer["image"]
    # Prometheus discovers every container of both by their shared network alias, in the job the alerts expect
    alias = {tuple(s["networks"]["default"]["aliases"]) for s in (writer, replica)}
    assert alias == {("spanseek-servers",)}
    (job,) = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]
    assert job["job_name"] == "spanseek"
    assert job["dns_sd_configs"] == [{"names": ["spanseek-servers"], "type": "A", "port": 8000,
                                      "refresh_interval": "15s"}]
    ranged = compose_config("docker-compose.yml", GRAFANA_ADMIN_PASSWORD="x",
                            SPANSEEK_REPLICA_PUBLISH="0.0.0.0:9001-9004", SPANSEEK_REPLICA_POLL_S="2")
    replica = yaml.safe_load(ranged.stdout)["services"]["spanseek-replica"]
    assert replica["ports"] == ["0.0.0.0:9001-9004:8000/tcp"] and replica["environment"]["SPANSEEK_INDEX_POLL_S"] == "2"
    gpu = compose_config("docker-compose.yml", "docker-compose.gpu.yml", GRAFANA_ADMIN_PASSWORD="x")
    replica = yaml.safe_load(gpu.stdout)["services"]["spanseek-replica"]
    assert replica["image"] == "spanseek:cuda" and replica["environment"]["SPANSEEK_DEVICE"] == "cuda"
    assert replica["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]


def test_compose_refuses_without_a_grafana_password():
    for env in ({}, {"GRAFANA_ADMIN_PASSWORD": ""}):
        out = compose_config("docker-compose.yml", **env)
        assert out.returncode != 0 and "set GRAFANA_ADMIN_PASSWORD" in out.stderr, out.stderr


def test_compose_publishes_where_told_and_passes_the_api_key():
    out = compose_config("docker-compose.yml", GRAFANA_ADMIN_PASSWORD="x", SPANSEEK_PUBLISH="0.0.0.0:8080",
                         SPANSEEK_API_KEY="k3y")
    assert out.returncode == 0, out.stderr
    spanseek = yaml.safe_load(out.stdout)["services"]["spanseek"]
    assert spanseek["ports"] == ["0.0.0.0:8080:8000/tcp"]
    assert spanseek["environment"]["SPANSEEK_API_KEY"] == "k3y"


def test_compose_serves_an_alias_in_the_mounted_folder():
    """By default the mount itself is the index; with SPANSEEK_INDEX_ALIAS the service serves that alias inside it."""
    for env, (index, poll) in (({}, ("/data/index/", "0")),
                               ({"SPANSEEK_INDEX_ALIAS": "current", "SPANSEEK_INDEX_POLL_S": "5"},
                                ("/data/index/current", "5"))):
        out = compose_config("docker-compose.yml", GRAFANA_ADMIN_PASSWORD="x", **env)
        assert out.returncode == 0, out.stderr
        environment = yaml.safe_load(out.stdout)["services"]["spanseek"]["environment"]
        assert (environment["SPANSEEK_INDEX"], str(environment["SPANSEEK_INDEX_POLL_S"])) == (index, poll)
    from pathlib import Path

    from spanseek.service.settings import Settings

    assert Settings(index="/data/index/").index == Path("/data/index")  # the trailing slash is harmless


def test_compose_without_its_env_file_stops_naming_the_file(tmp_path):
    """docker-compose v1 needs the file ``env_file`` names: deploy/spanseek.env ships for it. Deleted, or
    SPANSEEK_ENV_FILE naming a file that is not there, the stack does not start with the settings left out: `config`
    (and `up`) stops at once, naming the file it looked for (docs/deploy.md says how to restore it)."""
    folder = tmp_path / "deploy"
    shutil.copytree(DEPLOY, folder, ignore=shutil.ignore_patterns("spanseek.env"))
    for env, missing in (({}, folder / "spanseek.env"), ({"SPANSEEK_ENV_FILE": str(tmp_path / "own.env")},
                                                         tmp_path / "own.env")):
        out = compose_config("docker-compose.yml", where=folder, GRAFANA_ADMIN_PASSWORD="x", **env)
        assert out.returncode != 0 and f"Couldn't find env file: {missing}" in out.stderr, out.stderr


def test_gpu_file_adds_the_cuda_image_and_a_gpu():
    out = compose_config("docker-compose.yml", "docker-compose.gpu.yml", GRAFANA_ADMIN_PASSWORD="x")
    assert out.returncode == 0, out.stderr
    spanseek = yaml.safe_load(out.stdout)["services"]["spanseek"]
    assert spanseek["image"] == "spanseek:cuda" and spanseek["build"]["dockerfile"] == "docker/Dockerfile.cuda"
    assert spanseek["environment"]["SPANSEEK_DEVICE"] == "cuda"
    assert spanseek["environment"]["SPANSEEK_SEARCH_DEVICE"] == "auto"
    devices = spanseek["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]


def test_prometheus_config_and_rules_check():
    promtool = needs("promtool")
    out = subprocess.run([promtool, "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    rules = (DEPLOY / "prometheus" / "alerts.yml").read_text()
    assert "spanseek_request_duration_seconds_bucket" in rules and "histogram_quantile(0.99" in rules


ALERT_TESTS = sorted((DEPLOY / "prometheus").glob("alerts_test*.yml"))


def alert_rules() -> list[dict]:
    return [r for g in yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())["groups"]
            for r in g["rules"]]


def test_alert_rules_pass_their_unit_tests():
    """deploy/prometheus/alerts_test*.yml: each alert fires on the series that should raise it (a replica not ready,
    a replica down beside one that serves, no target at all, a p99 above the CPU or the GPU host's threshold,
    sustained shedding, failing merges and reloads, no thresholds loaded) and not on the others (a CPU host at
    saturation, one merge's slow minute)."""
    promtool = needs("promtool")
    prometheus = DEPLOY / "prometheus"
    out = subprocess.run([promtool, "check", "rules", *(str(prometheus / f) for f in
                          ("alerts.yml", "thresholds.yml", "thresholds-gpu.yml"))],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert [f.name for f in ALERT_TESTS] == ["alerts_test.yml", "alerts_test_gpu.yml", "alerts_test_unset.yml"]
    for path in ALERT_TESTS:
        out = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
    tested = {case["alertname"] for path in ALERT_TESTS for t in yaml.safe_load(path.read_text())["tests"]
              for case in t["alert_rule_test"] if case["exp_alerts"]}
    assert tested == {r["alert"] for r in alert_rules()}  # each alert is tested firing


def test_every_alert_waits_and_says_what_to_do():
    """An alert that fires on one evaluation pages for a blip; one without a runbook leaves the person paged to
    guess."""
    for rule in alert_rules():
        assert rule.get("for", "0m") not in ("0m", "0s"), rule["alert"]
        assert {"summary", "description", "runbook"} <= set(rule["annotations"]), rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]


def test_the_latency_threshold_follows_the_host_and_the_operator():
    """The CPU stack mounts the CPU host's thresholds, the GPU file the GPU host's, SPANSEEK_ALERT_THRESHOLDS a file
    of one's own; prometheus.yml loads them beside the alerts, and each file records the series the alert reads."""
    def mounted(*files: str, **env: str) -> str:
        out = compose_config(*files, GRAFANA_ADMIN_PASSWORD="x", **env)
        assert out.returncode == 0, out.stderr
        volumes = yaml.safe_load(out.stdout)["services"]["prometheus"]["volumes"]
        sources = [v.rsplit(":", 2)[0] for v in volumes if v.split(":")[-2] == "/etc/prometheus/thresholds.yml"]
        assert len(sources) == 1, volumes
        return sources[0]

    assert mounted("docker-compose.yml") == str(DEPLOY / "prometheus" / "thresholds.yml")
    assert mounted("docker-compose.yml", "docker-compose.gpu.yml") == str(DEPLOY / "prometheus" / "thresholds-gpu.yml")
    for files in (("docker-compose.yml",), ("docker-compose.yml", "docker-compose.gpu.yml")):
        assert mounted(*files, SPANSEEK_ALERT_THRESHOLDS="/srv/slo.yml") == "/srv/slo.yml"
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["alerts.yml", "thresholds.yml"]
    thresholds = {}
    for name in ("thresholds.yml", "thresholds-gpu.yml"):
        rules = [r for g in yaml.safe_load((DEPLOY / "prometheus" / name).read_text())["groups"] for r in g["rules"]]
        assert [r["record"] for r in rules] == list(THRESHOLDS.values()), name
        thresholds[name] = [float(re.fullmatch(r"vector\((.+)\)", r["expr"]).group(1)) for r in rules]
    # above a CPU host's p99 at saturation: plain searches 665-709 ms (bench/results/service_load_*.json), searches
    # with read 860 ms on a quiet host and 2.2 s beside other jobs (service_read_small_scan.json,
    # service_read_shared_host_*.json)
    assert thresholds == {"thresholds.yml": [1.0, 2.5], "thresholds-gpu.yml": [0.5, 1.25]}
    for alert, series in THRESHOLDS.items():
        assert series in next(r["expr"] for r in alert_rules() if r["alert"] == alert)


THRESHOLDS = {"SpanseekHighP99Latency": "spanseek:search_p99_threshold_seconds",
              "SpanseekHighReadP99Latency": "spanseek:read_p99_threshold_seconds"}


def test_a_thresholds_file_of_ones_own_without_the_read_threshold_is_warned_of(tmp_path):
    """A copy of thresholds.yml made before the reading searches had a threshold records the plain one only: the
    reading alert could never fire, without a word. SpanseekAlertThresholdsMissing names the series it lacks."""
    promtool = needs("promtool")
    shutil.copy(DEPLOY / "prometheus" / "alerts.yml", tmp_path)
    (tmp_path / "own.yml").write_text(yaml.safe_dump({"groups": [{"name": "own", "rules": [
        {"record": "spanseek:search_p99_threshold_seconds", "expr": "vector(0.8)"}]}]}))
    annotations = next(r["annotations"] for r in alert_rules() if r["alert"] == "SpanseekAlertThresholdsMissing")
    missing = {"exp_labels": {"severity": "warning", "threshold": "spanseek:read_p99_threshold_seconds"},
               "exp_annotations": {**annotations, "description": "No rule records spanseek:read_p99_threshold_seconds."}}
    test = {"rule_files": ["alerts.yml", "own.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "alert_rule_test": [{"eval_time": "15m", "alertname": "SpanseekAlertThresholdsMissing",
                                               "exp_alerts": [missing]}]}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    out = subprocess.run([promtool, "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_dashboard_covers_the_required_panels():
    exprs = "\n".join(dashboard_exprs())
    for needle in ("rate(spanseek_request_duration_seconds_count", "histogram_quantile(0.5,", "histogram_quantile(0.95,",
                   "histogram_quantile(0.99,", "spanseek_stage_duration_seconds", "spanseek_batch_size",
                   "spanseek_queue_depth", "spanseek_errors_total", "sum by (route) (rate(spanseek_errors_total", "spanseek_write_step_wait_seconds_bucket",
                   "spanseek_write_step_duration_seconds_bucket", "spanseek_write_visible_seconds_bucket",
                   "spanseek_merge_duration_seconds_bucket", "spanseek_live_disk_free_bytes"):
        assert needle in exprs, needle
    assert all(re.search(r"spanseek_\w+", e) for e in dashboard_exprs())
    provisioning = (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    assert "uid: prometheus" in provisioning


def test_every_series_of_bytes_is_drawn_in_bytes_and_of_seconds_in_seconds():
    """A query of a series in bytes (``_bytes``) or seconds (``_seconds``, a latency quantile or mean) shows in that
    unit: the panel's, or its own override's where the panel mixes it with counts (the write log's bytes beside the
    segment's documents read "52.1 K", not "52.1 kB")."""
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        overrides = {o["matcher"]["options"]: {p["id"]: p["value"] for p in o["properties"]}
                     for o in panel["fieldConfig"].get("overrides", []) if o["matcher"]["id"] == "byFrameRefID"}
        for target in panel.get("targets", []):
            unit = overrides.get(target["refId"], {}).get("unit", panel["fieldConfig"]["defaults"]["unit"])
            for suffix, expected in (("_bytes", "bytes"), ("_seconds_bucket", "s"), ("_seconds_sum", "s")):
                if re.search(rf"spanseek_\w+{suffix}\b", target["expr"]):
                    assert unit == expected, (panel["title"], target["expr"], unit)


def test_dashboard_reads_the_datasource_it_is_given():
    """Imported into another Grafana, whose Prometheus has another uid, every panel follows the dashboard's
    datasource variable instead of naming the compose stack's uid."""
    dashboard = json.loads(DASHBOARD.read_text())
    (variable,) = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert variable["query"] == "prometheus"
    used = []

    def walk(node):
        if isinstance(node, dict):
            if "datasource" in node:
                used.append(node["datasource"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(dashboard["panels"])
    assert used and all(d == {"type": "prometheus", "uid": "${" + variable["name"] + "}"} for d in used)


def healthcheck_command(dockerfile: str) -> list[str]:
    """The HEALTHCHECK's command of ``docker/DOCKERFILE`` (its exec form)."""
    text = (ROOT / "docker" / dockerfile).read_text()
    found = re.search(r"^HEALTHCHECK .*?\\\n\s*CMD (\[.*\])$", text, re.M)
    assert found, "no HEALTHCHECK ... CMD [...] in exec form"
    return json.loads(found.group(1))


@contextlib.contextmanager
def answering(host: str, status: int) -> Iterator[int]:
    """An HTTP server bound as ``spanseek serve`` binds ``host`` (service.server.bind_sockets, a free port) that
    answers every GET with ``status``; yields its port."""
    import http.server
    import threading

    from spanseek.service.server import bind_sockets

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b'{"status": "ready"}')

        def log_message(self, *args: object) -> None:
            pass

    [sock] = bind_sockets(host, 0)
    server = http.server.HTTPServer(sock.getsockname()[:2], Answer, bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        server.shutdown()
        server.server_close()


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.cuda"])
@pytest.mark.parametrize("host", ["::", "::1", "0.0.0.0", "127.0.0.1"])
def test_the_healthcheck_asks_where_the_service_listens(name, host):
    """The images' healthcheck follows SPANSEEK_HOST: a service listening on IPv6 alone (``::``, ``::1``) was asked
    on 127.0.0.1, refused, and never healthy. It says unhealthy (1) for a 503 and for nothing listening."""
    if ":" in host and not has_ipv6_loopback():
        pytest.skip("no IPv6 loopback here")
    command = healthcheck_command(name)
    assert command[0] == "python" and "/ready" in " ".join(command)
    run = [sys.executable, *command[1:]]
    env = {**os.environ, "SPANSEEK_HOST": host, "PYTHONPATH": os.pathsep.join(sys.path)}
    for status, healthy in ((200, 0), (503, 1)):
        with answering(host, status) as port:
            done = subprocess.run(run, env={**env, "SPANSEEK_PORT": str(port)}, capture_output=True, text=True,
                                  timeout=30)
        assert done.returncode == healthy, (status, done.stdout, done.stderr)
    from spanseek.service.probe import probe

    healthy, said = probe({"SPANSEEK_HOST": host, "SPANSEEK_PORT": str(port)})  # nothing listens there any more
    assert not healthy and "refused" in said, said


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_images_are_multi_stage_non_root_with_a_readiness_healthcheck(name):
    text = (ROOT / "docker" / name).read_text()
    assert len(re.findall(r"^FROM ", text, re.M)) >= 2 and "COPY --from=build" in text
    assert re.search(r"^USER spanseek$", text, re.M)
    assert "HEALTHCHECK" in text and "/ready" in text
    assert '".[serve]"' in text  # the serving role only
    # what an offline build overrides has real-world defaults: the official Python base and a torch index
    assert "ARG BASE_IMAGE=python:3.11-slim-bookworm" in text
    assert set(re.findall(r"^FROM (\S+)", text, re.M)) == {"${BASE_IMAGE}"}
    index = re.search(r"^ARG TORCH_INDEX=(\S+)$", text, re.M)
    assert index and index.group(1).startswith("https://download.pytorch.org/whl/")
    assert index.group(1).endswith("/cpu") == name.endswith("cpu")
    # the classic builder (docker-compose v1) knows no BuildKit syntax directive
    assert not re.search(r"^# *syntax=", text, re.M)
    if name.endswith("cuda"):
        assert "pip uninstall -y faiss-cpu" in text and "faiss-gpu" in text
    # the volumes mounted on these take their owner: the service (not root) writes its log and its graphs there
    assert re.search(r"chown spanseek /data/live /data/onnx", text) and "SPANSEEK_ONNX_CACHE=/data/onnx" in text


def test_build_context_is_filtered_at_the_root():
    # the classic builder reads only <context>/.dockerignore, never docker/<Dockerfile>.dockerignore
    assert not list((ROOT / "docker").glob("*.dockerignore"))
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert ignore[ignore.index("*") + 1:][:1] and "!core" in ignore and "!service" in ignore


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_images_copy_every_package_folder_the_install_needs(name):
    """`pip install .` in the image needs every folder pyproject.toml maps a package to: one left out of the build
    context or the COPY lines fails the image's build ("package directory 'data' does not exist")."""
    import tomllib

    folders = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values())
    copied = set(re.findall(r"^COPY (\S+) \1$", (ROOT / "docker" / name).read_text(), re.M))
    allowed = {line[1:] for line in (ROOT / ".dockerignore").read_text().split() if line.startswith("!")}
    assert folders <= copied and folders <= allowed


def test_the_ready_panel_shows_each_replica_down_not_ready_or_standing_by(tmp_path):
    """The dashboard's Ready stat, evaluated by promtool on series a stack produces, one value a replica: 1 ready, 0 not
    ready or not scraped (a replica Prometheus cannot scrape leaves no spanseek_ready: min(spanseek_ready) stayed 1
    beside it), 2 a standby writer checking the lock while a ready writer of its job takes writes (it showed 0, as a
    failed replica; SpanseekNotReady leaves it out on the same terms), 0 a standby with no such writer or that
    stopped checking."""
    promtool = needs("promtool")
    panel = next(p for p in json.loads(DASHBOARD.read_text())["panels"] if p["title"].startswith("Ready"))
    expr = panel["targets"][0]["expr"]
    # each replica: (instance, job, spanseek_ready or None: not scraped, up, spanseek_writer, standby checks: "now"
    # every minute, "stale" (the last 3 minutes ago) or None); then the panel's value for each
    cases = [
        ([("a", "spanseek", 1, 1, 0, None), ("b", "spanseek", 1, 1, 0, None)], {"a": 1, "b": 1}),
        ([("a", "spanseek", 1, 1, 0, None), ("b", "spanseek", 0, 1, 0, None)], {"a": 1, "b": 0}),
        ([("a", "spanseek", 1, 1, 0, None), ("b", "spanseek", None, 0, 0, None)], {"a": 1, "b": 0}),
        ([("a", "spanseek", None, 0, 0, None)], {"a": 0}),
        ([("w", "spanseek", 1, 1, 1, None), ("s", "spanseek", 0, 1, 0, "now")], {"w": 1, "s": 2}),
        ([("w", "other", 1, 1, 1, None), ("s", "spanseek", 0, 1, 0, "now")], {"w": 1, "s": 0}),
        ([("w", "spanseek", 1, 1, 1, None), ("s", "spanseek", 0, 1, 0, "stale")], {"w": 1, "s": 0}),
        ([("w", "spanseek", 0, 1, 1, None), ("s", "spanseek", 0, 1, 0, "now")], {"w": 0, "s": 0}),
    ]
    checks = {"now": "0+60x5", "stale": "0x5"}  # (evaluated at 3m: the last check 0 s or 180 s before)
    tests = []
    for replicas, want in cases:
        series = []
        for instance, job, ready, up, writer, checked in replicas:
            labels = f'{{instance="{instance}", job="{job}"}}'
            series += [{"series": f"up{labels}", "values": f"{up}x5"},
                       {"series": f"spanseek_writer{labels}", "values": f"{writer}x5"}]
            series += [{"series": f"spanseek_ready{labels}", "values": f"{ready}x5"}] if ready is not None else []
            series += ([{"series": f"spanseek_standby_checked_timestamp_seconds{labels}", "values": checks[checked]}]
                       if checked is not None else [])
        jobs = {instance: job for instance, job, *_ in replicas}
        tests.append({"interval": "1m", "input_series": series, "promql_expr_test": [
            {"expr": expr, "eval_time": "3m", "exp_samples": [
                {"labels": f'{{instance="{i}", job="{jobs[i]}"}}', "value": v} for i, v in want.items()]}]})
    (tmp_path / "empty.yml").write_text("groups: []\n")
    (tmp_path / "test.yml").write_text(yaml.safe_dump({"rule_files": ["empty.yml"], "tests": tests}))
    out = subprocess.run([promtool, "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    defaults = panel["fieldConfig"]["defaults"]
    assert defaults["noValue"] == "no target" and panel["targets"][0]["legendFormat"] == "{{instance}}"
    shown = {int(v): o["text"] for v, o in defaults["mappings"][0]["options"].items()}
    assert shown == {0: "not ready", 1: "ready", 2: "standby"}


ENV_LINE = re.compile(r"^(#\s*)?(SPANSEEK_\w+)=(.*)$")


def env_file_lines() -> dict[str, tuple[bool, str]]:
    """deploy/spanseek.env: each variable it names -> (commented out, value)."""
    lines = (ENV_LINE.match(line) for line in (DEPLOY / "spanseek.env").read_text().splitlines())
    return {m[2]: (m[1] is not None, m[3]) for m in lines if m}


def test_every_setting_can_be_given_to_the_compose_service():
    """Each setting is passed by the compose file's `environment:`, listed in spanseek.env (the env_file it names),
    or fixed by the image (the address it listens on); none in two places, where the compose file's value would
    silently win. Before, settings such as SPANSEEK_KEEP_ALIVE_S never reached the container."""
    from spanseek.service.settings import Settings

    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]["spanseek"]
    gpu = yaml.safe_load((DEPLOY / "docker-compose.gpu.yml").read_text())["services"]["spanseek"]
    passed = set(compose["environment"])
    assert set(gpu["environment"]) <= passed  # the GPU file changes defaults, it passes nothing new
    listed = env_file_lines()
    image = {"SPANSEEK_HOST", "SPANSEEK_PORT"}
    assert all(f"{v}=" in (ROOT / "docker" / f"Dockerfile.{kind}").read_text() for v in image for kind in ("cpu", "cuda"))
    settings = {f"SPANSEEK_{name.upper()}" for name in Settings.model_fields}
    assert not passed & set(listed) and not image & (passed | set(listed))
    assert passed | set(listed) | image == settings, (passed | set(listed) | image) ^ settings
    assert all(commented for commented, _ in listed.values())  # the shipped file changes nothing


def test_the_env_file_gives_each_setting_its_default(tmp_path, monkeypatch):
    """Each line of spanseek.env, uncommented, reads back as the setting's default (its help says it is)."""
    from spanseek.service.settings import Settings

    defaults = Settings(index=tmp_path)
    for var, (_, value) in env_file_lines().items():
        monkeypatch.setenv(var, value)
    read = Settings(index=tmp_path)
    assert {n: getattr(read, n) for n in Settings.model_fields} == {n: getattr(defaults, n) for n in Settings.model_fields}


def test_a_setting_in_the_env_file_reaches_the_service(tmp_path):
    """SPANSEEK_ENV_FILE names a file of one's own; the service gets its settings, and the compose file's own entries
    stay as given in the shell."""
    own = tmp_path / "spanseek.env"
    own.write_text("SPANSEEK_KEEP_ALIVE_S=620\nSPANSEEK_MAX_QUEUE_WAIT_MS=250\n")
    out = compose_config("docker-compose.yml", GRAFANA_ADMIN_PASSWORD="x", SPANSEEK_ENV_FILE=str(own),
                         SPANSEEK_MAX_BATCH_SIZE="32")
    assert out.returncode == 0, out.stderr
    environment = yaml.safe_load(out.stdout)["services"]["spanseek"]["environment"]
    assert environment["SPANSEEK_KEEP_ALIVE_S"] == "620" and environment["SPANSEEK_MAX_QUEUE_WAIT_MS"] == "250"
    assert environment["SPANSEEK_MAX_BATCH_SIZE"] == "32"
    out = compose_config("docker-compose.yml", GRAFANA_ADMIN_PASSWORD="x")  # the shipped file: nothing added
    assert out.returncode == 0, out.stderr
    assert "SPANSEEK_KEEP_ALIVE_S" not in yaml.safe_load(out.stdout)["services"]["spanseek"]["environment"]

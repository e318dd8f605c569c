"""The Helm chart (deploy/helm/gatekeeper), checked with a real helm and a strict offline validator.

helm and ``kubevalidate`` (``deploy/tools/kubevalidate``: strict decoding into the Kubernetes and prometheus-operator
Go types, KEDA's CRD schemas, references between manifests) are built by ``deploy/tools/install.sh`` (conftest.py);
a tool that cannot be built fails these tests. The rendered configuration is loaded by the daemon's own loader.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from gatekeeper.config import ConfigError, Settings, load_settings

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "gatekeeper"
PRODUCTION = CHART / "ci" / "production-values.yaml"
RULES_FILE = CHART / "files" / "prometheus-rules.yaml"
KUBE_VERSION = "1.31.0"
RELEASE = "gk"
FULLNAME = "gk-gatekeeper"
POD = f"{FULLNAME}-0"

VALUES = {"default": [], "production": ["-f", str(PRODUCTION)]}

# Keys of gatekeeper.config.Settings that the chart sets itself or takes from Secrets: refused in `config:`.
CHART_MANAGED = {
    "kafka.group_instance_id",  # one per pod: GK_KAFKA__GROUP_INSTANCE_ID from the pod name
    "kafka.security.sasl_password",  # secrets.kafkaSaslPassword
    "kafka.security.ssl_password",  # secrets.kafkaSslKeyPassword
    "redis.password",  # secrets.redisPassword
    "http.console_redis_password",  # secrets.consoleRedisPassword
}


# ----- helpers


@pytest.fixture(scope="module")
def helm_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment where no user helm configuration, plugin, repository or cluster takes part."""
    home = tmp_path_factory.mktemp("helm-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELM_", "KUBE"))}
    env.update(
        HOME=str(home),
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_DATA_HOME=str(home / "data"),
        KUBECONFIG=str(home / "no-kubeconfig"),
    )
    return env


def run_helm(helm: Path, env: dict[str, str], *args: str, chart: Path = CHART) -> subprocess.CompletedProcess[str]:
    cmd = [str(helm), *args]
    if args[0] == "template":
        cmd[2:2] = [RELEASE, str(chart)]
        cmd += ["--kube-version", KUBE_VERSION, "--namespace", "agents"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)


def template(helm: Path, env: dict[str, str], *args: str, chart: Path = CHART) -> str:
    proc = run_helm(helm, env, "template", *args, chart=chart)
    assert proc.returncode == 0, f"helm template {' '.join(args)} failed:\n{proc.stderr}"
    return proc.stdout


def template_fails(helm: Path, env: dict[str, str], *args: str) -> str:
    proc = run_helm(helm, env, "template", *args)
    assert proc.returncode != 0, f"helm template {' '.join(args)} rendered; expected a refusal:\n{proc.stdout[:2000]}"
    return proc.stderr


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def kind(manifests: Sequence[dict[str, Any]], k: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in manifests if d["kind"] == k and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {k} {name or ''}, found {len(found)}"
    return found[0]


def kinds(manifests: Sequence[dict[str, Any]]) -> list[str]:
    return sorted(d["kind"] for d in manifests)


def container(manifests: Sequence[dict[str, Any]]) -> dict[str, Any]:
    sts = kind(manifests, "StatefulSet")
    (c,) = [c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "gatekeeper"]
    return c


def config_of(manifests: Sequence[dict[str, Any]]) -> dict[str, Any]:
    cm = kind(manifests, "ConfigMap", FULLNAME)
    loaded = yaml.safe_load(cm["data"]["gatekeeper.yaml"])
    assert isinstance(loaded, dict)
    return loaded


def validate(kubevalidate: Path, text: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(kubevalidate), *flags], input=text, capture_output=True, text=True, timeout=60, check=False
    )


def pod_env(c: dict[str, Any], pod: str = POD) -> dict[str, str]:
    """The container's environment as the kubelet would give it: literal values with earlier $(VAR) expanded,
    fieldRef metadata.name as the pod's name, and a secretKeyRef as a placeholder for the Secret's value."""
    env: dict[str, str] = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"])
        elif "fieldRef" in e.get("valueFrom", {}):
            assert e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name", e
            env[e["name"]] = pod
        elif "secretKeyRef" in e.get("valueFrom", {}):
            ref = e["valueFrom"]["secretKeyRef"]
            env[e["name"]] = f"from-secret-{ref['name']}-{ref['key']}"
        else:
            raise AssertionError(f"an env var the test cannot resolve: {e}")
    return env


def image_env() -> dict[str, str]:
    """The environment the image's final stage sets (the Dockerfile's ENV instructions after its last FROM)."""
    text = (REPO / "Dockerfile").read_text()
    final = text[text.rindex("\nFROM ") :].replace("\\\n", " ")
    env: dict[str, str] = {}
    for line in final.splitlines():
        if line.startswith("ENV "):
            for pair in shlex.split(line[4:]):
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def effective_env(c: dict[str, Any]) -> dict[str, str]:
    """The GK_ variables the daemon sees in the pod: the image's, overridden by the container's."""
    env = {k: v for k, v in image_env().items() if k.startswith("GK_")}
    env.update(pod_env(c))
    return env


@pytest.fixture(scope="module")
def rendered(helm: Path, helm_env: dict[str, str]) -> dict[str, str]:
    """The chart rendered with the default values and with the production-like values, once."""
    return {name: template(helm, helm_env, *args) for name, args in VALUES.items()}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No GK_ variable of the test run's own environment (make test exports some) reaches the daemon's loader."""
    for name in list(os.environ):
        if name.startswith("GK_") or name == "RWCORE_PROFILE_PATH":
            monkeypatch.delenv(name)
    yield monkeypatch


# ----- lint


@pytest.mark.parametrize("values", VALUES)
def test_helm_lint_strict(helm: Path, helm_env: dict[str, str], values: str) -> None:
    proc = run_helm(helm, helm_env, "lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART), *VALUES[values])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


def test_the_kube_version_floor(helm: Path, helm_env: dict[str, str]) -> None:
    ok = run_helm(helm, helm_env, "lint", "--strict", "--kube-version", "1.29.0", str(CHART), *VALUES["production"])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # helm lint does not enforce Chart.yaml's kubeVersion; helm template (and install) do
    old = subprocess.run(
        [str(helm), "template", RELEASE, str(CHART), "--kube-version", "1.28.9"],
        capture_output=True,
        text=True,
        env=helm_env,
        check=False,
    )
    assert old.returncode != 0 and "requires kubeVersion: >=1.29.0-0" in old.stderr


# ----- kubevalidate


@pytest.mark.parametrize("values", VALUES)
def test_rendered_manifests_are_strictly_valid(kubevalidate: Path, rendered: dict[str, str], values: str) -> None:
    proc = validate(kubevalidate, rendered[values])
    assert proc.returncode == 0, proc.stderr
    expected = {"ConfigMap", "PodDisruptionBudget", "Service", "ServiceAccount", "StatefulSet"}
    if values == "production":
        expected |= {"PrometheusRule", "ScaledObject", "ServiceMonitor", "TriggerAuthentication"}
    assert set(kinds(docs(rendered[values]))) == expected
    for k in expected:
        assert k in proc.stdout


def _sts_text(rendered: dict[str, str]) -> str:
    (text,) = [d for d in rendered["default"].split("\n---\n") if "\nkind: StatefulSet\n" in d]
    return text


# Mutations of a rendered manifest and the problem kubevalidate must name (document, field).
BROKEN = {
    "misspelt field": (
        lambda t: t.replace("      containers:\n", "      contianers:\n"),
        ['StatefulSet/gk-gatekeeper: unknown field "spec.template.spec.contianers"', "Source: gatekeeper/templates"],
    ),
    "wrong type": (
        lambda t: t.replace("replicas: 2", 'replicas: "two"'),
        ["StatefulSet/gk-gatekeeper", "spec.replicas of type int32"],
    ),
    "duplicate field": (
        lambda t: t.replace("  serviceName: gk-gatekeeper-headless\n", "  serviceName: a\n  serviceName: b\n"),
        ['key "serviceName" already set in map'],
    ),
    "selector not matching the pods": (
        lambda t: t.replace(
            "    matchLabels:\n      app.kubernetes.io/name: gatekeeper\n",
            "    matchLabels:\n      app.kubernetes.io/name: other\n",
            1,
        ),
        ["does not match spec.selector"],
    ),
    "probe on a port the container has not": (
        lambda t: t.replace("              port: http\n", "              port: metrics\n", 1),
        ['port "metrics" is not a named port of the container'],
    ),
    "mount of no volume": (
        lambda t: t.replace(
            "            - name: tmp\n              mountPath: /tmp",
            "            - name: scratch\n              mountPath: /tmp",
        ),
        ['volumeMounts[1].name: "scratch": Not found'],
    ),
    "unknown kind": (
        lambda t: t.replace("apiVersion: apps/v1\nkind: StatefulSet", "apiVersion: apps/v1\nkind: StatefulSett"),
        ["unknown kind StatefulSett"],
    ),
}


@pytest.mark.parametrize("case", BROKEN)
def test_kubevalidate_catches_a_broken_manifest(kubevalidate: Path, rendered: dict[str, str], case: str) -> None:
    mutate, messages = BROKEN[case]
    text = _sts_text(rendered)
    broken = mutate(text)
    assert broken != text, f"the mutation {case!r} changed nothing: the rendered StatefulSet changed shape"
    proc = validate(kubevalidate, broken, "-refs=false")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for message in messages:
        assert message in proc.stderr


@pytest.mark.parametrize(
    ("values", "messages"),
    [
        # a typo in a free-form values block passes helm and the schema, and lands in the manifest
        (
            ["--set-json", 'podSecurityContext={"runAsNonRot": true}'],
            ['unknown field "spec.template.spec.securityContext.runAsNonRot"'],
        ),
        (
            ["--set-json", 'tolerations=[{"key": "a", "operatr": "Exists"}]'],
            ['unknown field "spec.template.spec.tolerations[0].operatr"'],
        ),
        # KEDA's CRD: an unknown field under the HPA behavior, and a trigger metadata key KEDA would ignore
        (
            ["--set-json", 'autoscaling.behavior={"scaleDwn": {}}'],
            ['unknown field "spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDwn"'],
        ),
        (
            ["--set-json", 'autoscaling.extraTriggerMetadata={"lagTreshold": "5"}'],
            ["metadata.lagTreshold: KEDA's kafka scaler reads no such key"],
        ),
        (
            ["--set-json", 'autoscaling.behavior={"scaleDown": {"policies": [{"type": "Pods", "value": "1"}]}}'],
            ["behavior.scaleDown.policies[0].value: Invalid value", "policies[0].periodSeconds: Required value"],
        ),
        # the prometheus-operator's types: a misspelt relabeling field
        (
            ["--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.relabelings[0].actoin=keep"],
            ['unknown field "spec.endpoints[0].relabelings[1].actoin"'],
        ),
    ],
    ids=["pod-securityContext", "toleration", "keda-behavior", "keda-trigger-key", "keda-type", "servicemonitor"],
)
def test_kubevalidate_catches_a_typo_that_reaches_the_manifests(
    helm: Path, helm_env: dict[str, str], kubevalidate: Path, values: list[str], messages: list[str]
) -> None:
    text = template(helm, helm_env, *VALUES["production"], *values)
    proc = validate(kubevalidate, text)
    assert proc.returncode == 1, proc.stdout
    for message in messages:
        assert message in proc.stderr


def test_kubevalidate_s_embedded_crds_are_pinned() -> None:
    """install.sh rebuilds kubevalidate when its .go files change, not its embedded CRDs: each CRD's SHA-256 is
    pinned in crd.go (and checked by the program at start), so a changed CRD must change crd.go, and is rebuilt."""
    import hashlib

    folder = REPO / "deploy" / "tools" / "kubevalidate"
    pinned = dict(re.findall(r'"(crds/[^"]+\.yaml)":\s*"([0-9a-f]{64})"', (folder / "crd.go").read_text()))
    files = {f"crds/{p.name}": hashlib.sha256(p.read_bytes()).hexdigest() for p in (folder / "crds").glob("*.yaml")}
    assert files and pinned == files


def test_kubevalidate_checks_references_between_manifests(kubevalidate: Path, rendered: dict[str, str]) -> None:
    text = rendered["production"]
    cases = {
        # a ServiceMonitor on a port the Service does not have would scrape nothing, silently
        "port: http\n      path: /metrics": (
            "port: metrics\n      path: /metrics",
            'endpoints[0].port: "metrics" is not a port',
        ),
        # an autoscaler aimed at another workload
        "    kind: StatefulSet\n    name: gk-gatekeeper\n": (
            "    kind: StatefulSet\n    name: gk-other\n",
            'StatefulSet "gk-other" is not in the manifests',
        ),
        # a ServiceMonitor that selects both Services: each pod scraped twice (the chart's first version did that)
        "      gatekeeper/service: http\n  endpoints:": ("  endpoints:", "its pods would be scraped twice"),
        # the governing Service missing
        "serviceName: gk-gatekeeper-headless": (
            "serviceName: gk-nothing",
            'Service "gk-nothing" is not in the manifests',
        ),
    }
    for old, (new, message) in cases.items():
        assert old in text, old
        proc = validate(kubevalidate, text.replace(old, new, 1))
        assert proc.returncode == 1 and message in proc.stderr, (message, proc.stderr)


# ----- the schema


SENTINEL = "sentinel-Zq7-hunter2"


@pytest.mark.parametrize(
    "values",
    [
        ["--set", f"config.redis.password={SENTINEL}"],
        ["--set", f"config.kafka.security.sasl_password={SENTINEL}"],
        ["--set", f"config.kafka.security.ssl_password={SENTINEL}"],
        ["--set", f"config.http.console_redis_password={SENTINEL}"],
        ["--set", f"config.redis.url=redis://:{SENTINEL}@redis:6379/0"],
        ["--set", f"config.redis.url=rediss://gatekeeper:{SENTINEL}@redis:6380/0"],
        ["--set", f"config.redis.url=redis://redis:6379/0?password={SENTINEL}"],
        ["--set-json", f'extraEnv=[{{"name": "GK_REDIS__PASSWORD", "value": "{SENTINEL}"}}]'],
        ["--set-json", f'extraEnv=[{{"name": "GK_KAFKA__SECURITY__SASL_PASSWORD", "value": "{SENTINEL}"}}]'],
        ["--set-json", f'extraEnv=[{{"name": "API_TOKEN", "value": "{SENTINEL}"}}]'],
    ],
    ids=[
        "redis.password",
        "sasl_password",
        "ssl_password",
        "console-password",
        "url-password",
        "url-user-password",
        "url-query",
        "env-redis",
        "env-sasl",
        "env-token",
    ],
)
def test_the_schema_refuses_an_inline_secret(helm: Path, helm_env: dict[str, str], values: list[str]) -> None:
    for command in (["template"], ["lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART)]):
        proc = run_helm(helm, helm_env, *command, *VALUES["production"], *values)
        assert proc.returncode != 0, f"helm {command[0]} accepted an inline secret ({values})"
        out = proc.stdout + proc.stderr
        assert "values don't meet the specifications of the schema" in out
        # the refusal does not print the secret into the CI log
        assert SENTINEL not in out


def test_extra_env_from_a_secret_is_accepted(helm: Path, helm_env: dict[str, str]) -> None:
    ref = {"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "tokens", "key": "api"}}}
    manifests = docs(template(helm, helm_env, "--set-json", f"extraEnv=[{json.dumps(ref)}]"))
    assert ref in container(manifests)["env"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "config.kafka.group_instance_id=shared"], "additional properties 'group_instance_id' not allowed"),
        (["--set", "config.kafka.transactional_id=gk-0"], "additional properties 'transactional_id' not allowed"),
        (["--set", "config.kafka.security.sasl_mechanism=OAUTHBEARER"], "/config/kafka/security/sasl_mechanism"),
        (["--set-json", "config.routes=[]"], "/config/routes"),
        (["--set", "config.http.port=0"], "/config/http/port"),
        (["--set", "config.kafka.session_timeout_ms=1000"], "/config/kafka/session_timeout_ms"),
        (["--set", "config.redis.pasword=x"], "additional properties 'pasword' not allowed"),
        (["--set", "config.routes[0].input=agents pay"], "/config/routes/0/input"),
        (["--set", "autoscaling.minReplicas=0"], "/autoscaling/minReplicas"),
        (["--set", "replicas=3"], "additional properties 'replicas' not allowed"),
    ],
    ids=[
        "group_instance_id",
        "transactional_id",
        "oauthbearer",
        "no-route",
        "port-0",
        "session-timeout",
        "misspelt-key",
        "topic-name",
        "scale-to-zero",
        "misspelt-top-level",
    ],
)
def test_the_schema_refuses_what_the_daemon_would(
    helm: Path, helm_env: dict[str, str], values: list[str], message: str
) -> None:
    assert message in template_fails(helm, helm_env, *values)


def _schema_keys(node: dict[str, Any], defs: dict[str, Any], prefix: str = "") -> set[str]:
    if "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[1]]
    out: set[str] = set()
    for name, sub in node.get("properties", {}).items():
        path = f"{prefix}{name}"
        out.add(path)
        if sub.get("type") == "array" and "items" in sub:
            out |= _schema_keys(sub["items"], defs, f"{path}.0.")
        else:
            out |= _schema_keys(sub, defs, f"{path}.")
    return out


def _models_in(annotation: Any) -> list[tuple[bool, type[BaseModel]]]:
    """The pydantic models an annotation holds, each with whether it is a list's item."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(False, annotation)]
    if get_origin(annotation) is list:
        return [(True, model) for _, model in _models_in(get_args(annotation)[0])]
    return [found for arg in get_args(annotation) for found in _models_in(arg)]


def _settings_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for name, field in model.model_fields.items():
        out.add(f"{prefix}{name}")
        for in_list, sub in _models_in(field.annotation):
            out |= _settings_keys(sub, f"{prefix}{name}.0." if in_list else f"{prefix}{name}.")
    return out


def test_the_schema_describes_the_daemon_s_settings() -> None:
    """values.schema.json's `config` is the daemon's Settings, key for key, minus what the chart manages: a key
    added to the daemon without the chart (or kept in the chart after the daemon dropped it) fails here."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    chart_keys = _schema_keys(schema["properties"]["config"], schema["definitions"])
    daemon_keys = _settings_keys(Settings)
    assert chart_keys - daemon_keys == set(), "the chart's schema has keys the daemon refuses"
    assert daemon_keys - chart_keys == CHART_MANAGED, "daemon keys the chart's schema neither allows nor manages"


# ----- the pods


@pytest.mark.parametrize("values", VALUES)
def test_probes_point_at_the_port_the_daemon_serves(rendered: dict[str, str], values: str) -> None:
    manifests = docs(rendered[values])
    http = config_of(manifests)["http"]
    assert http["host"] == "0.0.0.0"
    c = container(manifests)
    (port,) = [p for p in c["ports"] if p["name"] == "http"]
    assert port["containerPort"] == http["port"]
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = c[probe]["httpGet"]
        assert get["path"] == path
        assert get["port"] in ("http", http["port"])
    liveness = c["livenessProbe"]
    assert 20 <= liveness["periodSeconds"] * liveness["failureThreshold"] <= 120
    for svc in (kind(manifests, "Service", FULLNAME), kind(manifests, "Service", f"{FULLNAME}-headless")):
        assert [p["targetPort"] for p in svc["spec"]["ports"]] == ["http"]


def test_the_port_follows_config_http_port(helm: Path, helm_env: dict[str, str], kubevalidate: Path) -> None:
    text = template(helm, helm_env, "--set", "config.http.port=9200")
    manifests = docs(text)
    assert config_of(manifests)["http"]["port"] == 9200
    assert container(manifests)["ports"] == [{"name": "http", "containerPort": 9200, "protocol": "TCP"}]
    assert validate(kubevalidate, text).returncode == 0


@pytest.mark.parametrize("values", [*VALUES, "custom-profile"])
def test_the_daemon_s_loader_accepts_the_rendered_configuration(
    helm: Path,
    helm_env: dict[str, str],
    rendered: dict[str, str],
    clean_env: pytest.MonkeyPatch,
    tmp_path: Path,
    values: str,
) -> None:
    if values == "custom-profile":
        profile = json.loads((REPO / "rwcore" / "profiles" / "pay.json").read_text())
        profile["profile"] = "acme"
        route = {
            "input": "agents.acme",
            "output": "agents.acme.checked",
            "dead_letter": "agents.acme.dlq",
            "alerts": "agents.acme.alerts",
            "profile": "acme",
        }
        text = template(
            helm,
            helm_env,
            "--set-json",
            f"profiles={json.dumps({'acme': json.dumps(profile)})}",
            "--set-json",
            f"config.routes={json.dumps([route])}",
        )
    else:
        text = rendered[values]
    manifests = docs(text)
    cm = kind(manifests, "ConfigMap", FULLNAME)
    sts = kind(manifests, "StatefulSet")
    c = container(manifests)
    # The pod's files: each configMap volume's items where the container mounts them, under tmp_path.
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    mounts: dict[str, Path] = {}
    for m in c["volumeMounts"]:
        v = volumes[m["name"]]
        here = tmp_path / m["mountPath"].lstrip("/")
        mounts[m["mountPath"]] = here
        here.mkdir(parents=True, exist_ok=True)
        if "configMap" in v:
            assert v["configMap"]["name"] == cm["metadata"]["name"]
            for item in v["configMap"]["items"]:
                (here / item["path"]).write_text(cm["data"][item["key"]])
    config_file = Path(c["args"][c["args"].index("--config") + 1])
    env = effective_env(c)
    assert env["GK_CONFIG"] == str(config_file)
    local_file = mounts[str(config_file.parent)] / config_file.name

    # Paths in the configuration point where the pod has them; here, under tmp_path.
    def relocate(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: relocate(v) for k, v in value.items()}
        if isinstance(value, list):
            return [relocate(v) for v in value]
        if isinstance(value, str):
            for mount, path in mounts.items():
                if mount != "/tmp" and (value == mount or value.startswith(mount + "/")):
                    return str(path) + value[len(mount) :]
        return value

    config = relocate(yaml.safe_load(local_file.read_text()))
    text = yaml.safe_dump(config)
    local_file.write_text(text)
    for name, value in env.items():
        if name.startswith("GK_") and name != "GK_CONFIG":
            clean_env.setenv(name, value)

    try:
        settings = load_settings(local_file)
    except ConfigError as exc:
        pytest.fail(f"the daemon refuses the rendered configuration:\n{exc}\n---\n{text}", pytrace=False)

    # what the pod runs is the ConfigMap's configuration, whatever GK_ defaults the image sets
    assert settings.http.host == config["http"]["host"] == "0.0.0.0"
    assert settings.log_format == config["log_format"]
    assert settings.kafka.group_instance_id == POD
    if settings.kafka.transactional:  # per input partition, alike on every pod: nothing per pod
        assert "GK_KAFKA__TRANSACTIONAL_ID" not in env
    assert settings.routes, "no route"
    if values == "production":
        sec = settings.kafka.security
        assert sec.protocol == "SASL_SSL" and sec.sasl_mechanism == "SCRAM-SHA-512"
        assert sec.sasl_username == "from-secret-gatekeeper-kafka-user-username"
        assert sec.sasl_password is not None
        assert sec.sasl_password.get_secret_value() == "from-secret-gatekeeper-kafka-user-password"
        assert settings.redis.password is not None
        assert settings.redis.password.get_secret_value() == "from-secret-gatekeeper-redis-password"
        # the CA files are where the Secret volumes put them
        assert sec.ssl_cafile == mounts["/etc/gatekeeper/tls/kafka"] / "ca.crt"
        assert settings.redis.tls and settings.redis.tls_ca_file == mounts["/etc/gatekeeper/tls/redis"] / "ca.crt"
        for vol, path in (("kafka-tls", "ca.crt"), ("redis-tls", "ca.crt")):
            assert {"key": "ca.crt", "path": path} in volumes[vol]["secret"]["items"]
        from gatekeeper.api.auth import TokenBook
        from gatekeeper.redis_store import client_from_settings

        client_from_settings(settings.redis)  # the daemon's own checks of the Redis settings (no connection made)
        # the API's tokens: the config's hashed ones and those of the mounted Secret
        assert settings.http.tokens_file == mounts["/etc/gatekeeper/tokens"] / "tokens.yaml"
        assert {"key": "tokens.yaml", "path": "tokens.yaml"} in volumes["api-tokens"]["secret"]["items"]
        settings.http.tokens_file.write_text(
            yaml.safe_dump([{"name": "desk", "sha256": "ab" * 32, "agents": ["desk"]}])
        )
        assert len(TokenBook.from_settings(settings.http)) == 3  # payer-service and prometheus, and desk
        # the signing key (signed verdicts): where the Secret volume puts it, and one the daemon loads
        from gatekeeper.verdicts import new_key_pair, signer_for

        assert settings.signing.private_key_file == mounts["/etc/gatekeeper/signing"] / "signing.pem"
        assert {"key": "signing.pem", "path": "signing.pem"} in volumes["signing-key"]["secret"]["items"]
        pem, public = new_key_pair()
        settings.signing.private_key_file.write_bytes(pem)
        # the mode the Secret volume gives it (kubelet adds group read for the pod's fsGroup): one the daemon takes
        mode = volumes["signing-key"]["secret"]["defaultMode"]
        assert mode & 0o007 == 0, f"the signing key is mounted readable by others ({mode:04o})"
        settings.signing.private_key_file.chmod(mode | 0o040)
        signer = signer_for(settings.signing)
        assert signer is not None and signer.public_key == public
        settings.signing.private_key_file.chmod(0o644)  # what a Secret's default (0644) would give: refused
        with pytest.raises(ConfigError, match="chmod 600"):
            signer_for(settings.signing)
    if values == "custom-profile":
        assert settings.routes[0].profile == "acme"


def test_the_file_wins_over_the_image_s_defaults(helm: Path, helm_env: dict[str, str]) -> None:
    """The image sets GK_HTTP__HOST (environment beats the file): the chart restates the config's values of every
    GK_ default an image may set, so that `config.http.host` and `config.log_format` are what runs."""
    image_defaults = {k for k in image_env() if k.startswith("GK_")}
    assert image_defaults <= {"GK_LOG_FORMAT", "GK_HTTP__HOST"}, (
        "the image sets a GK_ default the chart does not restate"
    )
    c = container(docs(template(helm, helm_env, "--set", "config.log_format=text", "--set", "config.http.host=::")))
    env = effective_env(c)
    assert env["GK_LOG_FORMAT"] == "text" and env["GK_HTTP__HOST"] == "::"


@pytest.mark.parametrize("values", VALUES)
def test_the_pods_are_locked_down(rendered: dict[str, str], values: str) -> None:
    manifests = docs(rendered[values])
    spec = kind(manifests, "StatefulSet")["spec"]["template"]["spec"]
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 10001 and pod["runAsGroup"] == 10001
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    c = container(manifests)
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    tmp = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert len(tmp) == 1
    (volume,) = [v for v in spec["volumes"] if v["name"] == tmp[0]["name"]]
    assert "emptyDir" in volume
    assert all(m.get("readOnly") for m in c["volumeMounts"] if m["mountPath"] != "/tmp")
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]


@pytest.mark.parametrize("values", VALUES)
def test_termination_grace_outlasts_the_drain(rendered: dict[str, str], values: str) -> None:
    manifests = docs(rendered[values])
    grace = config_of(manifests)["grace_seconds"]
    tgps = kind(manifests, "StatefulSet")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert tgps >= grace + 5


def test_termination_grace_follows_grace_seconds_and_refuses_less(helm: Path, helm_env: dict[str, str]) -> None:
    # (--set-json: helm's --set gives a decimal number as a string, which the schema refuses)
    manifests = docs(template(helm, helm_env, "--set-json", "config.grace_seconds=42.5"))
    assert kind(manifests, "StatefulSet")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 63
    manifests = docs(template(helm, helm_env, "--set", "terminationGracePeriodSeconds=40"))
    assert kind(manifests, "StatefulSet")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 40
    err = template_fails(helm, helm_env, "--set", "terminationGracePeriodSeconds=12")
    assert "terminationGracePeriodSeconds (12) must be at least config.grace_seconds (10) + 5" in err


def test_static_membership_from_the_pod_name_and_no_transactional_id_per_pod(rendered: dict[str, str]) -> None:
    for values in VALUES:
        env = container(docs(rendered[values]))["env"]
        names = [e["name"] for e in env]
        (gid,) = [e for e in env if e["name"] == "GK_KAFKA__GROUP_INSTANCE_ID"]
        assert gid["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        (pod,) = [e for e in env if e["name"] == "POD_NAME"]
        assert pod["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        # transactional or not, no transactional id per pod: they are per input partition, alike on every pod (a
        # partition's new owner fences its old one), derived by the daemon from the group id
        assert "GK_KAFKA__TRANSACTIONAL_ID" not in names


def test_static_membership_can_be_turned_off(helm: Path, helm_env: dict[str, str]) -> None:
    env = container(docs(template(helm, helm_env, "--set", "kafka.staticMembership=false")))["env"]
    assert "GK_KAFKA__GROUP_INSTANCE_ID" not in [e["name"] for e in env]


def test_a_config_change_rolls_the_pods(helm: Path, helm_env: dict[str, str], rendered: dict[str, str]) -> None:
    def checksum(text: str) -> str:
        sts = kind(docs(text), "StatefulSet")
        return str(sts["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    base = checksum(rendered["default"])
    assert re.fullmatch(r"[0-9a-f]{64}", base)
    assert checksum(template(helm, helm_env)) == base
    assert checksum(template(helm, helm_env, "--set", "config.log_level=DEBUG")) != base
    assert checksum(template(helm, helm_env, "--set-json", 'profiles={"acme": "{}"}')) != base


# ----- secrets


def _strings(node: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield str(k), v
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)


def test_no_secret_is_rendered(rendered: dict[str, str]) -> None:
    for values, text in rendered.items():
        manifests = docs(text)
        assert "Secret" not in kinds(manifests)
        assert SENTINEL not in text
        config = config_of(manifests)
        assert not [k for k, _ in _strings(config) if "password" in k.lower()], "a password key in the ConfigMap"
        for e in container(manifests)["env"]:
            if re.search(r"PASSWORD|SECRET|TOKEN|USERNAME", e["name"]) and values == "production":
                assert "value" not in e and "secretKeyRef" in e["valueFrom"], e
    auth = kind(docs(rendered["production"]), "TriggerAuthentication")
    assert set(auth["spec"]) <= {"secretTargetRef", "env"}
    assert {r["parameter"] for r in auth["spec"]["secretTargetRef"]} == {"username", "password", "ca"}


def test_the_console_s_redis_password_comes_from_its_secret(helm: Path, helm_env: dict[str, str]) -> None:
    text = template(
        helm,
        helm_env,
        "--set",
        "secrets.consoleRedisPassword.name=gk-console",
        "--set",
        "config.http.console_redis_username=gatekeeper-operator",
    )
    env = {e["name"]: e for e in container(docs(text))["env"]}
    ref = env["GK_HTTP__CONSOLE_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "gk-console", "key": "password"}
    assert config_of(docs(text))["http"]["console_redis_username"] == "gatekeeper-operator"


def test_the_signing_key_comes_from_its_secret_only(helm: Path, helm_env: dict[str, str]) -> None:
    err = template_fails(
        helm,
        helm_env,
        "--set",
        "secrets.signingKey.secretName=gk-signing",
        "--set",
        "config.signing.private_key_file=/elsewhere.pem",
    )
    assert "config.signing.private_key_file is set by the chart from secrets.signingKey" in err


def test_sasl_without_its_secret_is_refused(helm: Path, helm_env: dict[str, str]) -> None:
    err = template_fails(
        helm,
        helm_env,
        "--set",
        "config.kafka.security.protocol=SASL_SSL",
        "--set",
        "config.kafka.security.sasl_mechanism=SCRAM-SHA-512",
        "--set",
        "config.kafka.security.sasl_username=gk",
    )
    assert "set secrets.kafkaSaslPassword.name" in err
    err = template_fails(helm, helm_env, "--set", "secrets.kafkaTls.secretName=ca")
    assert "secrets.kafkaTls is set but config.kafka.security.protocol is PLAINTEXT" in err
    err = template_fails(helm, helm_env, *VALUES["production"], "--set", "secrets.kafkaTls.certKey=tls.crt")
    assert "mutual TLS needs both certKey and keyKey" in err
    err = template_fails(helm, helm_env, *VALUES["production"], "--set", "secrets.kafkaTls.caKey=")
    assert "secrets.kafkaTls.secretName is set but names no file" in err


def test_a_literal_sasl_user_reaches_keda_through_the_environment(
    helm: Path, helm_env: dict[str, str], kubevalidate: Path
) -> None:
    text = template(
        helm,
        helm_env,
        *VALUES["production"],
        "--set",
        "secrets.kafkaSaslUsername.name=",
        "--set",
        "config.kafka.security.sasl_username=gatekeeper",
    )
    manifests = docs(text)
    assert validate(kubevalidate, text).returncode == 0
    auth = kind(manifests, "TriggerAuthentication")
    assert auth["spec"]["env"] == [
        {"parameter": "username", "name": "GK_KAFKA__SECURITY__SASL_USERNAME", "containerName": "gatekeeper"}
    ]
    env = {e["name"]: e for e in container(manifests)["env"]}
    assert env["GK_KAFKA__SECURITY__SASL_USERNAME"] == {
        "name": "GK_KAFKA__SECURITY__SASL_USERNAME",
        "value": "gatekeeper",
    }
    assert config_of(manifests)["kafka"]["security"]["sasl_username"] == "gatekeeper"


# ----- monitoring, scaling


def test_the_prometheus_rule_is_the_rules_file(rendered: dict[str, str]) -> None:
    assert RULES_FILE.is_file(), f"{RULES_FILE} is missing: the PrometheusRule renders its groups"
    rule = kind(docs(rendered["production"]), "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(RULES_FILE.read_text())["groups"]
    assert rule["metadata"]["labels"]["release"] == "prometheus"


def test_the_scrape_job_is_one_the_rules_select(helm: Path, helm_env: dict[str, str], rendered: dict[str, str]) -> None:
    rules = RULES_FILE.read_text()
    assert 'up{job=~".*gatekeeper.*"}' in rules, "the rules' job selector changed: update the chart's job check"
    sm = kind(docs(rendered["production"]), "ServiceMonitor")
    (endpoint,) = sm["spec"]["endpoints"]
    job = [r for r in endpoint["relabelings"] if r.get("targetLabel") == "job"]
    assert job and "gatekeeper" in job[0]["replacement"]
    # it selects the http Service and not the headless one (both front the same pods: each would be scraped twice)
    wanted = sm["spec"]["selector"]["matchLabels"].items()
    manifests = docs(rendered["production"])
    assert wanted <= kind(manifests, "Service", FULLNAME)["metadata"]["labels"].items()
    assert not wanted <= kind(manifests, "Service", f"{FULLNAME}-headless")["metadata"]["labels"].items()
    err = template_fails(helm, helm_env, *VALUES["production"], "--set", "fullnameOverride=rw-guard")
    assert 'the ServiceMonitor\'s job "rw-guard" does not contain "gatekeeper"' in err
    ok = docs(
        template(
            helm,
            helm_env,
            *VALUES["production"],
            "--set",
            "fullnameOverride=rw-guard",
            "--set",
            "serviceMonitor.jobName=rw-gatekeeper",
        )
    )
    assert kind(ok, "ServiceMonitor")["spec"]["endpoints"][0]["relabelings"][0]["replacement"] == "rw-gatekeeper"


def test_autoscaling_on_lag_per_input_topic(rendered: dict[str, str]) -> None:
    manifests = docs(rendered["production"])
    config = config_of(manifests)
    so = kind(manifests, "ScaledObject")
    assert so["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": FULLNAME}
    assert 1 <= so["spec"]["minReplicaCount"] <= so["spec"]["maxReplicaCount"]
    triggers = so["spec"]["triggers"]
    assert [t["metadata"]["topic"] for t in triggers] == [r["input"] for r in config["routes"]]
    for t in triggers:
        assert t["type"] == "kafka"
        md = t["metadata"]
        assert md["consumerGroup"] == config["kafka"]["group_id"]
        assert md["bootstrapServers"] == config["kafka"]["bootstrap_servers"]
        assert md["allowIdleConsumers"] == "false" and md["offsetResetPolicy"] == "earliest"
        assert md["sasl"] == "scram_sha512" and md["tls"] == "enable"
        assert t["authenticationRef"] == {"name": FULLNAME}
    # the autoscaler owns the replica count
    assert "replicas" not in kind(manifests, "StatefulSet")["spec"]
    assert kind(docs(rendered["default"]), "StatefulSet")["spec"]["replicas"] == 2


def test_autoscaling_bounds(helm: Path, helm_env: dict[str, str]) -> None:
    err = template_fails(
        helm,
        helm_env,
        *VALUES["production"],
        "--set",
        "autoscaling.minReplicas=5",
        "--set",
        "autoscaling.maxReplicas=4",
    )
    assert "autoscaling.minReplicas (5) is more than autoscaling.maxReplicas (4)" in err


def test_notes_render(helm: Path, helm_env: dict[str, str], tmp_path: Path) -> None:
    """NOTES.txt, rendered through a copy of the chart that exposes it (helm template renders NOTES but does not
    print them)."""
    import shutil

    chart = tmp_path / "gatekeeper"
    shutil.copytree(CHART, chart)
    (chart / "notes-under-test.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
    (chart / "templates" / "zz-notes.yaml").write_text(
        'notes: {{ tpl (.Files.Get "notes-under-test.txt") . | toJson }}\n'
    )

    def notes(*args: str) -> str:
        out = template(helm, helm_env, *args, "--show-only", "templates/zz-notes.yaml", chart=chart)
        return str(yaml.safe_load(out)["notes"])

    prod = notes(*VALUES["production"])
    assert "StatefulSet gk-gatekeeper in namespace agents" in prod
    assert "agents.pay -> agents.pay.checked" in prod and "agents.deploy -> agents.deploy.checked" in prod
    assert "transactional (transactional ids gatekeeper-prod-<topic>-<partition>, one per input partition)" in prod
    assert "would sit idle" in prod
    assert "WARNING" not in prod and "without credentials" not in prod
    assert "WARNING: config.kafka.session_timeout_ms (20000)" in notes("--set", "config.kafka.session_timeout_ms=20000")


def test_the_service_monitor_carries_the_metrics_token(
    helm: Path, helm_env: dict[str, str], rendered: dict[str, str]
) -> None:
    """With /metrics behind a token (config.http.metrics_auth), Prometheus sends the token of the Secret the
    ServiceMonitor names; on without a Secret the render fails rather than a scrape being refused in silence."""
    manifests = docs(rendered["production"])
    assert config_of(manifests)["http"]["metrics_auth"] is True
    prometheus = [t for t in config_of(manifests)["http"]["tokens"] if "metrics" in t.get("scopes", [])]
    assert prometheus and not prometheus[0].get("agents")  # it speaks for no agent
    (endpoint,) = kind(manifests, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "gatekeeper-metrics-token", "key": "token"},
    }
    plain = docs(template(helm, helm_env, "--set", "serviceMonitor.enabled=true"))
    (default_endpoint,) = kind(plain, "ServiceMonitor")["spec"]["endpoints"]
    assert "authorization" not in default_endpoint
    err = template_fails(
        helm, helm_env, "--set", "serviceMonitor.enabled=true", "--set", "config.http.metrics_auth=true"
    )
    assert "config.http.metrics_auth is on but serviceMonitor.bearerTokenSecret.name is empty" in err

"""The Helm chart, rendered by a real helm v4 and read back.

Every values file of ``charts/hami-usage-collector/ci`` is linted and rendered;
every manifest is validated against the Kubernetes 1.29 and 1.35 schemas
(kubernetes-validate, strict), the Prometheus Operator kinds against their
CRDs' required fields; then the rendered YAML is read for what matters: RBAC
has exactly the rules the collector needs, every container is locked down,
the ServiceMonitor honours labels, the agent's host folder is read-only, the
env vars are accepted by the programs' own settings models, and bad values are
refused with a message naming them. helm comes from ``make tools``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import bcrypt
import pytest
import yaml
from helpers import prometheus_tool

from agent.settings import AgentSettings
from collector.settings import CollectorSettings
from collector.web import webconfig
from core.shards import shard_of

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / ".tools" / "helm" / "helm"
CHART = ROOT / "charts" / "hami-usage-collector"
CI_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
APP_VERSION: str = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
RELEASE = "huc"
NAMESPACE = "gpu-monitoring"
FULLNAME = f"{RELEASE}-hami-usage-collector"
AGENT = f"{FULLNAME}-agent"
URL = f"http://{FULLNAME}.{NAMESPACE}:9396"
KUBE_VERSIONS = ("1.29", "1.35")
MONITOR_API = "monitoring.coreos.com/v1"
REMOTE_WRITE_MOUNT = "/etc/hami-usage-collector/remote-write"
REMOTE_WRITE_URL = [
    "--set-json",
    'collector.settings.remoteWriteUrl=["https://rw.example.com/write"]',
]

Doc = dict[str, Any]
S = TypeVar("S", CollectorSettings, AgentSettings)

# Each rule as (apiGroup, resource, verb).
POD_READ = {("", "pods", verb) for verb in ("get", "list", "watch")}
# The capacity series: a card's record is on its (cluster-scoped) Node, status included.
NODE_READ = {("", "nodes", verb) for verb in ("get", "list", "watch")}
CLAIM_READ = {("resource.k8s.io", "resourceclaims", v) for v in ("get", "list", "watch")}
PUSH_RULES = CLAIM_READ | {("authentication.k8s.io", "tokenreviews", "create")}
ALLOCATION_RULES = CLAIM_READ | {
    ("resource.k8s.io", "resourceslices", v) for v in ("get", "list", "watch")
}
# readAuth.mode=kubernetes: who a reader is, and what it may read.
READ_AUTH_RULES = {
    ("authentication.k8s.io", "tokenreviews", "create"),
    ("authorization.k8s.io", "subjectaccessreviews", "create"),
}
COLLECTOR_RULES = POD_READ | NODE_READ | PUSH_RULES | ALLOCATION_RULES | READ_AUTH_RULES
# The readers' roles the chart ships; a non-resource URL rule as ("", URL, verb).
CLUSTER_READER = f"{FULLNAME}-cluster-reader"
TENANT = f"{FULLNAME}-tenant"
READER_RULES = {
    CLUSTER_READER: {("", url, "get") for url in ("/metrics", "/api/v1/*", "/prometheus/*", "/")},
    TENANT: {("", "pods", "get"), ("", "pods", "list")},
}
PROMETHEUS = {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}
SA_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
TLS_MOUNT = "/etc/hami-usage-collector/tls"
WEB_CONFIG_FILE = "/etc/hami-usage-collector/web/web-config.yaml"
AGENT_CA_FILE = "/etc/hami-usage-collector/collector-ca/ca.crt"
TLS = ["--set", "tls.enabled=true", "--set", "tls.secretName=huc-tls"]
FORCED_MONITOR = ["--set", "monitor.enabled=true", "--set", "monitor.force=true"]

# Settings the chart sets itself (or cannot offer: files it does not mount);
# every other setting must be accepted by collector.settings / agent.settings.
COLLECTOR_OWNED = {
    "listen",
    "kubernetes",
    "kubeconfig",
    "targets_file",
    "namespaces",
    "flavours",
    "hami_selector",
    "volcano_selector",
    "kai_selector",
    "hami_port",
    "volcano_port",
    "kai_port",
    "push_auth",
    "push_token_file",
    "push_audience",
    "push_service_accounts",
    "log_format",
    "log_level",
    "shard_count",
    "shard_index",
    "replica",
    "remote_write_bearer_token_file",
    "remote_write_password_file",
    "remote_write_ca_file",
    "web_config_file",
    "read_auth",
    "read_auth_ttl",
}
AGENT_OWNED = {
    "collector",
    "collector_shards",
    "collector_ca_file",
    "shard_count",
    "node",
    "roots",
    "nvml",
    "processes",
    "host_proc",
    "pod_resources_socket",
    "token_file",
    "listen",
    "log_format",
    "log_level",
}


class HelmError(Exception):
    """helm exited non-zero; the message is what it printed."""


def helm(*args: str | Path) -> str:
    """Run the project's helm; its stdout, or HelmError with its output."""
    if not HELM.exists():
        pytest.fail(
            f"helm is missing ({HELM.relative_to(ROOT)}): run `make tools` or `make chart-check`"
        )
    done = subprocess.run(
        [str(HELM), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HELM_CACHE_HOME": "/nonexistent", "HELM_CONFIG_HOME": "/nonexistent"},
    )
    if done.returncode != 0:
        raise HelmError(f"{done.stdout}\n{done.stderr}".strip())
    return done.stdout


def template(*args: str | Path) -> list[Doc]:
    """``helm template`` of the chart as release huc in gpu-monitoring; the manifests."""
    out = helm("template", RELEASE, CHART, "--namespace", NAMESPACE, *args)
    return [doc for doc in yaml.safe_load_all(out) if doc]


def notes(*args: str | Path) -> str:
    """NOTES.txt as ``helm install --dry-run=client`` prints it."""
    out = helm("install", RELEASE, CHART, "--namespace", NAMESPACE, "--dry-run=client", *args)
    return out.partition("NOTES:\n")[2]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Doc]]:
    """Every ci values file, rendered (in parallel: each helm run is a process)."""
    with ThreadPoolExecutor(8) as pool:
        docs = pool.map(lambda f: template("-f", f), CI_FILES)
        return {f.name.removesuffix("-values.yaml"): d for f, d in zip(CI_FILES, docs, strict=True)}


def find(docs: Sequence[Doc], kind: str, name: str | None = None) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]


def one(docs: Sequence[Doc], kind: str, name: str | None = None) -> Doc:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def container(workload: Doc) -> Doc:
    containers: list[Doc] = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def env_of(workload: Doc) -> dict[str, str]:
    """The container's plain env values (valueFrom entries left out)."""
    return {e["name"]: e["value"] for e in container(workload).get("env", []) if "value" in e}


def collectors(docs: Sequence[Doc]) -> list[Doc]:
    """The collector's workloads: its Deployment, or one StatefulSet per shard."""
    return find(docs, "Deployment") + find(docs, "StatefulSet")


def rules(role: Doc) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every rule; a non-resource URL as ("", URL, verb)."""
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule.get("apiGroups", [""])
        for resource in rule.get("resources", []) + rule.get("nonResourceURLs", [])
        for verb in rule["verbs"]
    }


def test_ci_matrix_covers_the_cases() -> None:
    names = {f.name.removesuffix("-values.yaml") for f in CI_FILES}
    assert {
        "default",
        "agent-off",
        "servicemonitor",
        "podmonitor",
        "namespaced",
        "namespaced-agent-off",
        "replicas",
        "sharded",
        "hami",
        "volcano",
        "kai",
        "dra",
    } <= names


def test_lint_strict_every_values_file() -> None:
    def lint(values: Path) -> str:
        try:
            helm("lint", "--strict", "--quiet", CHART, "-f", values)
        except HelmError as exc:
            return f"{values.name}: {exc}"
        return ""

    with ThreadPoolExecutor(8) as pool:
        failures = [f for f in pool.map(lint, CI_FILES) if f]
    assert not failures


def test_manifests_validate_against_kubernetes_schemas(rendered: dict[str, list[Doc]]) -> None:
    try:
        import kubernetes_validate  # type: ignore[import-untyped]
    except ImportError:
        pytest.fail("kubernetes-validate is missing: reinstall the venv (`make test` does it)")
    errors = []
    for name, docs in rendered.items():
        for doc in docs:
            if doc["apiVersion"] == MONITOR_API:
                continue  # no schema in kubernetes-validate: test_monitor_kinds_match_their_crds
            for version in KUBE_VERSIONS:
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except kubernetes_validate.ValidationError as exc:
                    path = ".".join(map(str, exc.path))
                    errors.append(f"{name}: {doc['kind']} {version}: {path}: {exc.message}")
                except kubernetes_validate.SchemaNotFoundError as exc:
                    errors.append(f"{name}: {exc.message}")
    assert not errors


def test_dashboard_copy_is_the_original() -> None:
    copy = CHART / "dashboards" / "hami-usage.json"
    original = ROOT / "dashboards" / "hami-usage.json"
    assert copy.read_bytes() == original.read_bytes(), f"cp {original} {copy}"


# --- RBAC -------------------------------------------------------------------------


def test_rbac_default_is_exactly_pods_claims_slices_tokenreviews(
    rendered: dict[str, list[Doc]],
) -> None:
    docs = rendered["default"]
    assert not find(docs, "Role")
    role = one(docs, "ClusterRole", FULLNAME)
    assert rules(role) == COLLECTOR_RULES
    binding = one(docs, "ClusterRoleBinding", FULLNAME)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    sa = one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]


def test_rbac_without_pushes_reads_pods_and_allocations_only(
    rendered: dict[str, list[Doc]],
) -> None:
    assert (
        rules(one(rendered["agent-off"], "ClusterRole", FULLNAME))
        == POD_READ | NODE_READ | ALLOCATION_RULES | READ_AUTH_RULES
    )
    # and without kubernetes read auth, no TokenReviews either
    docs = template("-f", CHART / "ci" / "agent-off-values.yaml", "--set", "readAuth.mode=none")
    assert rules(one(docs, "ClusterRole", FULLNAME)) == POD_READ | NODE_READ | ALLOCATION_RULES
    # capacity off: no Nodes
    docs = template(
        "-f", CHART / "ci" / "agent-off-values.yaml", "--set", "collector.settings.capacity=false"
    )
    assert (
        rules(one(docs, "ClusterRole", FULLNAME)) == POD_READ | ALLOCATION_RULES | READ_AUTH_RULES
    )
    assert env_of(one(docs, "Deployment"))["HAMI_COLLECTOR_CAPACITY"] == "false"


def test_rbac_namespaced_discovery(rendered: dict[str, list[Doc]]) -> None:
    # Agent, allocations and capacity off: one Role per namespace; cluster-scoped, only
    # the reviews of kubernetes read auth (no pods, no nodes) and the readers' roles.
    docs = rendered["namespaced-agent-off"]
    assert rules(one(docs, "ClusterRole", FULLNAME)) == READ_AUTH_RULES
    assert {r["metadata"]["name"] for r in find(docs, "ClusterRole")} == {
        FULLNAME,
        *READER_RULES,
    }
    # ... and with readAuth none, nothing cluster-scoped at all.
    plain = template(
        "-f", CHART / "ci" / "namespaced-agent-off-values.yaml", "--set", "readAuth.mode=none"
    )
    assert not find(plain, "ClusterRole")
    assert not find(plain, "ClusterRoleBinding")
    roles = find(docs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["hami-system", "kube-system"]
    assert all(rules(r) == POD_READ for r in roles)
    for binding in find(docs, "RoleBinding"):
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"][0]["namespace"] == NAMESPACE
    # Agent on: push attribution keeps its cluster-wide grant (and says so in NOTES).
    docs = rendered["namespaced"]
    assert len(find(docs, "Role")) == 2
    assert rules(one(docs, "ClusterRole", FULLNAME)) == COLLECTOR_RULES


def test_rbac_never_grants_more(rendered: dict[str, list[Doc]]) -> None:
    for name, docs in rendered.items():
        for role in find(docs, "ClusterRole") + find(docs, "Role"):
            granted = rules(role)
            reader = READER_RULES.get(role["metadata"]["name"])
            if reader is not None:  # the readers' roles: exactly their rules
                assert role["kind"] == "ClusterRole", name
                assert granted == reader, name
                continue
            assert granted <= COLLECTOR_RULES, name
            assert not any("*" in part for rule in granted for part in rule), name
        # The agent's service account is bound to nothing.
        for binding in find(docs, "ClusterRoleBinding") + find(docs, "RoleBinding"):
            assert all(s["name"] != AGENT for s in binding["subjects"]), name


# --- workloads ----------------------------------------------------------------------


def test_every_container_is_locked_down(rendered: dict[str, list[Doc]]) -> None:
    # Who runs as whom, and what the kubelet and Pod Security Admission make of it:
    # tests/integration/test_pod_security.py.
    for name, docs in rendered.items():
        for workload in collectors(docs) + find(docs, "DaemonSet"):
            pod = workload["spec"]["template"]["spec"]
            where = f"{name}: {workload['kind']}"
            assert pod["securityContext"]["runAsUser"] == 65532, where
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
            assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), where
            assert not pod.get("initContainers"), where
            for c in pod["containers"]:
                sc = c["securityContext"]
                assert sc["readOnlyRootFilesystem"] is True, where
                assert sc["allowPrivilegeEscalation"] is False, where
                assert sc["capabilities"] == {"drop": ["ALL"]}, where
                assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, where
                assert not sc.get("privileged"), where
                assert c["resources"]["requests"], where
                assert c["resources"]["limits"]["memory"], where


def test_collector_deployment_and_service(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["default"]
    deployment = one(docs, "Deployment", FULLNAME)
    c = container(deployment)
    assert c["command"] == ["hami-collector"]
    assert c["args"] == ["serve"]
    assert c["image"] == f"hami-usage-collector:{APP_VERSION}"
    assert c["ports"] == [{"name": "http", "containerPort": 9396, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    # /readyz fails while the query loops compile (up to ~30 s on a slow node): only the
    # readiness probe reads it, no startupProbe, and liveness (/healthz, up at once)
    # gives a minute before a restart.
    assert "startupProbe" not in c
    live = c["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] >= 60
    # a restarted container loads the compiled loops from the pod's emptyDir
    cache = next(e["value"] for e in c["env"] if e["name"] == "NUMBA_CACHE_DIR")
    tmp = next(m for m in c["volumeMounts"] if m["mountPath"] == "/tmp")
    assert cache.startswith("/tmp/")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert "emptyDir" in next(v for v in volumes if v["name"] == tmp["name"])
    service = one(docs, "Service", FULLNAME)
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 9396, "targetPort": "http", "protocol": "TCP"}
    ]
    selector = service["spec"]["selector"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert selector == deployment["spec"]["selector"]["matchLabels"]
    assert one(docs, "ServiceAccount", FULLNAME)
    assert not find(docs, "PodDisruptionBudget")


def test_pdb_with_two_replicas(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["replicas"]
    assert one(docs, "Deployment")["spec"]["replicas"] == 2
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert (
        pdb["spec"]["selector"]["matchLabels"] == one(docs, "Service", FULLNAME)["spec"]["selector"]
    )


def test_agent_daemonset(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["default"]
    ds = one(docs, "DaemonSet", AGENT)
    pod = ds["spec"]["template"]["spec"]
    c = container(ds)
    assert c["command"] == ["hami-agent"]
    assert c["args"] == ["run"]
    assert pod["serviceAccountName"] == AGENT
    assert pod["automountServiceAccountToken"] is False
    # The region folder, the host's /proc and the kubelet's pod-resources folder: hostPaths,
    # mounted read-only; no other host path, and not the host's PID namespace.
    volumes = {v["name"]: v for v in pod["volumes"]}
    host = [v for v in pod["volumes"] if "hostPath" in v]
    paths = [v["hostPath"]["path"] for v in host]
    assert paths == ["/usr/local/vgpu", "/proc", "/var/lib/kubelet/pod-resources"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    for volume in host:
        assert mounts[volume["name"]]["readOnly"] is True
    assert "hostPID" not in pod
    at = {v["hostPath"]["path"]: mounts[v["name"]]["mountPath"] for v in host}
    agent_env = env_of(ds)
    assert at["/proc"] == agent_env["HAMI_AGENT_HOST_PROC"] == "/host/proc"
    socket = Path(agent_env["HAMI_AGENT_POD_RESOURCES_SOCKET"])
    assert str(socket.parent) == at["/var/lib/kubelet/pod-resources"]
    # the kubelet's socket is root's: user 0 (so not runAsNonRoot, which the kubelet would
    # refuse with user 0), but no capability and nothing writable
    assert c["securityContext"]["runAsUser"] == 0
    assert c["securityContext"]["runAsNonRoot"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    # The projected token carries the audience the collector checks.
    collector_env = env_of(one(docs, "Deployment"))
    (source,) = volumes["token"]["projected"]["sources"]
    assert (
        source["serviceAccountToken"]["audience"] == collector_env["HAMI_COLLECTOR_PUSH_AUDIENCE"]
    )
    env = env_of(ds)
    assert Path(env["HAMI_AGENT_TOKEN_FILE"]) == (
        Path(mounts["token"]["mountPath"]) / source["serviceAccountToken"]["path"]
    )
    assert env["HAMI_AGENT_COLLECTOR"] == URL
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    node_name = next(e for e in c["env"] if e["name"] == "NODE_NAME")
    assert node_name["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    # Only this agent may push.
    assert collector_env["HAMI_COLLECTOR_PUSH_SERVICE_ACCOUNTS"] == f"{NAMESPACE}/{AGENT}"
    # GPU nodes, tolerating the GPU taint.
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert len(terms["nodeSelectorTerms"]) == 2
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert c["livenessProbe"]["httpGet"]["port"] == "http"


def test_agent_image_is_its_own(rendered: dict[str, list[Doc]]) -> None:
    version = APP_VERSION
    c = container(one(rendered["default"], "DaemonSet"))
    assert (c["image"], c["imagePullPolicy"]) == (
        f"hami-usage-collector-agent:{version}",
        "IfNotPresent",
    )
    # the collector's digest names the collector's image: the agent keeps the tag
    full = container(one(rendered["full"], "DaemonSet"))
    assert full["image"] == f"registry.example.com/hami-usage-collector-agent:{version}"
    tagged = template("--set", "image.tag=1.2.3", "--set", "image.pullPolicy=Always")
    c = container(one(tagged, "DaemonSet"))
    assert (c["image"], c["imagePullPolicy"]) == ("hami-usage-collector-agent:1.2.3", "Always")
    digest = "sha256:" + "b" * 64
    own = template(
        "--set",
        "agent.image.repository=registry.example.com/agent",
        "--set",
        "agent.image.tag=v9",
        "--set",
        "agent.image.pullPolicy=Never",
        "--set",
        f"agent.image.digest={digest}",
    )
    c = container(one(own, "DaemonSet"))
    assert (c["image"], c["imagePullPolicy"]) == (f"registry.example.com/agent@{digest}", "Never")
    assert container(one(own, "Deployment"))["image"] == f"hami-usage-collector:{version}"


def test_agent_off_the_pod_resources_socket_runs_as_the_pod_s_user() -> None:
    c = container(one(template("--set", "agent.podResources.enabled=false"), "DaemonSet"))
    assert c["securityContext"]["runAsNonRoot"] is True
    assert "runAsUser" not in c["securityContext"]  # the pod's 65532


def test_agent_options(rendered: dict[str, list[Doc]]) -> None:
    pod = one(rendered["dra"], "DaemonSet")["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    full = one(rendered["full"], "DaemonSet")
    pod = full["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-node-critical"
    assert "affinity" not in pod
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    env = env_of(full)
    assert env["HAMI_AGENT_NVML"] == "false"
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    assert env["HAMI_AGENT_GRACE"] == "600"


def test_agent_off_means_no_agent_and_no_pushes(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["agent-off"]
    assert not find(docs, "DaemonSet")
    assert [sa["metadata"]["name"] for sa in find(docs, "ServiceAccount")] == [FULLNAME]
    assert env_of(one(docs, "Deployment"))["HAMI_COLLECTOR_PUSH_SERVICE_ACCOUNTS"] == ""


@pytest.mark.parametrize(
    ("values", "flavours", "namespaces"),
    [
        ("default", ["hami", "volcano", "kai"], []),
        ("hami", ["hami"], ["kube-system"]),
        ("volcano", ["volcano"], []),
        ("kai", ["kai"], ["kai-resource-isolator"]),
        ("dra", [], []),
    ],
)
def test_discovery_flavours(
    rendered: dict[str, list[Doc]], values: str, flavours: list[str], namespaces: list[str]
) -> None:
    env = env_of(one(rendered[values], "Deployment"))
    settings = settings_from(CollectorSettings, env)
    assert settings.flavours == flavours
    assert settings.namespaces == namespaces
    assert {k for k in env if k.endswith(("_SELECTOR", "_PORT"))} == {
        f"HAMI_COLLECTOR_{f.upper()}_{what}" for f in flavours for what in ("SELECTOR", "PORT")
    }


# --- the programs accept what the chart renders --------------------------------------


def settings_from(model: type[S], env: Mapping[str, str]) -> S:
    """The program's settings model, built from exactly this environment."""
    with mock.patch.dict(os.environ, dict(env), clear=True):
        return model()


def unknown_settings(env: Mapping[str, str], prefix: str, model: type[S]) -> set[str]:
    """Env vars of ``prefix`` that name no setting (pydantic-settings would ignore them)."""
    named = {k.removeprefix(prefix).lower() for k in env if k.startswith(prefix)}
    return named - set(model.model_fields)


def secret_files(env: Mapping[str, str], folder: Path) -> dict[str, str]:
    """``env`` with the remote-write Secret's files moved to ``folder``, where they now exist.

    The collector refuses a credentials file that is not there at start.
    """
    out = dict(env)
    for name, value in env.items():
        if value.startswith(f"{REMOTE_WRITE_MOUNT}/"):
            path = folder / value.removeprefix(f"{REMOTE_WRITE_MOUNT}/")
            path.write_text("secret")
            out[name] = str(path)
    return out


def test_programs_accept_the_rendered_env(rendered: dict[str, list[Doc]], tmp_path: Path) -> None:
    for name, docs in rendered.items():
        for workload in collectors(docs):
            env = secret_files(env_of(workload), tmp_path)
            assert not unknown_settings(env, "HAMI_COLLECTOR_", CollectorSettings), name
            collector = settings_from(CollectorSettings, env)
            assert collector.listen == "0.0.0.0:9396", name
            assert collector.log_format == "json", name
        for ds in find(docs, "DaemonSet"):
            assert not unknown_settings(env_of(ds), "HAMI_AGENT_", AgentSettings), name
            agent = settings_from(AgentSettings, {**env_of(ds), "NODE_NAME": "gpu-node-1"})
            assert agent.node == "gpu-node-1", name
            assert agent.listen == "0.0.0.0:9397", name
            assert agent.token_file is not None, name
    full_env = secret_files(env_of(one(rendered["full"], "Deployment")), tmp_path)
    full = settings_from(CollectorSettings, full_env)
    assert (full.interval, full.timeout, full.history_max_points) == (30, 7.5, 40_000_000)
    assert full.passthrough_deny == ["go_.*", "python_.*"]
    assert full.push_service_accounts == [f"{NAMESPACE}/{AGENT}", "other-ns/other-agent"]
    assert full.push_audience == "gpu-usage"
    assert full.external_labels() == [("cluster", "prod"), ("region", "eu-1")]
    assert len(full.remote_write_url) == 1


def schema() -> Doc:
    loaded: Doc = json.loads((CHART / "values.schema.json").read_text())
    return loaded


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@pytest.mark.parametrize(
    ("section", "model", "owned"),
    [
        ("collector", CollectorSettings, COLLECTOR_OWNED),
        ("agent", AgentSettings, AGENT_OWNED),
    ],
)
def test_settings_schema_follows_the_programs(
    section: str, model: type[CollectorSettings | AgentSettings], owned: set[str]
) -> None:
    offered = {
        snake(k) for k in schema()["properties"][section]["properties"]["settings"]["properties"]
    }
    fields = set(model.model_fields)
    assert not offered & owned
    assert offered | owned == fields, f"unmapped settings: {sorted(fields - offered - owned)}"


def test_values_defaults_follow_the_programs() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    collector, agent = CollectorSettings(), AgentSettings()
    discovery = values["discovery"]
    assert discovery["flavours"] == collector.flavours
    for flavour in collector.flavours:
        assert discovery[flavour]["selector"] == getattr(collector, f"{flavour}_selector")
        assert discovery[flavour]["port"] == getattr(collector, f"{flavour}_port")
    assert values["push"]["audience"] == collector.push_audience
    assert values["agent"]["roots"] == agent.roots
    assert values["service"]["port"] == 9396


def test_chart_version_follows_the_project() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == project["version"]


# --- Prometheus Operator ------------------------------------------------------------

DURATION = re.compile(
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)
# Fields of the CRDs (monitoring.coreos.com/v1) the chart may use, by object.
MONITOR_SPEC_FIELDS = {
    "ServiceMonitor": {"endpoints", "selector", "namespaceSelector", "jobLabel", "targetLabels"},
    "PodMonitor": {"podMetricsEndpoints", "selector", "namespaceSelector", "jobLabel"},
}
ENDPOINT_FIELDS = {
    "port",
    "path",
    "scheme",
    "interval",
    "scrapeTimeout",
    "honorLabels",
    "metricRelabelings",
    "relabelings",
    "authorization",
    "basicAuth",
    "tlsConfig",
}
# ServiceMonitor endpoints only: PodMonitor's podMetricsEndpoints never had it.
SERVICE_MONITOR_ENDPOINT_FIELDS = ENDPOINT_FIELDS | {"bearerTokenFile"}
# tlsConfig fields (SafeTLSConfig; caFile & co. are ServiceMonitor-only, not used).
TLS_CONFIG_FIELDS = {"ca", "cert", "keySecret", "serverName", "insecureSkipVerify"}
RELABEL_ACTIONS = {
    "replace",
    "keep",
    "drop",
    "hashmod",
    "labelmap",
    "labeldrop",
    "labelkeep",
    "lowercase",
    "uppercase",
    "keepequal",
    "dropequal",
}


def monitors(docs: Sequence[Doc]) -> Iterator[Doc]:
    """The ServiceMonitors and PodMonitors (the PrometheusRule has a test of its own)."""
    return (d for d in docs if d["apiVersion"] == MONITOR_API and d["kind"] != "PrometheusRule")


def test_monitor_kinds_match_their_crds(rendered: dict[str, list[Doc]]) -> None:
    seen = set()
    for name, docs in rendered.items():
        for monitor in monitors(docs):
            kind = monitor["kind"]
            seen.add(kind)
            where = f"{name}: {kind}"
            assert kind in MONITOR_SPEC_FIELDS, where
            assert set(monitor) == {"apiVersion", "kind", "metadata", "spec"}, where
            assert monitor["metadata"]["name"], where
            assert monitor["metadata"]["namespace"], where
            spec = monitor["spec"]
            assert set(spec) <= MONITOR_SPEC_FIELDS[kind], where
            # Required by the CRDs: the selector (and, to scrape anything, endpoints).
            selector = spec["selector"]["matchLabels"]
            if kind == "ServiceMonitor":
                # only the headless Service: one target per collector pod, none twice
                chosen = [
                    s["metadata"]["name"]
                    for s in find(docs, "Service")
                    if selector.items() <= s["metadata"]["labels"].items()
                ]
                assert chosen == [f"{FULLNAME}-headless"], where
            else:
                for workload in collectors(docs):
                    labels = workload["spec"]["template"]["metadata"]["labels"]
                    assert selector.items() <= labels.items(), where
            assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}, where
            endpoints = spec["endpoints" if kind == "ServiceMonitor" else "podMetricsEndpoints"]
            assert endpoints, where
            for endpoint in endpoints:
                allowed = (
                    SERVICE_MONITOR_ENDPOINT_FIELDS if kind == "ServiceMonitor" else ENDPOINT_FIELDS
                )
                assert set(endpoint) <= allowed, where
                assert set(endpoint.get("tlsConfig", {})) <= TLS_CONFIG_FIELDS, where
                assert endpoint["port"] == "http", where
                assert endpoint["path"] == "/metrics", where
                assert DURATION.match(endpoint["interval"]), where
                assert DURATION.match(endpoint["scrapeTimeout"]), where
                relabels = [
                    *endpoint.get("metricRelabelings", []),
                    *endpoint.get("relabelings", []),
                ]
                for relabel in relabels:
                    assert relabel.get("action", "replace") in RELABEL_ACTIONS, where
    assert seen == {"ServiceMonitor", "PodMonitor"}


def test_monitors_honour_labels(rendered: dict[str, list[Doc]]) -> None:
    sm = one(rendered["servicemonitor"], "ServiceMonitor")
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert [e["honorLabels"] for e in sm["spec"]["endpoints"]] == [True]
    pm = one(rendered["podmonitor"], "PodMonitor")
    assert pm["metadata"]["namespace"] == "monitoring"
    assert [e["honorLabels"] for e in pm["spec"]["podMetricsEndpoints"]] == [True]


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_monitor_only_where_the_api_is_or_forced(kind: str) -> None:
    asked = ("--set", "monitor.enabled=true", "--set", f"monitor.kind={kind}")
    assert not find(template(*asked), kind)
    assert find(template(*asked, "--api-versions", f"{MONITOR_API}/{kind}"), kind)
    assert find(template(*asked, "--set", "monitor.force=true"), kind)
    assert not find(template("--set", "monitor.force=true"), kind)  # not enabled


# --- PrometheusRule ---------------------------------------------------------------

RULES_FILE = ROOT / "rules" / "hami-usage.rules.yaml"
IDLE = "(hami_container_idle_seconds) > 7200"
RULE_GROUP_FIELDS = {"name", "interval", "rules", "limit", "partial_response_strategy"}
RULE_FIELDS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}


def test_rules_copy_is_the_original() -> None:
    copy = CHART / "rules" / "hami-usage.rules.yaml"
    assert copy.read_bytes() == RULES_FILE.read_bytes(), f"cp {RULES_FILE} {copy}"


def expected_rules(idle_seconds: int, runbook: str) -> Doc:
    """The rule file with the chart's two substitutions made by hand."""
    text = RULES_FILE.read_text()
    assert IDLE in text
    text = text.replace(IDLE, f"(hami_container_idle_seconds) > {idle_seconds}")
    text = text.replace('runbook_url: "docs/runbook.md#', f'runbook_url: "{runbook}#')
    expected: Doc = yaml.safe_load(text)
    return expected


def test_prometheus_rule_is_the_rule_file(rendered: dict[str, list[Doc]], tmp_path: Path) -> None:
    rule = one(rendered["full"], "PrometheusRule")
    assert set(rule) == {"apiVersion", "kind", "metadata", "spec"}
    assert rule["apiVersion"] == MONITOR_API
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    base = "https://git.example.com/hami-usage-collector/blob/v0.1.0/docs/runbook.md"
    assert rule["spec"] == expected_rules(90 * 60, base)
    # The fields the CRD knows, and nothing else.
    for group in rule["spec"]["groups"]:
        assert set(group) <= RULE_GROUP_FIELDS
        for each in group["rules"]:
            assert set(each) <= RULE_FIELDS
            assert ("alert" in each) != ("record" in each)
    # What Prometheus would load from it is valid (the real promtool says so).
    loaded = tmp_path / "rendered.rules.yaml"
    loaded.write_text(yaml.safe_dump(rule["spec"]))
    done = subprocess.run(
        [prometheus_tool("promtool"), "check", "rules", str(loaded)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for name, docs in rendered.items():
        assert name == "full" or not find(docs, "PrometheusRule"), name


def test_prometheus_rule_defaults_and_where_it_renders() -> None:
    asked = ("--set", "rules.enabled=true")
    assert not find(template(*asked), "PrometheusRule")
    api = f"{MONITOR_API}/PrometheusRule"
    (rule,) = find(template(*asked, "--api-versions", api), "PrometheusRule")
    assert rule["spec"] == expected_rules(7200, "docs/runbook.md")
    assert find(template(*asked, "--set", "rules.force=true"), "PrometheusRule")
    assert not find(template("--set", "rules.force=true"), "PrometheusRule")  # not enabled
    (daily,) = find(
        template(*asked, "--set", "rules.force=true", "--set", "rules.idleFor=1d"), "PrometheusRule"
    )
    assert daily["spec"] == expected_rules(86400, "docs/runbook.md")


# --- Grafana and NetworkPolicy --------------------------------------------------------


def test_grafana_configmaps(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["grafana"]
    dashboard = one(docs, "ConfigMap", f"{FULLNAME}-dashboard")
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    original = (ROOT / "dashboards" / "hami-usage.json").read_text()
    assert dashboard["data"]["hami-usage.json"] == original
    datasource = one(docs, "ConfigMap", f"{FULLNAME}-datasource")
    assert datasource["metadata"]["labels"]["grafana_datasource"] == "1"
    provisioning = yaml.safe_load(datasource["data"]["hami-usage-datasource.yaml"])
    (source,) = provisioning["datasources"]
    assert provisioning["apiVersion"] == 1
    assert source["type"] == "prometheus"
    assert source["url"] == f"{URL}/prometheus"
    assert source["uid"] == "hami-usage-collector"
    assert source["jsonData"]["timeInterval"] == "15s"
    assert "secureJsonData" not in source
    assert not find(rendered["default"], "ConfigMap")


def test_grafana_datasource_sends_a_token_from_grafana_s_environment() -> None:
    docs = template(
        "--set",
        "grafana.datasource.enabled=true",
        "--set",
        "grafana.datasource.tokenEnv=HAMI_TOKEN",
    )
    datasource = one(docs, "ConfigMap", f"{FULLNAME}-datasource")
    (source,) = yaml.safe_load(datasource["data"]["hami-usage-datasource.yaml"])["datasources"]
    assert source["jsonData"]["httpHeaderName1"] == "Authorization"
    assert source["secureJsonData"] == {"httpHeaderValue1": "Bearer ${HAMI_TOKEN}"}


def test_network_policy(rendered: dict[str, list[Doc]]) -> None:
    assert not find(rendered["default"], "NetworkPolicy")
    policy = one(rendered["networkpolicy"], "NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "collector"
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    agents, clients = policy["ingress"]
    assert agents["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "agent"
    assert agents["ports"] == clients["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert clients["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }
    monitors_out, api = policy["egress"]
    assert monitors_out["ports"] == [{"port": 9394, "protocol": "TCP"}]
    assert monitors_out["to"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "kube-system"
    ]
    assert monitors_out["to"][1] == {"ipBlock": {"cidr": "10.0.0.0/16"}}
    assert {p["port"] for p in api["ports"]} == {443, 6443}
    assert api["to"] == [{"ipBlock": {"cidr": "172.18.0.2/32"}}]


# --- NOTES and refused values -----------------------------------------------------------


def test_notes_print_the_urls() -> None:
    text = notes()
    for url in (f"{URL}/metrics", f"{URL}/api/v1/nodes", f"{URL}/prometheus"):
        assert url in text
    assert "WARNING" not in text
    assert "cluster-wide" not in text
    namespaced = notes(
        "-f", CHART / "ci" / "namespaced-values.yaml", "--set", "collector.replicas=2"
    )
    assert "cluster-wide read access to pods" in namespaced
    capacity_only = notes(
        "-f",
        CHART / "ci" / "namespaced-agent-off-values.yaml",
        "--set",
        "collector.settings.capacity=true",
    )
    assert "read access to\nthe (cluster-scoped) Nodes" in capacity_only
    assert "agents push to every one of them" in namespaced
    assert "does not serve" in notes("--set", "monitor.enabled=true")


def test_notes_give_the_route_to_the_pages_and_the_pod_security_label() -> None:
    text = notes()
    route = [
        f"kubectl -n {NAMESPACE} port-forward svc/{FULLNAME} 9396:9396",
        "kubectl -n monitoring create token prometheus-k8s",
        "open http://localhost:9396/login and paste the token",
    ]
    lines = [line.strip() for line in text.splitlines()]
    starts = [next(i for i, line in enumerate(lines) if step in line) for step in route]
    assert starts == sorted(starts)
    assert starts[-1] - starts[0] == 2, "three commands in a row"
    assert f"--clusterrole={CLUSTER_READER}" in text
    assert (
        f"kubectl label namespace {NAMESPACE} pod-security.kubernetes.io/enforce=privileged" in text
    )
    assert '"restricted"' in text
    # no cluster reader to borrow a token from, no RBAC: say what a reader needs
    bare = notes("--set-json", "readAuth.clusterReaders=[]", "--set", "rbac.create=false")
    assert "create token <service account" in bare
    assert "nonResourceURLs" in bare
    assert "--clusterrole" not in bare
    alone = notes("-f", CHART / "ci" / "agent-off-values.yaml", "--set", "readAuth.mode=none")
    assert "pod-security.kubernetes.io/enforce=restricted" in alone
    assert "open http://localhost:9396/ " in alone
    assert "/login" not in alone
    tls = notes(*TLS)
    assert "open https://localhost:9396/login" in tls


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "collector.replicas=two"], "/collector/replicas"),
        (["--set", "collector.replica=2"], "additional properties 'replica' not allowed"),
        (["--set-json", 'discovery.flavours=["hami","nvidia"]'], "/discovery/flavours/1"),
        (["--set-json", 'discovery.namespaces=["Kube_System"]'], "/discovery/namespaces/0"),
        (["--set", "discovery.hami.port=70000"], "/discovery/hami/port"),
        (["--set", "monitor.kind=Probe"], "/monitor/kind"),
        (["--set", "monitor.interval=soon"], "/monitor/interval"),
        (["--set", "rules.idleFor=soon"], "/rules/idleFor"),
        (
            [
                "--set",
                "rules.enabled=true",
                "--set",
                "rules.force=true",
                "--set",
                "rules.idleFor=0h",
            ],
            "rules.idleFor must be a positive duration",
        ),
        (["--set", 'rules.runbookBaseUrl=docs"x'], "/rules/runbookBaseUrl"),
        (["--set", "agent.hostPath.path=usr/local/vgpu"], "/agent/hostPath/path"),
        (["--set", "collector.settings.listen=0.0.0.0:1"], "additional properties 'listen'"),
        (["--set", "collector.settings.interval=-5"], "/collector/settings/interval"),
        (["--set", "collector.logFormat=xml"], "/collector/logFormat"),
        (["--set", "service.type=NodePort"], "/service/type"),
        (["--set", "push.extraServiceAccounts[0]=agent"], "/push/extraServiceAccounts/0"),
        (["--set", "image.digest=latest"], "/image/digest"),
        (["--set", "agent.image.digest=latest"], "/agent/image/digest"),
        (["--set", "agent.image.pullPolicy=Sometimes"], "/agent/image/pullPolicy"),
        # the kubelet refuses runAsNonRoot with user 0: refused here, before it is installed
        (
            [
                "--set",
                "agent.podResources.enabled=false",
                "--set",
                "agent.securityContext.runAsUser=0",
            ],
            "agent: runAsNonRoot true with runAsUser 0",
        ),
        (
            ["--set", "collector.podSecurityContext.runAsUser=0"],
            "collector: runAsNonRoot true with runAsUser 0",
        ),
        (
            ["--set-json", "discovery.flavours=[]", "--set", "agent.enabled=false"],
            "nothing to collect",
        ),
        (["--set-json", 'agent.roots=["/var/lib/vgpu"]'], "is not inside agent.hostPath.path"),
        (
            ["--set", "collector.replicas=2", "--set", "collector.pdb.minAvailable=2"],
            "minAvailable",
        ),
        (
            ["--set", "remoteWrite.existingSecret=rw"],
            "remoteWrite.existingSecret is set but names no key",
        ),
        (["--set", "remoteWrite.caKey=ca.crt"], "need remoteWrite.existingSecret"),
        (
            ["--set", "remoteWrite.existingSecret=rw", "--set", "remoteWrite.caKey=ca.crt"],
            "collector.settings.remoteWriteUrl is empty",
        ),
        (
            [
                *REMOTE_WRITE_URL,
                "--set",
                "remoteWrite.existingSecret=rw",
                "--set",
                "remoteWrite.passwordKey=password",
            ],
            "go together",
        ),
        (
            [
                *REMOTE_WRITE_URL,
                "--set",
                "collector.settings.remoteWriteUsername=u",
                "--set",
                "remoteWrite.existingSecret=rw",
                "--set",
                "remoteWrite.passwordKey=password",
                "--set",
                "remoteWrite.bearerTokenKey=token",
            ],
            "exclude each other",
        ),
        (["--set", "remoteWrite.existingSecret=Not_A_Name"], "/remoteWrite/existingSecret"),
        (["--set", "remoteWrite.caKey=ca/crt"], "/remoteWrite/caKey"),
        (
            ["--set-json", 'collector.settings.externalLabel=["replica=a"]'],
            "replica is set by the chart",
        ),
        (["--set", "collector.settings.replica=a"], "additional properties 'replica'"),
    ],
)
def test_bad_values_are_refused(args: list[str], message: str) -> None:
    with pytest.raises(HelmError) as refused:
        template(*args)
    assert message in str(refused.value)


def test_lint_refuses_bad_values_too() -> None:
    with pytest.raises(HelmError, match="/collector/replicas"):
        helm("lint", "--strict", CHART, "--set", "collector.replicas=two")


# --- replicas and shards ----------------------------------------------------------------


def test_replicas_push_through_the_headless_service_with_anti_affinity(
    rendered: dict[str, list[Doc]],
) -> None:
    docs = rendered["replicas"]
    headless = one(docs, "Service", f"{FULLNAME}-headless")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"] == one(docs, "Service", FULLNAME)["spec"]["selector"]
    agent = settings_from(
        AgentSettings, {**env_of(one(docs, "DaemonSet")), "NODE_NAME": "gpu-node-1"}
    )
    assert agent.collector_urls() == [f"http://{FULLNAME}-headless.{NAMESPACE}:9396"]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    selector = term["podAffinityTerm"]["labelSelector"]["matchLabels"]
    assert selector == headless["spec"]["selector"]
    # one replica: the plain Service, no anti-affinity, no PDB
    default = rendered["default"]
    assert "affinity" not in one(default, "Deployment")["spec"]["template"]["spec"]
    assert env_of(one(default, "DaemonSet"))["HAMI_AGENT_COLLECTOR"] == URL


def test_shards_are_statefulsets_that_agents_find_by_their_nodes_shard(
    rendered: dict[str, list[Doc]],
) -> None:
    docs = rendered["sharded"]
    assert not find(docs, "Deployment")
    sets = find(docs, "StatefulSet")
    assert [s["metadata"]["name"] for s in sets] == [f"{FULLNAME}-shard-{i}" for i in range(4)]
    agent_env = {**env_of(one(docs, "DaemonSet")), "NODE_NAME": "gpu-node-1"}
    agent = settings_from(AgentSettings, agent_env)
    assert agent.shard_count == 4
    for index, workload in enumerate(sets):
        spec = workload["spec"]
        assert spec["replicas"] == 2
        settings = settings_from(CollectorSettings, env_of(workload))
        assert (settings.shard_index, settings.shard_count) == (index, 4)
        # its headless Service names exactly its pods, and is what the agents resolve
        service = one(docs, "Service", spec["serviceName"])
        assert service["spec"]["clusterIP"] == "None"
        labels = spec["template"]["metadata"]["labels"]
        assert service["spec"]["selector"] == spec["selector"]["matchLabels"]
        assert service["spec"]["selector"].items() <= labels.items()
        assert labels["hami-usage-collector/shard"] == str(index)
        node = next(f"gpu-node-{n}" for n in range(100) if shard_of(f"gpu-node-{n}", 4) == index)
        urls = settings_from(AgentSettings, {**agent_env, "NODE_NAME": node}).collector_urls()
        assert urls == [f"http://{service['metadata']['name']}.{NAMESPACE}:9396"]
        # a PDB and required anti-affinity per shard
        pdb = one(docs, "PodDisruptionBudget", spec["serviceName"])
        assert pdb["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"]
        affinity = spec["template"]["spec"]["affinity"]["podAntiAffinity"]
        (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    # the ServiceMonitor scrapes every pod of every shard through the headless Service
    monitor = one(docs, "ServiceMonitor")
    headless = one(docs, "Service", f"{FULLNAME}-headless")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= headless["metadata"]["labels"].items()
    )
    for workload in sets:
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert headless["spec"]["selector"].items() <= labels.items()


def test_notes_of_the_sharded_layout() -> None:
    text = notes("-f", CHART / "ci" / "sharded-values.yaml")
    assert "4 shards x 2 replicas" in text
    assert f"http://{FULLNAME}-shard-{{shard}}.{NAMESPACE}:9396" in text
    assert "WARNING" not in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "collector.shards=0"], "/collector/shards"),
        (["--set", "collector.antiAffinity=strict"], "/collector/antiAffinity"),
    ],
)
def test_bad_scaling_values_are_refused(args: list[str], message: str) -> None:
    with pytest.raises(HelmError, match=message):
        template(*args)


# --- remote write: the replica label and the credentials Secret ------------------------


def test_every_collector_pod_names_itself_as_the_replica(rendered: dict[str, list[Doc]]) -> None:
    for name, docs in rendered.items():
        for workload in collectors(docs):
            env = {e["name"]: e for e in container(workload)["env"]}
            replica = env["HAMI_COLLECTOR_REPLICA"]
            assert replica["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}, name


def test_remote_write_credentials_come_from_the_secret(rendered: dict[str, list[Doc]]) -> None:
    deployment = one(rendered["full"], "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "remote-write"]
    assert volume["secret"]["secretName"] == "vminsert-credentials"
    assert volume["secret"]["items"] == [
        {"key": "token", "path": "token"},
        {"key": "ca.crt", "path": "ca.crt"},
    ]
    (mount,) = [m for m in container(deployment)["volumeMounts"] if m["name"] == "remote-write"]
    assert mount == {"name": "remote-write", "mountPath": REMOTE_WRITE_MOUNT, "readOnly": True}
    env = env_of(deployment)
    assert env["HAMI_COLLECTOR_REMOTE_WRITE_BEARER_TOKEN_FILE"] == f"{REMOTE_WRITE_MOUNT}/token"
    assert env["HAMI_COLLECTOR_REMOTE_WRITE_CA_FILE"] == f"{REMOTE_WRITE_MOUNT}/ca.crt"
    assert "HAMI_COLLECTOR_REMOTE_WRITE_PASSWORD_FILE" not in env
    # nothing mounted, no file settings, without the Secret
    default = one(rendered["default"], "Deployment")
    assert [v["name"] for v in default["spec"]["template"]["spec"]["volumes"]] == ["tmp"]
    assert not [k for k in env_of(default) if k.startswith("HAMI_COLLECTOR_REMOTE_WRITE")]


def test_remote_write_basic_auth_from_the_secret(tmp_path: Path) -> None:
    docs = template(
        *REMOTE_WRITE_URL,
        "--set",
        "collector.settings.remoteWriteUsername=collector",
        "--set",
        "remoteWrite.existingSecret=rw",
        "--set",
        "remoteWrite.passwordKey=password",
        "--set",
        "collector.shards=2",
    )
    for workload in collectors(docs):
        env = env_of(workload)
        assert env["HAMI_COLLECTOR_REMOTE_WRITE_PASSWORD_FILE"] == f"{REMOTE_WRITE_MOUNT}/password"
        settings = settings_from(CollectorSettings, secret_files(env, tmp_path))
        assert settings.remote_write_username == "collector"
        assert settings.remote_write_password_file == tmp_path / "password"
        volumes = workload["spec"]["template"]["spec"]["volumes"]
        (volume,) = [v for v in volumes if v["name"] == "remote-write"]
        assert volume["secret"]["items"] == [{"key": "password", "path": "password"}]


# --- read authorization and TLS -----------------------------------------------------------


def binding_subjects(docs: Sequence[Doc], kind: str, name: str) -> list[Doc]:
    binding = one(docs, kind, name)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": name,
    }
    subjects: list[Doc] = binding["subjects"]
    return subjects


def test_read_auth_kubernetes_by_default(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["default"]
    env = env_of(one(docs, "Deployment"))
    assert env["HAMI_COLLECTOR_READ_AUTH"] == "kubernetes"
    assert env["HAMI_COLLECTOR_READ_AUTH_TTL"] == "60"
    assert "HAMI_COLLECTOR_WEB_CONFIG_FILE" not in env
    settings = settings_from(CollectorSettings, env)
    assert (settings.read_auth, settings.read_auth_ttl) == ("kubernetes", 60)
    # the collector may review tokens and ask what they may read
    assert rules(one(docs, "ClusterRole", FULLNAME)) >= READ_AUTH_RULES
    # the readers' roles, and kube-prometheus' Prometheus bound as a cluster reader
    for name, expected in READER_RULES.items():
        assert rules(one(docs, "ClusterRole", name)) == expected
    assert binding_subjects(docs, "ClusterRoleBinding", CLUSTER_READER) == [PROMETHEUS]
    assert not find(docs, "RoleBinding")
    # the ServiceMonitor sends Prometheus' own token; a PodMonitor has no such field
    (endpoint,) = one(rendered["servicemonitor"], "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["bearerTokenFile"] == SA_TOKEN
    assert endpoint["scheme"] == "http"
    assert "authorization" not in endpoint
    (pod_endpoint,) = one(rendered["podmonitor"], "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert "bearerTokenFile" not in pod_endpoint
    assert "authorization" not in pod_endpoint


def test_monitor_authorization_from_a_secret() -> None:
    credentials = '{"type":"Bearer","credentials":{"name":"reader-token","key":"token"}}'
    for kind, field in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
        docs = template(
            *FORCED_MONITOR,
            "--set",
            f"monitor.kind={kind}",
            "--set-json",
            f"monitor.authorization={credentials}",
        )
        (endpoint,) = one(docs, kind)["spec"][field]
        assert endpoint["authorization"] == json.loads(credentials), kind
        assert "bearerTokenFile" not in endpoint, kind


def test_tenants_get_one_role_binding_per_namespace() -> None:
    tenants = [
        {"namespace": "team-a", "subjects": [{"kind": "Group", "name": "team-a"}]},
        {
            "namespace": "team-b",
            "subjects": [
                {"kind": "ServiceAccount", "name": "grafana", "namespace": "team-b"},
                {"kind": "User", "name": "bob@example.com"},
            ],
        },
    ]
    docs = template(
        "--set-json",
        f"readAuth.tenants={json.dumps(tenants)}",
        "--set-json",
        "readAuth.clusterReaders=[]",
    )
    bindings = find(docs, "RoleBinding")
    assert [b["metadata"]["namespace"] for b in bindings] == ["team-a", "team-b"]
    group = {"kind": "Group", "name": "team-a", "apiGroup": "rbac.authorization.k8s.io"}
    assert [s for b in bindings[:1] for s in b["subjects"]] == [group]
    for binding in bindings:
        assert binding["metadata"]["name"] == TENANT
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": TENANT,
        }
    assert bindings[1]["subjects"] == [
        {"kind": "ServiceAccount", "name": "grafana", "namespace": "team-b"},
        {"kind": "User", "name": "bob@example.com", "apiGroup": "rbac.authorization.k8s.io"},
    ]
    # no cluster readers: the role is shipped, not bound
    assert one(docs, "ClusterRole", CLUSTER_READER)
    assert not find(docs, "ClusterRoleBinding", CLUSTER_READER)
    validate_strict(docs)


def test_read_auth_none_reviews_nothing_and_sends_no_token() -> None:
    docs = template("--set", "readAuth.mode=none", *FORCED_MONITOR)
    assert env_of(one(docs, "Deployment"))["HAMI_COLLECTOR_READ_AUTH"] == "none"
    assert (
        rules(one(docs, "ClusterRole", FULLNAME))
        == POD_READ | NODE_READ | PUSH_RULES | ALLOCATION_RULES
    )
    assert not find(docs, "ClusterRole", CLUSTER_READER)
    assert not find(docs, "ClusterRole", TENANT)
    assert [b["metadata"]["name"] for b in find(docs, "ClusterRoleBinding")] == [FULLNAME]
    (endpoint,) = one(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert "bearerTokenFile" not in endpoint
    assert "authorization" not in endpoint


def self_signed(folder: Path) -> None:
    """tls.crt and tls.key (and ca.crt, the same certificate) in ``folder``, like cert-manager's."""
    done = subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            f"/CN={FULLNAME}.{NAMESPACE}",
            "-keyout",
            str(folder / "tls.key"),
            "-out",
            str(folder / "tls.crt"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    (folder / "ca.crt").write_bytes((folder / "tls.crt").read_bytes())


def validate_strict(docs: Sequence[Doc]) -> None:
    """Every non-Prometheus-Operator manifest against the Kubernetes schemas (strict)."""
    import kubernetes_validate

    for doc in docs:
        if doc["apiVersion"] != MONITOR_API:
            for version in KUBE_VERSIONS:
                kubernetes_validate.validate(doc, version, strict=True)


def test_tls_mounts_the_secret_serves_https_and_agents_trust_its_ca(tmp_path: Path) -> None:
    docs = template(*TLS, *FORCED_MONITOR)
    validate_strict(docs)
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    c = container(deployment)
    env = env_of(deployment)
    assert env["HAMI_COLLECTOR_WEB_CONFIG_FILE"] == WEB_CONFIG_FILE
    # whole Secret volumes, read-only, never subPath (a subPath mount is not updated)
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert volumes["tls"]["secret"]["secretName"] == "huc-tls"
    assert "items" not in volumes["tls"]["secret"]
    assert volumes["web-config"]["secret"]["secretName"] == f"{FULLNAME}-web-config"
    assert mounts["tls"] == {"name": "tls", "mountPath": TLS_MOUNT, "readOnly": True}
    assert Path(mounts["web-config"]["mountPath"]) == Path(WEB_CONFIG_FILE).parent
    assert mounts["web-config"]["readOnly"] is True
    for workload in [deployment, *find(docs, "DaemonSet")]:
        assert not [m for m in container(workload)["volumeMounts"] if "subPath" in m]
    # HTTPS probes of the unauthenticated endpoints
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http", "scheme": "HTTPS"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http", "scheme": "HTTPS"}
    # the web config: the mounted certificate files; the collector loads it
    secret = one(docs, "Secret", f"{FULLNAME}-web-config")
    text = secret["stringData"][Path(WEB_CONFIG_FILE).name]
    config = yaml.safe_load(text)
    assert config == {
        "tls_server_config": {
            "cert_file": f"{TLS_MOUNT}/tls.crt",
            "key_file": f"{TLS_MOUNT}/tls.key",
            "client_auth_type": "NoClientCert",
            "min_version": "TLS12",
        }
    }
    pod_annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert "hami-usage-collector/web-config" in pod_annotations
    self_signed(tmp_path)
    local = tmp_path / "web-config.yaml"
    local.write_text(text.replace(f"{TLS_MOUNT}/", f"{tmp_path}/"))
    assert webconfig.load(local).ssl_context is not None
    assert settings_from(CollectorSettings, env).web_config_file == Path(WEB_CONFIG_FILE)
    # the agent: an https URL and the Secret's CA only
    ds = one(docs, "DaemonSet")
    agent_env = env_of(ds)
    assert agent_env["HAMI_AGENT_COLLECTOR"] == URL.replace("http://", "https://")
    assert agent_env["HAMI_AGENT_COLLECTOR_CA_FILE"] == AGENT_CA_FILE
    agent = settings_from(AgentSettings, {**agent_env, "NODE_NAME": "gpu-node-1"})
    assert agent.collector_ca_file == Path(AGENT_CA_FILE)
    agent_pod = ds["spec"]["template"]["spec"]
    (ca,) = [v for v in agent_pod["volumes"] if v["name"] == "collector-ca"]
    assert ca["secret"]["secretName"] == "huc-tls"
    assert ca["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    (ca_mount,) = [m for m in container(ds)["volumeMounts"] if m["name"] == "collector-ca"]
    assert ca_mount == {
        "name": "collector-ca",
        "mountPath": str(Path(AGENT_CA_FILE).parent),
        "readOnly": True,
    }
    # the monitor scrapes https, checking the certificate against the Secret's CA
    (endpoint,) = one(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["bearerTokenFile"] == SA_TOKEN
    assert endpoint["tlsConfig"] == {
        "ca": {"secret": {"name": "huc-tls", "key": "ca.crt"}},
        "serverName": f"{FULLNAME}.{NAMESPACE}.svc",
    }
    podmonitor = template(*TLS, *FORCED_MONITOR, "--set", "monitor.kind=PodMonitor")
    (pod_endpoint,) = one(podmonitor, "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert pod_endpoint["scheme"] == "https"
    assert pod_endpoint["tlsConfig"] == endpoint["tlsConfig"]


def test_tls_off_renders_no_web_config(rendered: dict[str, list[Doc]]) -> None:
    for name, docs in rendered.items():
        assert not find(docs, "Secret"), name
        for ds in find(docs, "DaemonSet"):
            assert "HAMI_AGENT_COLLECTOR_CA_FILE" not in env_of(ds), name
        for workload in collectors(docs):
            assert "HAMI_COLLECTOR_WEB_CONFIG_FILE" not in env_of(workload), name


def test_tls_with_replicas_shards_and_client_certificates() -> None:
    sharded = template(*TLS, "-f", CHART / "ci" / "sharded-values.yaml")
    env = env_of(one(sharded, "DaemonSet"))
    assert env["HAMI_AGENT_COLLECTOR_SHARDS"] == (
        f"https://{FULLNAME}-shard-{{shard}}.{NAMESPACE}:9396"
    )
    replicas = template(*TLS, "--set", "collector.replicas=2")
    env = env_of(one(replicas, "DaemonSet"))
    assert env["HAMI_AGENT_COLLECTOR"] == f"https://{FULLNAME}-headless.{NAMESPACE}:9396"
    # client certificates checked against the Secret's CA; the agents keep theirs optional
    docs = template(*TLS, "--set", "tls.clientAuthType=VerifyClientCertIfGiven")
    secret = one(docs, "Secret", f"{FULLNAME}-web-config")
    tls = yaml.safe_load(secret["stringData"]["web-config.yaml"])["tls_server_config"]
    assert tls["client_auth_type"] == "VerifyClientCertIfGiven"
    assert tls["client_ca_file"] == f"{TLS_MOUNT}/ca.crt"
    # every client must present one: the kubelet cannot, so the probes only connect
    required = template(
        *TLS,
        "--set",
        "tls.clientAuthType=RequireAndVerifyClientCert",
        "--set",
        "agent.enabled=false",
    )
    c = container(one(required, "Deployment"))
    assert c["livenessProbe"]["tcpSocket"] == {"port": "http"}
    assert "httpGet" not in c["readinessProbe"]
    # a CA from another Secret (no private key on the agents' nodes)
    other = template(*TLS, "--set", "tls.caSecretName=collector-ca")
    (ca,) = [
        v
        for v in one(other, "DaemonSet")["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "collector-ca"
    ]
    assert ca["secret"]["secretName"] == "collector-ca"


def test_basic_read_auth_users_go_to_the_web_config(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=4)).decode()
    docs = template(
        "--set",
        "readAuth.mode=basic",
        "--set-json",
        f'readAuth.basicAuthUsers={{"grafana":"{hashed}"}}',
    )
    env = env_of(one(docs, "Deployment"))
    assert env["HAMI_COLLECTOR_READ_AUTH"] == "basic"
    assert env["HAMI_COLLECTOR_WEB_CONFIG_FILE"] == WEB_CONFIG_FILE
    text = one(docs, "Secret", f"{FULLNAME}-web-config")["stringData"]["web-config.yaml"]
    assert yaml.safe_load(text) == {"basic_auth_users": {"grafana": hashed}}
    local = tmp_path / "web-config.yaml"
    local.write_text(text)
    assert webconfig.load(local).auth is not None
    assert not find(docs, "ClusterRole", CLUSTER_READER)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "readAuth.mode=token"], "/readAuth/mode"),
        (["--set", "readAuth.ttl=0"], "/readAuth/ttl"),
        (
            ["--set-json", 'readAuth.clusterReaders=[{"kind":"ServiceAccount","name":"p"}]'],
            "namespace",
        ),
        (
            ["--set-json", 'readAuth.clusterReaders=[{"kind":"Robot","name":"p"}]'],
            "/readAuth/clusterReaders/0/kind",
        ),
        (["--set-json", 'readAuth.tenants=[{"namespace":"a"}]'], "subjects"),
        (
            [
                "--set-json",
                'readAuth.tenants=[{"namespace":"a","subjects":[{"kind":"Group","name":"g"}]},'
                '{"namespace":"a","subjects":[{"kind":"Group","name":"h"}]}]',
            ],
            "namespace a is listed twice",
        ),
        (["--set", "readAuth.mode=basic"], "readAuth.mode=basic needs readAuth.basicAuthUsers"),
        (["--set", "readAuth.basicAuthUsers.u=plain"], "/readAuth/basicAuthUsers"),
        (["--set", "tls.enabled=true"], "tls.enabled needs tls.secretName"),
        (["--set", "tls.minVersion=TLS10"], "/tls/minVersion"),
        (["--set", "tls.clientAuthType=RequestClientCert"], "/tls/clientAuthType"),
        ([*TLS, "--set", "tls.clientAuthType=RequireAndVerifyClientCert"], "refuses the agents"),
        (
            [*TLS, "--set", "tls.caKey=", "--set", "tls.clientAuthType=VerifyClientCertIfGiven"],
            "needs tls.caKey",
        ),
    ],
)
def test_bad_read_auth_and_tls_values_are_refused(args: list[str], message: str) -> None:
    with pytest.raises(HelmError) as refused:
        template(*args)
    assert message in str(refused.value)

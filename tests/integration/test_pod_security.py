"""Will the cluster run the chart's pods? The kubelet's and Pod Security Admission's rules.

The chart is rendered by the real helm over a matrix of values (every flavour and the
agent-only HAMi-DRA install, TLS on and off, each read-auth mode, PodResources and
attribution on and off, replicas and shards, and every ``ci/`` values file); then every
container and init container of every workload is checked the way the kubelet checks it
before starting it (``verifyRunAsNonRoot``: the effective ``runAsNonRoot`` against the
effective ``runAsUser`` and the ``USER`` of the Dockerfile stage that builds its image), and
every workload against the Pod Security level the docs claim for it, with Pod Security
Admission's own checks. Those rules live in :mod:`testing.podsecurity`, written from the
upstream sources it names; each check is first shown to fail on a pod made to break it.

Many value sets render in one helm run: each is a copy of the chart under its own alias in a
throw-away parent chart (``nameOverride`` keeps the names the chart gives alone); a test
shows the copies render what ``helm template`` of the chart renders.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import shutil
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_chart import CHART, CI_FILES, NAMESPACE, RELEASE, ROOT, Doc, helm, template

from testing import podsecurity as ps

DOCKERFILE = ROOT / "Dockerfile"
DOCS = (ROOT / "docs" / "install.md", CHART / "README.md")
IMAGE_TARGETS = {"hami-usage-collector": "collector", "hami-usage-collector-agent": "agent"}
"""An image's repository (its last path part) -> the Dockerfile target that builds it."""
COMPONENT = "app.kubernetes.io/component"
HOST_PATH_REASON = "hostPathVolumes"
"""The one baseline check the docs say the agent fails, and why: its host folders."""
ROOT_FOR_PODRESOURCES = {"runAsNonRoot", "runAsUser"}
"""Restricted checks the agent fails only while it reads the root-owned PodResources socket."""
BCRYPT = "$2b$04$" + "a" * 53  # the schema's shape of a bcrypt hash; never checked here
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
CHUNKS = 4  # helm runs at once, each rendering a quarter of the matrix


# --- the matrix -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One value set: a name that says what it is, and the values."""

    label: str
    values: Doc


def _tls(on: bool, agent: bool) -> Doc:
    if not on:
        return {"enabled": False}
    if agent:
        return {"enabled": True, "secretName": "huc-tls"}
    # no agent: every client must show a certificate, so the probes become tcpSocket ones
    return {
        "enabled": True,
        "secretName": "huc-tls",
        "caSecretName": "clients-ca",
        "clientAuthType": "RequireAndVerifyClientCert",
    }


def _read_auth(mode: str) -> Doc:
    return (
        {"mode": mode, "basicAuthUsers": {"reader": BCRYPT}} if mode == "basic" else {"mode": mode}
    )


FLAVOURS: list[list[str]] = [["hami"], ["volcano"], ["kai"], ["hami", "volcano", "kai"], []]
SCALES = [(1, 1), (2, 1), (2, 3)]
"""(replicas, shards): one Deployment pod, a Deployment of two, three StatefulSets of two."""


def matrix() -> list[Case]:
    """Every flavour (and none: HAMi-DRA, agent only) x TLS x read auth x agent options x scale."""
    cases = []
    for flavours, tls, auth, agent, (replicas, shards) in itertools.product(
        FLAVOURS, (False, True), ("none", "basic", "kubernetes"), _agent_options(), SCALES
    ):
        if agent is None and not flavours:
            continue  # nothing to collect: the chart refuses it
        values: Doc = {
            "discovery": {"flavours": flavours},
            "tls": _tls(tls, agent is not None),
            "readAuth": _read_auth(auth),
            "collector": {"replicas": replicas, "shards": shards},
            "agent": agent if agent is not None else {"enabled": False},
        }
        label = (
            f"flavours={','.join(flavours) or 'none(DRA)'} tls={tls} auth={auth} "
            f"agent={_agent_label(agent)} replicas={replicas} shards={shards}"
        )
        cases.append(Case(label, values))
    return cases


def _agent_options() -> Iterator[Doc | None]:
    yield None
    for resources, attribution in itertools.product((True, False), (True, False)):
        yield {"podResources": {"enabled": resources}, "attribution": {"enabled": attribution}}


def _agent_label(agent: Doc | None) -> str:
    if agent is None:
        return "off"
    return f"podResources={agent['podResources']['enabled']},attribution={agent['attribution']['enabled']}"


# --- rendering many value sets in one helm run ---------------------------------------------


_SOURCE = re.compile(r"^# Source: [^/]+/charts/(c\d+)/", re.MULTILINE)


def render_many(cases: Sequence[Case], folder: Path) -> list[list[Doc]]:
    """Each case's manifests, as ``helm template`` renders them, in ``CHUNKS`` helm runs."""
    chunks = [{i: cases[i] for i in range(n, len(cases), CHUNKS)} for n in range(CHUNKS)]
    folders = [folder / f"chunk{n}" for n in range(CHUNKS)]
    with ThreadPoolExecutor(CHUNKS) as pool:
        merged = {
            i: docs for out in pool.map(_render_chunk, chunks, folders) for i, docs in out.items()
        }
    return [merged[i] for i in range(len(cases))]


def _render_chunk(cases: dict[int, Case], folder: Path) -> dict[int, list[Doc]]:
    """One helm run of a parent chart holding the chart once per case, as alias ``c<index>``."""
    shutil.copytree(
        CHART,
        folder / "charts" / CHART.name,
        ignore=shutil.ignore_patterns("ci", "README.md"),
    )
    dependencies = [{"name": CHART.name, "alias": f"c{i}", "version": "*"} for i in cases]
    chart = {"apiVersion": "v2", "name": "matrix", "version": "0.0.0", "dependencies": dependencies}
    (folder / "Chart.yaml").write_text(json.dumps(chart))
    values = {f"c{i}": {"nameOverride": CHART.name, **c.values} for i, c in cases.items()}
    (folder / "values.yaml").write_text(json.dumps(values))
    out = helm("template", RELEASE, folder, "--namespace", NAMESPACE)
    found: dict[int, list[Doc]] = {i: [] for i in cases}
    for text in re.split(r"^---\s*$", out, flags=re.MULTILINE):
        source = _SOURCE.search(text)
        doc = yaml.load(text, Loader=Loader)
        if doc:
            assert source, f"a manifest without its # Source line:\n{text[:300]}"
            found[int(source.group(1)[1:])].append(doc)
    return found


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    """The matrix of value sets."""
    return matrix()


@pytest.fixture(scope="module")
def rendered_matrix(cases: list[Case], tmp_path_factory: pytest.TempPathFactory) -> list[list[Doc]]:
    """Every case of the matrix, rendered."""
    return render_many(cases, tmp_path_factory.mktemp("matrix"))


@pytest.fixture(scope="module")
def rendered_ci() -> dict[str, list[Doc]]:
    """Every ``ci/`` values file, rendered as the chart alone."""
    with ThreadPoolExecutor(CHUNKS) as pool:
        docs = pool.map(lambda f: template("-f", f), CI_FILES)
        return {f.name: d for f, d in zip(CI_FILES, docs, strict=True)}


# --- workloads, images, the docs' claims ---------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """A pod template of a rendered manifest (a Pod's own metadata and spec for a Pod)."""

    where: str
    component: str
    template: Doc


def pod_templates(doc: Doc) -> Iterator[Doc]:
    """Every pod template in a manifest, whatever its kind (anything whose spec has containers)."""
    if isinstance(doc, dict):
        if isinstance(doc.get("spec"), dict) and "containers" in doc["spec"]:
            yield doc
            return
        for value in doc.values():
            yield from pod_templates(value)
    elif isinstance(doc, list):
        for item in doc:
            yield from pod_templates(item)


def workloads(label: str, docs: Sequence[Doc]) -> list[Workload]:
    """The pod templates of a rendering, each with the component its labels name."""
    found = []
    for doc in docs:
        for pod in pod_templates(doc):
            where = f"{label}: {doc['kind']} {doc['metadata']['name']}"
            component = (pod.get("metadata") or {}).get("labels", {}).get(COMPONENT, "")
            found.append(Workload(where, component, pod))
    return found


def image_target(image: str) -> str:
    """The Dockerfile target that builds ``image`` (registry and tag or digest left off)."""
    repository = image.split("@")[0]
    last = repository.rsplit("/", 1)[-1]
    name = last.split(":")[0]
    assert name in IMAGE_TARGETS, f"which Dockerfile target builds {image}?"
    return IMAGE_TARGETS[name]


def claimed_levels(markdown: str) -> dict[str, str]:
    """Component -> Pod Security level: the first table under the docs' "Pod Security" heading."""
    parts = re.split(r"^#+ Pod Security\s*$", markdown, flags=re.MULTILINE)
    assert len(parts) == 2, "no (or more than one) Pod Security section"
    lines = itertools.dropwhile(lambda line: not line.startswith("|"), parts[1].splitlines())
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in itertools.takewhile(lambda line: line.startswith("|"), lines)
    ]
    column = rows[0].index("Pod Security level")
    return {row[0]: row[column].strip("`") for row in rows[2:]}


@pytest.fixture(scope="module")
def levels() -> dict[str, str]:
    """What the docs claim, the same in docs/install.md and the chart's README."""
    claims = [claimed_levels(path.read_text()) for path in DOCS]
    assert claims[0] == claims[1], "docs/install.md and the chart README disagree"
    assert set(claims[0].values()) <= set(ps.LEVELS)
    return claims[0]


def kubelet_refusals(workload: Workload, dockerfile: str) -> list[str]:
    """What the kubelet says of each container it would refuse to start (none: all start)."""
    spec = workload.template["spec"]
    refusals = []
    for container in ps.containers(spec):
        config_user = ps.image_config_user(dockerfile, image_target(container["image"]))
        image = ps.kubelet_image_user(ps.runtime_image_user(config_user))
        refused = ps.verify_run_as_non_root(spec, container, image)
        if refused:
            refusals.append(f"{workload.where}: {refused}")
    return refusals


def pod_security_failures(workload: Workload, level: str) -> list[str]:
    """Why ``level`` is not exactly ``workload``'s: it must pass it and fail the next one.

    A workload claimed ``privileged`` must fail ``baseline`` for its hostPath volumes only,
    and ``restricted`` only for those and, while it reads the PodResources socket, for
    running as root: any other violation is new, and fails.
    """
    refused = ps.violations(level, workload.template)
    failures = [f"{workload.where}: not {level}: {refused}"] if refused else []
    stricter = ps.LEVELS[ps.LEVELS.index(level) + 1 :]
    if stricter and not ps.violations(stricter[0], workload.template):
        failures.append(f"{workload.where}: meets {stricter[0]}, the docs say {level}")
    if level == "privileged":
        baseline = set(ps.violations("baseline", workload.template))
        if baseline - {HOST_PATH_REASON}:
            failures.append(f"{workload.where}: baseline refuses it for {baseline}")
        restricted = set(ps.violations("restricted", workload.template))
        allowed = {"restrictedVolumes"} | (
            ROOT_FOR_PODRESOURCES if _runs_as_root(workload) else set()
        )
        if restricted - allowed:
            failures.append(f"{workload.where}: restricted refuses it for {restricted - allowed}")
    return failures


def _runs_as_root(workload: Workload) -> bool:
    spec = workload.template["spec"]
    return any(
        (ps.effective_security_context(spec, c) or {}).get("runAsUser") == 0
        for c in ps.containers(spec)
    )


def check_rendering(
    label: str, docs: Sequence[Doc], levels: dict[str, str], dockerfile: str
) -> list[str]:
    """Every kubelet refusal and Pod Security mismatch of one rendering."""
    failures = []
    for workload in workloads(label, docs):
        if workload.component not in levels:
            failures.append(
                f"{workload.where}: component {workload.component!r} has no level in the docs"
            )
            continue
        failures += kubelet_refusals(workload, dockerfile)
        failures += pod_security_failures(workload, levels[workload.component])
    return failures


# --- the chart, over the matrix -------------------------------------------------------------


def test_the_kubelet_starts_and_pod_security_admits_every_workload_of_the_matrix(
    cases: list[Case], rendered_matrix: list[list[Doc]], levels: dict[str, str]
) -> None:
    dockerfile = DOCKERFILE.read_text()
    failures = [
        failure
        for case, docs in zip(cases, rendered_matrix, strict=True)
        for failure in check_rendering(case.label, docs, levels, dockerfile)
    ]
    assert not failures, "\n".join(failures[:20])


def test_the_matrix_renders_every_workload_kind_and_component(
    cases: list[Case], rendered_matrix: list[list[Doc]]
) -> None:
    seen = {
        (doc["kind"], w.component)
        for case, docs in zip(cases, rendered_matrix, strict=True)
        for doc in docs
        for w in workloads(case.label, [doc])
    }
    assert seen == {
        ("Deployment", "collector"),
        ("StatefulSet", "collector"),
        ("DaemonSet", "agent"),
    }


def test_every_ci_values_file_too(
    rendered_ci: dict[str, list[Doc]], levels: dict[str, str]
) -> None:
    dockerfile = DOCKERFILE.read_text()
    failures = [
        failure
        for name, docs in rendered_ci.items()
        for failure in check_rendering(name, docs, levels, dockerfile)
    ]
    assert not failures, "\n".join(failures)


def test_the_agent_runs_as_root_exactly_while_it_reads_the_pod_resources_socket(
    cases: list[Case], rendered_matrix: list[list[Doc]]
) -> None:
    for case, docs in zip(cases, rendered_matrix, strict=True):
        agent = case.values["agent"]
        for w in workloads(case.label, docs):
            if w.component != "agent":
                continue
            (container,) = w.template["spec"]["containers"]
            effective = ps.effective_security_context(w.template["spec"], container) or {}
            reads_socket = agent["podResources"]["enabled"]
            assert effective["runAsUser"] == (0 if reads_socket else 65532), case.label
            assert effective["runAsNonRoot"] is (not reads_socket), case.label


def _workload_specs(docs: Sequence[Doc]) -> list[Doc]:
    """The workloads without the label that names the chart (an alias renames it)."""
    found = []
    for doc in docs:
        if not list(pod_templates(doc)):
            continue
        doc = copy.deepcopy(doc)
        for labels in _label_maps(doc):
            labels.pop("helm.sh/chart", None)
        found.append(doc)
    return sorted(found, key=lambda d: (d["kind"], d["metadata"]["name"]))


def _label_maps(doc: Any) -> Iterator[dict[str, Any]]:
    if isinstance(doc, dict):
        if isinstance(doc.get("labels"), dict):
            yield doc["labels"]
        for value in doc.values():
            yield from _label_maps(value)
    elif isinstance(doc, list):
        for item in doc:
            yield from _label_maps(item)


@pytest.mark.parametrize("index", [0, -1], ids=["first", "last"])
def test_an_aliased_copy_renders_what_the_chart_renders(
    index: int, cases: list[Case], rendered_matrix: list[list[Doc]], tmp_path: Path
) -> None:
    case = cases[index]
    values = tmp_path / "values.yaml"
    values.write_text(json.dumps(case.values))
    alone = template("-f", values)
    assert _workload_specs(rendered_matrix[index]) == _workload_specs(alone), case.label
    assert _workload_specs(alone)


# --- the images' users ----------------------------------------------------------------------


@pytest.mark.parametrize("target", sorted(set(IMAGE_TARGETS.values())))
def test_each_image_runs_as_a_numeric_non_root_user(target: str) -> None:
    user = ps.image_config_user(DOCKERFILE.read_text(), target)
    assert ps.kubelet_image_user(ps.runtime_image_user(user)) == ps.ImageUser(uid=65532)


def test_dockerfile_stages_and_their_users() -> None:
    text = """# syntax=docker/dockerfile:1
ARG BASE=python:3.11-slim
ARG UID=65532
FROM ${BASE} AS build
RUN echo \\
  # a comment inside a continuation
  built
FROM ${BASE} AS collector
ARG UID
USER ${UID}:${UID}
FROM collector AS agent
FROM $BASE
USER app
"""
    stages = ps.dockerfile_stages(text)
    assert [(s.name, s.base, s.user) for s in stages] == [
        ("build", "python:3.11-slim", ""),
        ("collector", "python:3.11-slim", "65532:65532"),
        ("agent", "collector", "65532:65532"),  # built FROM collector: its USER carries over
        ("", "python:3.11-slim", "app"),
    ]
    assert ps.image_config_user(text, "agent") == "65532:65532"
    assert ps.image_config_user(text, "build") == ""
    # no stage of that name: the last stage, what a plain `docker build` makes
    assert ps.image_config_user(text, "nosuch") == "app"
    with pytest.raises(ValueError, match=r"\$HOME"):
        ps.dockerfile_stages("FROM scratch\nUSER $HOME\n")


@pytest.mark.parametrize(
    ("config_user", "reported", "kubelet_sees"),
    [
        ("", ps.ImageUser(), ps.ImageUser(uid=0)),  # no USER: root
        ("0", ps.ImageUser(uid=0), ps.ImageUser(uid=0)),
        ("65532:65532", ps.ImageUser(uid=65532), ps.ImageUser(uid=65532)),
        ("app:app", ps.ImageUser(username="app"), ps.ImageUser(username="app")),
        ("-1", ps.ImageUser(uid=-1), ps.ImageUser(uid=-1)),
        ("1_000", ps.ImageUser(username="1_000"), ps.ImageUser(username="1_000")),  # not Go digits
    ],
)
def test_the_runtime_reads_an_image_user_as_containerd_does(
    config_user: str, reported: ps.ImageUser, kubelet_sees: ps.ImageUser
) -> None:
    assert ps.runtime_image_user(config_user) == reported
    assert ps.kubelet_image_user(reported) == kubelet_sees


# --- the kubelet's rule, on hand-made pods --------------------------------------------------

NUMERIC = ps.ImageUser(uid=65532)


def _pod(pod_context: Doc | None, container_context: Doc | None) -> tuple[Doc, Doc]:
    container: Doc = {"name": "c", "image": "x"}
    if container_context is not None:
        container["securityContext"] = container_context
    spec: Doc = {"containers": [container]}
    if pod_context is not None:
        spec["securityContext"] = pod_context
    return spec, container


@pytest.mark.parametrize(
    ("pod", "container", "image", "refusal"),
    [
        (None, None, ps.ImageUser(uid=0), None),  # runAsNonRoot unset: anything goes
        ({"runAsNonRoot": False}, None, ps.ImageUser(uid=0), None),
        ({"runAsNonRoot": True}, {"runAsUser": 0}, NUMERIC, "runAsUser breaks non-root policy"),
        # the agent before this fix: the pod's true kept, the container's user 0
        (
            {"runAsNonRoot": True, "runAsUser": 65532},
            {"runAsNonRoot": True, "runAsUser": 0},
            NUMERIC,
            "runAsUser breaks non-root policy",
        ),
        # ... and after: the container's false beats the pod's true
        (
            {"runAsNonRoot": True, "runAsUser": 65532},
            {"runAsNonRoot": False, "runAsUser": 0},
            NUMERIC,
            None,
        ),
        (
            {"runAsNonRoot": True, "runAsUser": 0},
            {"runAsUser": 5},
            ps.ImageUser(uid=0),
            None,
        ),  # image not looked at
        ({"runAsNonRoot": True}, None, ps.ImageUser(uid=0), "image will run as root"),
        (None, {"runAsNonRoot": True}, ps.ImageUser(username="app"), "non-numeric user (app)"),
        ({}, {"runAsNonRoot": True}, ps.ImageUser(uid=-1), "invalid user id (-1)"),
        ({"runAsNonRoot": True}, {}, NUMERIC, None),
    ],
)
def test_verify_run_as_non_root_follows_the_kubelet(
    pod: Doc | None, container: Doc | None, image: ps.ImageUser, refusal: str | None
) -> None:
    spec, c = _pod(pod, container)
    refused = ps.verify_run_as_non_root(spec, c, image)
    if refusal is None:
        assert refused is None
    else:
        assert refused is not None
        assert refusal in refused


def test_the_effective_context_takes_each_field_the_container_sets() -> None:
    spec, c = _pod(
        {"runAsUser": 1, "runAsGroup": 2, "runAsNonRoot": True, "fsGroup": 3},
        {"runAsUser": 4, "runAsNonRoot": None, "readOnlyRootFilesystem": True},
    )
    assert ps.effective_security_context(spec, c) == {
        "runAsUser": 4,
        "runAsGroup": 2,
        "runAsNonRoot": True,  # null is unset: the pod's stays
        "readOnlyRootFilesystem": True,
    }
    assert ps.effective_security_context(*_pod(None, None)) is None


# --- Pod Security Admission's checks, on hand-made pods -------------------------------------


def restricted_pod() -> Doc:
    """A pod template that meets ``restricted``: each case below breaks one rule of it."""
    return {
        "metadata": {"name": "p"},
        "spec": {
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "initContainers": [_restricted_container("init")],
            "containers": [_restricted_container("main")],
            "volumes": [
                {"name": "v", "emptyDir": {}},
                {"name": "s", "secret": {"secretName": "s"}},
            ],
        },
    }


def _restricted_container(name: str) -> Doc:
    return {
        "name": name,
        "image": "x",
        "ports": [{"containerPort": 8080}],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }


Mutation = Callable[[Doc], object]


def _init(pod: Doc) -> Doc:
    """The init container's securityContext: every rule must hold for init containers too."""
    context: Doc = pod["spec"]["initContainers"][0]["securityContext"]
    return context


BREAKS: list[tuple[str, str, Mutation]] = [
    (
        "baseline",
        "hostPathVolumes",
        lambda p: p["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/proc"}}),
    ),
    ("baseline", "hostNamespaces", lambda p: p["spec"].update(hostPID=True)),
    ("baseline", "hostNamespaces", lambda p: p["spec"].update(hostIPC=True)),
    ("baseline", "privileged", lambda p: _init(p).update(privileged=True)),
    ("baseline", "hostPorts", lambda p: p["spec"]["containers"][0]["ports"][0].update(hostPort=80)),
    (
        "baseline",
        "capabilities_baseline",
        lambda p: _init(p)["capabilities"].update(add=["SYS_ADMIN"]),
    ),
    (
        "baseline",
        "seccompProfile_baseline",
        lambda p: _init(p).update(seccompProfile={"type": "Unconfined"}),
    ),
    (
        "baseline",
        "appArmorProfile",
        lambda p: _init(p).update(appArmorProfile={"type": "Unconfined"}),
    ),
    (
        "baseline",
        "appArmorProfile",
        lambda p: p["metadata"].update(annotations={ps.APPARMOR_ANNOTATION + "main": "unconfined"}),
    ),
    ("baseline", "seLinuxOptions", lambda p: _init(p).update(seLinuxOptions={"type": "spc_t"})),
    (
        "baseline",
        "seLinuxOptions",
        lambda p: p["spec"]["securityContext"].update(seLinuxOptions={"user": "root"}),
    ),
    ("baseline", "procMount", lambda p: _init(p).update(procMount="Unmasked")),
    (
        "baseline",
        "sysctls",
        lambda p: p["spec"]["securityContext"].update(
            sysctls=[{"name": "kernel.msgmax", "value": "1"}]
        ),
    ),
    (
        "baseline",
        "windowsHostProcess",
        lambda p: _init(p).update(windowsOptions={"hostProcess": True}),
    ),
    (
        "baseline",
        "hostProbesAndHostLifecycle",
        lambda p: p["spec"]["containers"][0].update(
            readinessProbe={"tcpSocket": {"port": 1, "host": "10.0.0.1"}}
        ),
    ),
    (
        "restricted",
        "restrictedVolumes",
        lambda p: p["spec"]["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}),
    ),
    ("restricted", "runAsNonRoot", lambda p: _init(p).update(runAsNonRoot=False)),
    ("restricted", "runAsNonRoot", lambda p: p["spec"]["securityContext"].pop("runAsNonRoot")),
    ("restricted", "runAsUser", lambda p: _init(p).update(runAsUser=0)),
    (
        "restricted",
        "seccompProfile_restricted",
        lambda p: p["spec"]["securityContext"].pop("seccompProfile"),
    ),
    ("restricted", "allowPrivilegeEscalation", lambda p: _init(p).pop("allowPrivilegeEscalation")),
    (
        "restricted",
        "capabilities_restricted",
        lambda p: _init(p)["capabilities"].update(drop=["NET_RAW"]),
    ),
    (
        "restricted",
        "capabilities_restricted",
        lambda p: _init(p)["capabilities"].update(add=["CHOWN"]),
    ),
]
"""(the lowest level that refuses it, the check that must, how a restricted pod is broken)."""


def test_the_restricted_pod_passes_every_check() -> None:
    for level in ps.LEVELS:
        assert ps.violations(level, restricted_pod()) == {}
    assert ps.checks_of("privileged") == {}


@pytest.mark.parametrize(
    ("level", "check_id", "mutate"), BREAKS, ids=[f"{c}-{i}" for i, (_, c, _) in enumerate(BREAKS)]
)
def test_each_check_refuses_a_pod_that_breaks_it(
    level: str, check_id: str, mutate: Mutation
) -> None:
    pod = restricted_pod()
    mutate(pod)
    assert check_id in ps.violations(level, pod)
    assert ps.violations("restricted", pod)  # a stricter level refuses it too
    if level == "restricted":  # a restricted-only rule: baseline lets the pod in
        assert ps.violations("baseline", pod) == {}
    assert ps.violations("privileged", pod) == {}


def test_restricted_replaces_the_baseline_checks_it_tightens() -> None:
    pod = restricted_pod()
    pod["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}})
    assert ps.violations("baseline", pod) == {"hostPathVolumes": 'hostPath volumes (volume "h")'}
    assert set(ps.violations("restricted", pod)) == {"restrictedVolumes"}


def test_host_network_makes_every_container_port_a_host_port() -> None:
    pod = restricted_pod()
    pod["spec"]["hostNetwork"] = True
    refused = ps.violations("baseline", pod)
    assert set(refused) == {"hostNamespaces", "hostPorts"}
    assert "8080" in refused["hostPorts"]
    assert "hostPort" not in pod["spec"]["containers"][0]["ports"][0]  # defaulted on a copy


def test_a_user_namespace_relaxes_the_root_checks() -> None:
    pod = restricted_pod()
    pod["spec"]["hostUsers"] = False
    _init(pod).update(runAsUser=0, runAsNonRoot=False, procMount="Unmasked")
    assert set(ps.violations("restricted", pod)) == {"procMount_restricted"}
    assert ps.violations("baseline", pod) == {}


def test_the_docs_claims_are_read_and_a_wrong_one_is_caught(levels: dict[str, str]) -> None:
    assert levels == {"collector": "restricted", "agent": "privileged"}
    docs = template()
    dockerfile = DOCKERFILE.read_text()
    assert not check_rendering("default", docs, levels, dockerfile)
    # a claim too strict, or too loose, is caught
    (too_strict,) = check_rendering("default", docs, {**levels, "agent": "baseline"}, dockerfile)
    assert (
        'not baseline: {\'hostPathVolumes\': \'hostPath volumes (volumes "regions", "host-proc", "pod-resources")\'}'
        in too_strict
    )
    (too_loose,) = check_rendering("default", docs, {**levels, "collector": "baseline"}, dockerfile)
    assert too_loose.endswith(
        "Deployment huc-hami-usage-collector: meets restricted, the docs say baseline"
    )

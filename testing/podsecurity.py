"""The kubelet's non-root check and Pod Security Admission's levels, written from their source.

What a cluster does with a pod the API server accepted, for tests of rendered manifests
(parsed YAML: camelCase keys as in the API's JSON; an absent or null field is Go's nil):

- the kubelet: ``DetermineEffectiveSecurityContext`` (kubernetes ``pkg/securitycontext/util.go``:
  the pod's fields, each one the container sets replacing it), ``getImageUser``
  (``pkg/kubelet/kuberuntime/helpers.go``: the runtime's uid, else its user name, else root) and
  ``verifyRunAsNonRoot`` (``pkg/kubelet/kuberuntime/security_context_others.go``), which fails the
  container with ``CreateContainerConfigError``; the runtime's reading of an image's ``User``
  (containerd ``internal/cri/server/images/image_status.go`` ``getUserFromImage``; CRI-O's is
  the same);
- the API server's defaulting that admission sees (``pkg/apis/core/v1/defaults.go``
  ``defaultHostNetworkPorts``: with ``hostNetwork`` every container port is a host port);
- Pod Security Admission (kubernetes/pod-security-admission ``policy/check_*.go`` at 8f84a87,
  v0.37.0-alpha), the latest version of every check, with their restricted overrides
  (``OverrideCheckIDs``) and ``visitContainers`` (init containers, containers, ephemeral
  containers).

A Dockerfile's ``USER`` per build target is read here too, since the kubelet compares it with
the pod's settings.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

Manifest = dict[str, Any]
Check = Callable[[Manifest, Manifest], str | None]
"""A Pod Security check: (pod metadata, pod spec) -> None if allowed, else "reason (detail)"."""

MAX_INT32 = 2**31 - 1
INT64 = range(-(2**63), 2**63)


# --- images: the User the runtime reports --------------------------------------------------


@dataclass(frozen=True)
class ImageUser:
    """What the runtime's ImageStatus reports of an image's user: a numeric uid, else a name."""

    uid: int | None = None
    username: str = ""


def runtime_image_user(config_user: str) -> ImageUser:
    """containerd's ``getUserFromImage``: the part before ``:``, a uid if it parses as int64."""
    if not config_user:
        return ImageUser()
    user = config_user.split(":")[0]
    # Go's strconv.ParseInt(user, 10, 64): an optional sign and digits, nothing else.
    if re.fullmatch(r"[+-]?[0-9]+", user) and int(user) in INT64:
        return ImageUser(uid=int(user))
    return ImageUser(username=user)


def kubelet_image_user(reported: ImageUser) -> ImageUser:
    """``getImageUser``: the uid, else the user name; "if non of them is set, treat it as root"."""
    if reported.uid is None and not reported.username:
        return ImageUser(uid=0)
    return reported


@dataclass(frozen=True)
class Stage:
    """One ``FROM`` block of a Dockerfile: its name (``AS``), base and effective ``USER``."""

    name: str
    base: str
    user: str


def _instructions(text: str) -> Iterator[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile: continuation lines joined, comment and empty
    lines dropped (also inside a continuation, as BuildKit does); the default escape ``\\``."""
    logical = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            logical += stripped[:-1] + " "
            continue
        word, *rest = (logical + stripped).split(None, 1)
        yield word.upper(), rest[0].strip() if rest else ""
        logical = ""


def _expand(value: str, args: dict[str, str]) -> str:
    """``$NAME`` / ``${NAME}`` from the ARGs in scope; another variable (an ENV, a build
    argument with no default) is an error: the image's user would be a guess."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in args:
            raise ValueError(f"Dockerfile: ${name} has no default value in scope")
        return args[name]

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", one, value)


def _arg(rest: str) -> tuple[str, str | None]:
    """``ARG NAME[=default]``: the name and the default, None without one."""
    name, eq, default = rest.partition("=")
    return name.strip(), default.strip().strip("\"'") if eq else None


def dockerfile_stages(text: str) -> list[Stage]:
    """Every stage of a Dockerfile with the ``USER`` its image carries.

    A stage's user is its last ``USER``, else that of the stage it is built ``FROM``, else ""
    (a base image from a registry is taken to set none: root, the kubelet's reading of none).
    """
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    args: dict[str, str] = {}
    for word, rest in _instructions(text):
        if word == "ARG" and not stages:  # before the first FROM: for FROM lines only
            name, default = _arg(rest)
            if default is not None:
                global_args[name] = _expand(default, global_args)
        elif word == "ARG":  # in a stage: its default, else the global one redeclared
            name, default = _arg(rest)
            value = global_args.get(name) if default is None else _expand(default, args)
            if value is not None:
                args[name] = value
        elif word == "FROM":
            parts = [p for p in rest.split() if not p.startswith("--")]
            base = _expand(parts[0], global_args)
            name = parts[2].lower() if len(parts) >= 3 and parts[1].upper() == "AS" else ""
            parent = next((s for s in reversed(stages) if s.name and s.name == base.lower()), None)
            stages.append(Stage(name, base, parent.user if parent else ""))
            args = {}
        elif word == "USER" and stages:
            last = stages[-1]
            stages[-1] = Stage(last.name, last.base, _expand(rest, args))
    return stages


def image_config_user(dockerfile: str, target: str) -> str:
    """The ``User`` of the image ``docker build --target TARGET`` makes.

    Where no stage has that name, the last stage's: the image a plain ``docker build`` makes
    (one image holding every program).
    """
    stages = dockerfile_stages(dockerfile)
    if not stages:
        raise ValueError("Dockerfile: no FROM")
    named = [s for s in stages if s.name == target.lower()]
    return (named or stages)[-1].user


# --- the kubelet ---------------------------------------------------------------------------

POD_LEVEL = ("seLinuxOptions", "windowsOptions", "runAsUser", "runAsGroup", "runAsNonRoot")
"""The pod securityContext fields ``securityContextFromPodSecurityContext`` copies."""
CONTAINER_LEVEL = (
    *POD_LEVEL,
    "capabilities",
    "privileged",
    "readOnlyRootFilesystem",
    "allowPrivilegeEscalation",
    "procMount",
)
"""The container fields ``DetermineEffectiveSecurityContext`` lays over the pod's when set."""


def effective_security_context(pod_spec: Manifest, container: Manifest) -> Manifest | None:
    """``DetermineEffectiveSecurityContext``: the pod's fields, each one the container sets wins."""
    pod = pod_spec.get("securityContext")
    own = container.get("securityContext")
    if pod is None:
        return None if own is None else copy.deepcopy(own)
    own = own or {}
    effective = {f: copy.deepcopy(pod[f]) for f in POD_LEVEL if pod.get(f) is not None}
    effective.update({f: copy.deepcopy(own[f]) for f in CONTAINER_LEVEL if own.get(f) is not None})
    return effective


def verify_run_as_non_root(
    pod_spec: Manifest, container: Manifest, image: ImageUser, pod: str = "pod_ns(uid)"
) -> str | None:
    """``verifyRunAsNonRoot``: None if the kubelet starts the container, else its error.

    ``image`` is what ``getImageUser`` returned (:func:`kubelet_image_user`).
    """
    effective = effective_security_context(pod_spec, container) or {}
    name = container["name"]
    if not effective.get("runAsNonRoot"):
        return None
    if effective.get("runAsUser") is not None:
        if effective["runAsUser"] == 0:
            return f"container's runAsUser breaks non-root policy (pod: {pod!r}, container: {name})"
        return None
    if image.uid is None and image.username:
        return (
            f"container has runAsNonRoot and image has non-numeric user ({image.username}), "
            f"cannot verify user is non-root (pod: {pod!r}, container: {name})"
        )
    if image.uid is None:
        return None
    if image.uid == 0:
        return f"container has runAsNonRoot and image will run as root (pod: {pod!r}, container: {name})"
    if not 0 <= image.uid <= MAX_INT32:
        return (
            f"container has runAsNonRoot and image has an invalid user id ({image.uid}). "
            f"(Must be 1-({MAX_INT32})): must be between 0 and {MAX_INT32}, inclusive "
            f"(pod: {pod!r}, container: {name})"
        )
    return None


# --- the API server's defaulting, as admission sees the pod --------------------------------


def api_defaults(pod_spec: Manifest) -> Manifest:
    """``SetDefaults_PodSpec``'s ``defaultHostNetworkPorts``: host network, host ports.

    Only the defaulting a Pod Security check reads; a copy, the argument is left alone.
    """
    spec = copy.deepcopy(pod_spec)
    if spec.get("hostNetwork"):
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            for port in container.get("ports") or []:
                if not port.get("hostPort"):
                    port["hostPort"] = port.get("containerPort", 0)
    return spec


# --- Pod Security Admission -----------------------------------------------------------------


def containers(pod_spec: Manifest) -> list[Manifest]:
    """``visitContainers``' order: init containers, containers, ephemeral containers."""
    return [
        *(pod_spec.get("initContainers") or []),
        *(pod_spec.get("containers") or []),
        *(pod_spec.get("ephemeralContainers") or []),
    ]


def _quote(names: list[str]) -> str:
    """``joinQuote``."""
    return ", ".join(f'"{n}"' for n in names)


def _plural(one: str, many: str, count: int) -> str:
    return one if count == 1 else many


def _named(what: str, names: list[str]) -> str:
    return f"{_plural(what, what + 's', len(names))} {_quote(names)}"


def _sc(container: Manifest) -> Manifest:
    return container.get("securityContext") or {}


def _pod_sc(spec: Manifest) -> Manifest:
    return spec.get("securityContext") or {}


def _setters(pod_bad: bool, bad: list[str]) -> str:
    """ "pod", "containers "a", "b"", or both joined by " and "."""
    return " and ".join((["pod"] if pod_bad else []) + ([_named("container", bad)] if bad else []))


def _windows(spec: Manifest) -> bool:
    return (spec.get("os") or {}).get("name") == "windows"


def _user_namespace(spec: Manifest) -> bool:
    """``relaxPolicyForUserNamespacePod``: ``hostUsers: false`` (1.35 relaxes some checks)."""
    return spec.get("hostUsers") is False


def host_path_volumes(meta: Manifest, spec: Manifest) -> str | None:
    """check_hostPathVolumes.go: no ``hostPath`` volume at all, read-only or not."""
    bad = [v["name"] for v in spec.get("volumes") or [] if v.get("hostPath") is not None]
    return f"hostPath volumes ({_named('volume', bad)})" if bad else None


def host_namespaces(meta: Manifest, spec: Manifest) -> str | None:
    """check_hostNamespaces.go: not the host's network, PID or IPC namespace."""
    bad = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    return f"host namespaces ({', '.join(bad)})" if bad else None


def privileged(meta: Manifest, spec: Manifest) -> str | None:
    """check_privileged.go: no container with ``privileged: true``."""
    bad = [c["name"] for c in containers(spec) if _sc(c).get("privileged")]
    if not bad:
        return None
    return f"privileged ({_named('container', bad)} must not set securityContext.privileged=true)"


def host_ports(meta: Manifest, spec: Manifest) -> str | None:
    """check_hostPorts.go: no non-zero ``hostPort`` (after :func:`api_defaults`)."""
    bad, ports = [], set()
    for c in containers(spec):
        used = [str(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")]
        if used:
            bad.append(c["name"])
            ports.update(used)
    if not bad:
        return None
    uses = _plural("uses", "use", len(bad))
    return f"hostPort ({_named('container', bad)} {uses} {_plural('hostPort', 'hostPorts', len(ports))} {', '.join(sorted(ports))})"


BASELINE_CAPABILITIES = frozenset(
    [
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    ]
)
"""check_capabilities_baseline.go ``capabilities_allowed_1_0``: what containers may add."""


def capabilities_baseline(meta: Manifest, spec: Manifest) -> str | None:
    """check_capabilities_baseline.go: ``capabilities.add`` within the default set only."""
    bad, caps = [], set()
    for c in containers(spec):
        added = set((_sc(c).get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if added:
            bad.append(c["name"])
            caps |= added
    if not bad:
        return None
    return f"non-default capabilities ({_named('container', bad)} must not include {_quote(sorted(caps))} in securityContext.capabilities.add)"


def _seccomp_ok(profile: Manifest) -> bool:
    """``validSeccomp``: RuntimeDefault or Localhost."""
    return profile.get("type") in ("RuntimeDefault", "Localhost")


def seccomp_baseline(meta: Manifest, spec: Manifest) -> str | None:
    """check_seccompProfile_baseline.go (1.19): no explicit ``Unconfined`` (unset is fine)."""
    pod = _pod_sc(spec).get("seccompProfile")
    pod_bad = pod is not None and not _seccomp_ok(pod)
    values = {pod.get("type", "")} if pod_bad and pod is not None else set()
    bad = []
    for c in containers(spec):
        profile = _sc(c).get("seccompProfile")
        if profile is not None and not _seccomp_ok(profile):
            bad.append(c["name"])
            values.add(profile.get("type", ""))
    if not pod_bad and not bad:
        return None
    return f"seccompProfile ({_setters(pod_bad, bad)} must not set securityContext.seccompProfile.type to {_quote(sorted(values))})"


APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def app_armor(meta: Manifest, spec: Manifest) -> str | None:
    """check_appArmorProfile.go: no profile type other than RuntimeDefault or Localhost."""

    def bad_profile(context: Manifest) -> bool:
        profile = context.get("appArmorProfile")
        return profile is not None and profile.get("type") not in ("RuntimeDefault", "Localhost")

    pod_bad = bad_profile(_pod_sc(spec))
    bad = [c["name"] for c in containers(spec) if bad_profile(_sc(c))]
    annotations = sorted(
        f"{k}={v!r}"
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith(APPARMOR_ANNOTATION)
        and not (not v or v == "runtime/default" or v.startswith("localhost/"))
    )
    if not pod_bad and not bad and not annotations:
        return None
    setters = _setters(pod_bad, bad) + (" and annotations" if annotations else "")
    return f"forbidden AppArmor profile ({setters.removeprefix(' and ')})"


SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
"""check_seLinuxOptions.go ``selinuxAllowedTypes1_31``."""


def se_linux(meta: Manifest, spec: Manifest) -> str | None:
    """check_seLinuxOptions.go: a container type only, no user, no role."""

    def bad_options(context: Manifest) -> bool:
        opts = context.get("seLinuxOptions")
        return opts is not None and (
            opts.get("type", "") not in SELINUX_TYPES or bool(opts.get("user") or opts.get("role"))
        )

    pod_bad = bad_options(_pod_sc(spec))
    bad = [c["name"] for c in containers(spec) if bad_options(_sc(c))]
    if not pod_bad and not bad:
        return None
    return f"seLinuxOptions ({_setters(pod_bad, bad)} set forbidden securityContext.seLinuxOptions)"


def _unmasked(spec: Manifest) -> list[str]:
    return [c["name"] for c in containers(spec) if _sc(c).get("procMount") not in (None, "Default")]


def proc_mount_baseline(meta: Manifest, spec: Manifest) -> str | None:
    """check_procMount_baseline.go (1.35): the default procMount, unless in a user namespace."""
    return None if _user_namespace(spec) else proc_mount_restricted(meta, spec)


def proc_mount_restricted(meta: Manifest, spec: Manifest) -> str | None:
    """check_procMount_restricted.go (1.35): the default procMount, always."""
    bad = _unmasked(spec)
    return (
        f"procMount ({_named('container', bad)} must not set securityContext.procMount)"
        if bad
        else None
    )


SAFE_SYSCTLS = frozenset(
    [
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
        "net.ipv4.tcp_slow_start_after_idle",
        "net.ipv4.tcp_notsent_lowat",
    ]
)
"""check_sysctls.go ``sysctlsAllowedV1Dot37``."""


def sysctls(meta: Manifest, spec: Manifest) -> str | None:
    """check_sysctls.go: only the safe sysctls."""
    bad = [s["name"] for s in _pod_sc(spec).get("sysctls") or [] if s["name"] not in SAFE_SYSCTLS]
    return f"forbidden sysctls ({', '.join(bad)})" if bad else None


def windows_host_process(meta: Manifest, spec: Manifest) -> str | None:
    """check_windowsHostProcess.go: no ``windowsOptions.hostProcess: true``."""

    def host(context: Manifest) -> bool:
        return bool((context.get("windowsOptions") or {}).get("hostProcess"))

    pod_bad = host(_pod_sc(spec))
    bad = [c["name"] for c in containers(spec) if host(_sc(c))]
    if not pod_bad and not bad:
        return None
    return f"hostProcess ({_setters(pod_bad, bad)} must not set securityContext.windowsOptions.hostProcess=true)"


def _hosts(handler: Manifest | None) -> list[str]:
    """The ``host`` of a probe's or lifecycle hook's httpGet and tcpSocket."""
    handler = handler or {}
    return [h for kind in ("httpGet", "tcpSocket") if (h := (handler.get(kind) or {}).get("host"))]


def host_probes(meta: Manifest, spec: Manifest) -> str | None:
    """check_hostProbesAndhostLifecycle.go (1.34): probes and hooks set no ``host``."""
    bad, hosts = [], set()
    for c in containers(spec):
        lifecycle = c.get("lifecycle") or {}
        handlers = [c.get(p) for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        found = [
            h
            for handler in [*handlers, lifecycle.get("postStart"), lifecycle.get("preStop")]
            for h in _hosts(handler)
        ]
        if found:
            bad.append(c["name"])
            hosts.update(found)
    if not bad:
        return None
    uses = _plural("uses", "use", len(bad))
    what = _plural("probe or lifecycle host", "probe or lifecycle hosts", len(hosts))
    return f"probe or lifecycle host ({_named('container', bad)} {uses} {what} {_quote(sorted(hosts))})"


RESTRICTED_VOLUMES = frozenset(
    [
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "image",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ]
)
"""check_restrictedVolumes.go: the volume sources restricted pods may use."""
_VOLUME_META = frozenset({"name"})


def restricted_volumes(meta: Manifest, spec: Manifest) -> str | None:
    """check_restrictedVolumes.go: only the volume types of :data:`RESTRICTED_VOLUMES`."""
    bad, kinds = [], set()
    for volume in spec.get("volumes") or []:
        sources = {k for k, v in volume.items() if k not in _VOLUME_META and v is not None}
        if not sources & RESTRICTED_VOLUMES:
            bad.append(volume["name"])
            kinds.update(sources or {"unknown"})
    if not bad:
        return None
    return f"restricted volume types ({_named('volume', bad)} {_plural('uses', 'use', len(bad))} {_quote(sorted(kinds))})"


def run_as_non_root(meta: Manifest, spec: Manifest) -> str | None:
    """check_runAsNonRoot.go (1.35): ``runAsNonRoot: true`` on the pod or every container, no false."""
    if _user_namespace(spec):
        return None
    pod = _pod_sc(spec).get("runAsNonRoot")
    explicit = [c["name"] for c in containers(spec) if _sc(c).get("runAsNonRoot") is False]
    implicit = [
        c["name"]
        for c in containers(spec)
        if _sc(c).get("runAsNonRoot") is None and pod is not True
    ]
    if pod is False or explicit:
        return f"runAsNonRoot != true ({_setters(pod is False, explicit)} must not set securityContext.runAsNonRoot=false)"
    if implicit:
        return f"runAsNonRoot != true (pod or {_named('container', implicit)} must set securityContext.runAsNonRoot=true)"
    return None


def run_as_user(meta: Manifest, spec: Manifest) -> str | None:
    """check_runAsUser.go (1.35): no ``runAsUser: 0``, pod or container."""
    if _user_namespace(spec):
        return None
    pod_bad = _pod_sc(spec).get("runAsUser") == 0
    bad = [c["name"] for c in containers(spec) if _sc(c).get("runAsUser") == 0]
    if not pod_bad and not bad:
        return None
    return f"runAsUser=0 ({_setters(pod_bad, bad)} must not set runAsUser=0)"


def seccomp_restricted(meta: Manifest, spec: Manifest) -> str | None:
    """check_seccompProfile_restricted.go (1.25): RuntimeDefault or Localhost, pod or every container."""
    if _windows(spec):
        return None
    explicit = seccomp_baseline(meta, spec)
    if explicit:
        return explicit
    pod_set = _pod_sc(spec).get("seccompProfile") is not None
    implicit = [
        c["name"] for c in containers(spec) if _sc(c).get("seccompProfile") is None and not pod_set
    ]
    if implicit:
        return f'seccompProfile (pod or {_named("container", implicit)} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
    return None


def allow_privilege_escalation(meta: Manifest, spec: Manifest) -> str | None:
    """check_allowPrivilegeEscalation.go (1.25): ``false``, explicitly, on every container."""
    if _windows(spec):
        return None
    bad = [
        c["name"] for c in containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False
    ]
    if not bad:
        return None
    return f"allowPrivilegeEscalation != false ({_named('container', bad)} must set securityContext.allowPrivilegeEscalation=false)"


def capabilities_restricted(meta: Manifest, spec: Manifest) -> str | None:
    """check_capabilities_restricted.go (1.25): drop ALL; add nothing but NET_BIND_SERVICE."""
    if _windows(spec):
        return None
    missing, adding, caps = [], [], set()
    for c in containers(spec):
        capabilities = _sc(c).get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            missing.append(c["name"])
        added = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            adding.append(c["name"])
            caps |= added
    details = []
    if missing:
        details.append(
            f'{_named("container", missing)} must set securityContext.capabilities.drop=["ALL"]'
        )
    if adding:
        details.append(
            f"{_named('container', adding)} must not include {_quote(sorted(caps))} in securityContext.capabilities.add"
        )
    return f"unrestricted capabilities ({'; '.join(details)})" if details else None


BASELINE: dict[str, Check] = {
    "hostPathVolumes": host_path_volumes,
    "hostNamespaces": host_namespaces,
    "privileged": privileged,
    "hostPorts": host_ports,
    "capabilities_baseline": capabilities_baseline,
    "seccompProfile_baseline": seccomp_baseline,
    "appArmorProfile": app_armor,
    "seLinuxOptions": se_linux,
    "procMount": proc_mount_baseline,
    "sysctls": sysctls,
    "windowsHostProcess": windows_host_process,
    "hostProbesAndHostLifecycle": host_probes,
}
"""The baseline level's checks, by check ID."""

RESTRICTED: dict[str, tuple[Check, str | None]] = {
    "restrictedVolumes": (restricted_volumes, "hostPathVolumes"),
    "runAsNonRoot": (run_as_non_root, None),
    "runAsUser": (run_as_user, None),
    "seccompProfile_restricted": (seccomp_restricted, "seccompProfile_baseline"),
    "allowPrivilegeEscalation": (allow_privilege_escalation, None),
    "capabilities_restricted": (capabilities_restricted, "capabilities_baseline"),
    "procMount_restricted": (proc_mount_restricted, "procMount"),
}
"""The checks restricted adds, by check ID, each with the baseline check it replaces."""

LEVELS = ("privileged", "baseline", "restricted")


def checks_of(level: str) -> dict[str, Check]:
    """The checks a namespace labelled ``pod-security.kubernetes.io/enforce=LEVEL`` runs."""
    if level not in LEVELS:
        raise ValueError(f"no Pod Security level {level!r}")
    checks = dict(BASELINE) if level != "privileged" else {}
    if level == "restricted":
        for check_id, (check, overrides) in RESTRICTED.items():
            checks.pop(overrides or "", None)
            checks[check_id] = check
    return checks


def violations(level: str, template: Manifest) -> dict[str, str]:
    """Check ID -> "reason (detail)" of each check of LEVEL a pod (or pod template) fails.

    The pod is defaulted first, as the API server does before admission.
    """
    meta = template.get("metadata") or {}
    spec = api_defaults(template.get("spec") or {})
    return {
        check_id: found
        for check_id, check in checks_of(level).items()
        if (found := check(meta, spec)) is not None
    }

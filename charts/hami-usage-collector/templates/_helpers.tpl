{{/* Names, labels and the facts several templates share. */}}

{{- define "huc.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "huc.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "huc.agentName" -}}
{{- printf "%s-agent" (include "huc.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "huc.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "huc.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "huc.selectorLabels" -}}
app.kubernetes.io/name: {{ include "huc.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of the collector's objects, and the selector of its pods. */}}
{{- define "huc.collectorLabels" -}}
{{ include "huc.labels" . }}
app.kubernetes.io/component: collector
{{- end -}}

{{- define "huc.collectorSelector" -}}
{{ include "huc.selectorLabels" . }}
app.kubernetes.io/component: collector
{{- end -}}

{{- define "huc.agentLabels" -}}
{{ include "huc.labels" . }}
app.kubernetes.io/component: agent
{{- end -}}

{{- define "huc.agentSelector" -}}
{{ include "huc.selectorLabels" . }}
app.kubernetes.io/component: agent
{{- end -}}

{{- define "huc.collectorServiceAccount" -}}
{{- if .Values.collector.serviceAccount.create -}}
{{- default (include "huc.fullname" .) .Values.collector.serviceAccount.name -}}
{{- else -}}
{{- required "collector.serviceAccount.name is required when collector.serviceAccount.create is false" .Values.collector.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "huc.agentServiceAccount" -}}
{{- if .Values.agent.serviceAccount.create -}}
{{- default (include "huc.agentName" .) .Values.agent.serviceAccount.name -}}
{{- else -}}
{{- required "agent.serviceAccount.name is required when agent.serviceAccount.create is false" .Values.agent.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "huc.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* The agent's own image: agent.image, else <image.repository>-agent at the collector's tag
     (the collector's digest names another image, so it is never reused here). */}}
{{- define "huc.agentImage" -}}
{{- $agent := .Values.agent.image -}}
{{- $repository := default (printf "%s-agent" .Values.image.repository) $agent.repository -}}
{{- if $agent.digest -}}
{{- printf "%s@%s" $repository $agent.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default (default .Chart.AppVersion .Values.image.tag) $agent.tag) -}}
{{- end -}}
{{- end -}}

{{/* The agent container's securityContext. The kubelet's PodResources socket is root's (a 0750
     root folder, a socket it never chmods), so reading it needs user 0: the container then runs
     as root, with no capability and nothing writable, and says runAsNonRoot false, since the
     kubelet refuses runAsNonRoot true with runAsUser 0. Each key is set, not merged: Sprig's
     merge takes false for empty and would keep the values' true. */}}
{{- define "huc.agentSecurityContext" -}}
{{- $context := deepCopy .Values.agent.securityContext -}}
{{- if .Values.agent.podResources.enabled -}}
{{- $_ := set $context "runAsUser" 0 -}}
{{- $_ := set $context "runAsNonRoot" false -}}
{{- end -}}
{{- toYaml $context -}}
{{- end -}}

{{/* Fails where a container's effective runAsNonRoot (its own, else the pod's) is true while its
     effective runAsUser is 0: the kubelet would refuse to start it ("container's runAsUser breaks
     non-root policy"). (dict "what" NAME "pod" PODCONTEXT "container" CONTEXT) */}}
{{- define "huc.validateNonRoot" -}}
{{- $nonRoot := .pod.runAsNonRoot -}}
{{- if hasKey .container "runAsNonRoot" -}}{{- $nonRoot = .container.runAsNonRoot -}}{{- end -}}
{{- $user := .pod.runAsUser -}}
{{- if hasKey .container "runAsUser" -}}{{- $user = .container.runAsUser -}}{{- end -}}
{{- if and $nonRoot (not (kindIs "invalid" $user)) (eq (int64 $user) 0) -}}
{{- fail (printf "%s: runAsNonRoot true with runAsUser 0 (pod or container securityContext): the kubelet refuses to start such a container; set a non-zero runAsUser, or runAsNonRoot false to run as root" .what) -}}
{{- end -}}
{{- end -}}

{{/* http, or https with tls.enabled. */}}
{{- define "huc.scheme" -}}
{{- if .Values.tls.enabled -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* Base URL of the collector inside the cluster: http(s)://<service>.<namespace>:<port> */}}
{{- define "huc.url" -}}
{{- printf "%s://%s.%s:%d" (include "huc.scheme" .) (include "huc.fullname" .) .Release.Namespace (int .Values.service.port) -}}
{{- end -}}

{{/* "true" when the collector checks readers' tokens with TokenReviews and SubjectAccessReviews. */}}
{{- define "huc.kubeReadAuth" -}}
{{- if eq .Values.readAuth.mode "kubernetes" -}}true{{- end -}}
{{- end -}}

{{/* Where the web config Secret, the TLS Secret and (in the agent) the CA are mounted. */}}
{{- define "huc.webConfigMount" -}}
/etc/hami-usage-collector/web
{{- end -}}
{{- define "huc.tlsMount" -}}
/etc/hami-usage-collector/tls
{{- end -}}
{{- define "huc.agentCaMount" -}}
/etc/hami-usage-collector/collector-ca
{{- end -}}

{{/* "true" when the collector gets a web config file (TLS or basic-auth users). */}}
{{- define "huc.webConfigRendered" -}}
{{- if or .Values.tls.enabled .Values.readAuth.basicAuthUsers -}}true{{- end -}}
{{- end -}}

{{/* The exporter-toolkit web config of the collector: TLS from the mounted Secret, basic-auth users. */}}
{{- define "huc.webConfig" -}}
{{- $config := dict -}}
{{- with .Values.tls -}}
{{- if .enabled -}}
{{- $dir := include "huc.tlsMount" $ -}}
{{- $tls := dict "cert_file" (printf "%s/tls.crt" $dir) "key_file" (printf "%s/tls.key" $dir) "client_auth_type" .clientAuthType "min_version" .minVersion -}}
{{- if ne .clientAuthType "NoClientCert" -}}
{{- $_ := set $tls "client_ca_file" (include "huc.collectorCaFile" $) -}}
{{- end -}}
{{- $_ := set $config "tls_server_config" $tls -}}
{{- end -}}
{{- end -}}
{{- with .Values.readAuth.basicAuthUsers -}}
{{- $_ := set $config "basic_auth_users" . -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/* The CA file the collector checks client certificates against: caKey of the TLS Secret,
     or of caSecretName (then mounted beside it). */}}
{{- define "huc.collectorCaFile" -}}
{{- if .Values.tls.caSecretName -}}
{{- printf "%s/%s" (include "huc.agentCaMount" .) .Values.tls.caKey -}}
{{- else -}}
{{- printf "%s/%s" (include "huc.tlsMount" .) .Values.tls.caKey -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the CA bundle (tls.caKey). */}}
{{- define "huc.caSecret" -}}
{{- default .Values.tls.secretName .Values.tls.caSecretName -}}
{{- end -}}

{{/* The headless Service of every collector pod. */}}
{{- define "huc.headless" -}}
{{- printf "%s-headless" (include "huc.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The StatefulSet and headless Service of one shard; (list $ INDEX). */}}
{{- define "huc.shardName" -}}
{{- printf "%s-shard-%d" (include "huc.fullname" (index . 0)) (int (index . 1)) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Where the agents push, as env entries: the shard URL template and the shard count when
     sharded; else the headless Service (every replica) or, with one replica, the Service. */}}
{{- define "huc.agentCollectorEnv" -}}
{{- $ns := .Release.Namespace -}}
{{- $scheme := include "huc.scheme" . -}}
{{- if gt (int .Values.collector.shards) 1 -}}
- name: HAMI_AGENT_COLLECTOR_SHARDS
  value: {{ printf "%s://%s-shard-{shard}.%s:9396" $scheme (include "huc.fullname" .) $ns | quote }}
- name: HAMI_AGENT_SHARD_COUNT
  value: {{ .Values.collector.shards | quote }}
{{- else if gt (int .Values.collector.replicas) 1 -}}
- name: HAMI_AGENT_COLLECTOR
  value: {{ printf "%s://%s.%s:9396" $scheme (include "huc.headless" .) $ns | quote }}
{{- else -}}
- name: HAMI_AGENT_COLLECTOR
  value: {{ include "huc.url" . | quote }}
{{- end -}}
{{- if and .Values.tls.enabled .Values.tls.caKey }}
- name: HAMI_AGENT_COLLECTOR_CA_FILE
  value: {{ printf "%s/%s" (include "huc.agentCaMount" .) .Values.tls.caKey | quote }}
{{- end -}}
{{- end -}}

{{/* Service accounts allowed to push, namespace/name, comma-separated ("" = pushes off). */}}
{{- define "huc.pushServiceAccounts" -}}
{{- $accounts := list -}}
{{- if .Values.agent.enabled -}}
{{- $accounts = append $accounts (printf "%s/%s" .Release.Namespace (include "huc.agentServiceAccount" .)) -}}
{{- end -}}
{{- $accounts = concat $accounts .Values.push.extraServiceAccounts -}}
{{- join "," $accounts -}}
{{- end -}}

{{/* "true" when the collector accepts pushes (and so needs TokenReviews and the cluster-wide pod watch). */}}
{{- define "huc.pushEnabled" -}}
{{- if include "huc.pushServiceAccounts" . -}}true{{- end -}}
{{- end -}}

{{/* Whether the collector reads allocations from a cluster-wide pod watch (its default). */}}
{{- define "huc.allocationsEnabled" -}}
{{- if ne (toString (dig "allocations" true .Values.collector.settings)) "false" -}}true{{- end -}}
{{- end -}}

{{/* Whether the collector reads each card's capacity from a watch of the Nodes (its default). */}}
{{- define "huc.capacityEnabled" -}}
{{- if ne (toString (dig "capacity" true .Values.collector.settings)) "false" -}}true{{- end -}}
{{- end -}}

{{/* A settings value as an env var string: lists comma-joined, whole floats without an exponent. */}}
{{- define "huc.envValue" -}}
{{- $v := . -}}
{{- if kindIs "slice" $v -}}
{{- $parts := list -}}
{{- range $v -}}{{- $parts = append $parts (include "huc.envValue" .) -}}{{- end -}}
{{- join "," $parts -}}
{{- else if kindIs "float64" $v -}}
{{- if eq $v (floor $v) -}}{{- int64 $v -}}{{- else -}}{{- $v -}}{{- end -}}
{{- else -}}
{{- $v -}}
{{- end -}}
{{- end -}}

{{/* env entries PREFIX<NAME> for a map of camelCase settings, in key order. */}}
{{- define "huc.settingsEnv" -}}
{{- $prefix := index . 0 -}}
{{- $settings := index . 1 -}}
{{- range $key := keys $settings | sortAlpha }}
- name: {{ printf "%s%s" $prefix (snakecase $key | upper) }}
  value: {{ include "huc.envValue" (index $settings $key) | quote }}
{{- end }}
{{- end -}}

{{/* Whether the Prometheus Operator monitor is rendered: asked for, and the API is there (or forced). */}}
{{- define "huc.monitorRendered" -}}
{{- if .Values.monitor.enabled -}}
{{- if or .Values.monitor.force (.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .Values.monitor.kind)) -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* Values the schema cannot check alone: fail with a message naming them. */}}
{{- define "huc.validate" -}}
{{- if and (not .Values.discovery.flavours) (not (include "huc.pushEnabled" .)) -}}
{{- fail "nothing to collect: discovery.flavours is empty and no agent may push; set discovery.flavours or agent.enabled=true" -}}
{{- end -}}
{{- if .Values.agent.enabled -}}
{{- $mount := trimSuffix "/" .Values.agent.hostPath.path -}}
{{- range .Values.agent.roots -}}
{{- if not (or (eq (trimSuffix "/" .) $mount) (hasPrefix (printf "%s/" $mount) .)) -}}
{{- fail (printf "agent.roots: %s is not inside agent.hostPath.path (%s), the only host folder the agent sees" . $mount) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- include "huc.validateRemoteWrite" . -}}
{{- include "huc.validateReadAuth" . -}}
{{- include "huc.validateNonRoot" (dict "what" "collector" "pod" .Values.collector.podSecurityContext "container" .Values.collector.securityContext) -}}
{{- if .Values.agent.enabled -}}
{{- include "huc.validateNonRoot" (dict "what" "agent" "pod" .Values.agent.podSecurityContext "container" (include "huc.agentSecurityContext" . | fromYaml)) -}}
{{- end -}}
{{- if and (gt (int .Values.collector.replicas) 1) (ge (int .Values.collector.pdb.minAvailable) (int .Values.collector.replicas)) -}}
{{- fail (printf "collector.pdb.minAvailable (%d) must be below collector.replicas (%d), or no pod could ever be evicted" (int .Values.collector.pdb.minAvailable) (int .Values.collector.replicas)) -}}
{{- end -}}
{{- end -}}

{{/* remoteWrite's Secret and keys, and the replica label the chart owns. */}}
{{- define "huc.validateRemoteWrite" -}}
{{- $rw := .Values.remoteWrite -}}
{{- $keys := list $rw.bearerTokenKey $rw.passwordKey $rw.caKey | compact -}}
{{- $settings := .Values.collector.settings -}}
{{- if and $rw.existingSecret (not $keys) -}}
{{- fail "remoteWrite.existingSecret is set but names no key: set remoteWrite.bearerTokenKey, passwordKey or caKey" -}}
{{- end -}}
{{- if and $keys (not $rw.existingSecret) -}}
{{- fail "remoteWrite.bearerTokenKey/passwordKey/caKey need remoteWrite.existingSecret, the Secret that holds them" -}}
{{- end -}}
{{- if and $keys (not $settings.remoteWriteUrl) -}}
{{- fail "remoteWrite credentials are set but collector.settings.remoteWriteUrl is empty" -}}
{{- end -}}
{{- if and $rw.bearerTokenKey $rw.passwordKey -}}
{{- fail "remoteWrite.bearerTokenKey and remoteWrite.passwordKey exclude each other (bearer token or basic auth)" -}}
{{- end -}}
{{- if ne (not $rw.passwordKey) (not $settings.remoteWriteUsername) -}}
{{- fail "remoteWrite.passwordKey and collector.settings.remoteWriteUsername go together (basic auth)" -}}
{{- end -}}
{{- range $settings.externalLabel -}}
{{- if hasPrefix "replica=" (trim .) -}}
{{- fail "collector.settings.externalLabel: replica is set by the chart (each pod's name)" -}}
{{- end -}}
{{- end -}}
{{- end -}}


{{/* readAuth and tls: what the collector would refuse at start, or could not serve. */}}
{{- define "huc.validateReadAuth" -}}
{{- $ra := .Values.readAuth -}}
{{- if and (eq $ra.mode "basic") (not $ra.basicAuthUsers) -}}
{{- fail "readAuth.mode=basic needs readAuth.basicAuthUsers (user: bcrypt hash)" -}}
{{- end -}}
{{- if and $ra.basicAuthUsers (ne $ra.mode "basic") -}}
{{- fail (printf "readAuth.basicAuthUsers is set but readAuth.mode is %s (basic uses them)" $ra.mode) -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $ra.tenants -}}
{{- if hasKey $seen .namespace -}}
{{- fail (printf "readAuth.tenants: namespace %s is listed twice (put all its subjects in one entry)" .namespace) -}}
{{- end -}}
{{- $_ := set $seen .namespace true -}}
{{- end -}}
{{- $tls := .Values.tls -}}
{{- if $tls.enabled -}}
{{- if not $tls.secretName -}}
{{- fail "tls.enabled needs tls.secretName, a kubernetes.io/tls Secret (tls.crt, tls.key) of the release namespace" -}}
{{- end -}}
{{- if and (ne $tls.clientAuthType "NoClientCert") (not $tls.caKey) -}}
{{- fail (printf "tls.clientAuthType %s needs tls.caKey, the CA client certificates are checked against" $tls.clientAuthType) -}}
{{- end -}}
{{- if and (eq $tls.clientAuthType "RequireAndVerifyClientCert") .Values.agent.enabled -}}
{{- fail "tls.clientAuthType RequireAndVerifyClientCert refuses the agents (they present no client certificate): use VerifyClientCertIfGiven or agent.enabled=false" -}}
{{- end -}}
{{- end -}}
{{- end -}}

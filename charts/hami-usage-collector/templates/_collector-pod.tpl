{{/* The collector's pod template, for the Deployment (shard -1: unsharded) and each
     shard's StatefulSet; called with (dict "root" $ "shard" INDEX). */}}
{{- define "huc.collectorPodTemplate" -}}
{{- $root := .root -}}
{{- $shard := .shard -}}
template:
  metadata:
    labels:
      {{- include "huc.collectorLabels" $root | nindent 6 }}
      {{- with include "huc.shardLabel" $shard }}
      {{- . | nindent 6 }}
      {{- end }}
      {{- with $root.Values.collector.podLabels }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- $annotations := $root.Values.collector.podAnnotations }}
    {{- if include "huc.webConfigRendered" $root }}
    {{- /* the web config itself is read at start: a changed one rolls the pods */}}
    {{- $annotations = merge (dict "hami-usage-collector/web-config" (include "huc.webConfig" $root | sha256sum)) $annotations }}
    {{- end }}
    {{- with $annotations }}
    annotations:
      {{- toYaml . | nindent 6 }}
    {{- end }}
  spec:
    serviceAccountName: {{ include "huc.collectorServiceAccount" $root }}
    automountServiceAccountToken: true
    enableServiceLinks: false
    {{- with $root.Values.collector.priorityClassName }}
    priorityClassName: {{ . }}
    {{- end }}
    {{- with $root.Values.imagePullSecrets }}
    imagePullSecrets:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    securityContext:
      {{- toYaml $root.Values.collector.podSecurityContext | nindent 6 }}
    containers:
      - name: collector
        image: {{ include "huc.image" $root | quote }}
        imagePullPolicy: {{ $root.Values.image.pullPolicy }}
        command: [hami-collector]
        args: [serve]
        env:
          - name: HAMI_COLLECTOR_LISTEN
            value: "0.0.0.0:9396"
          # The query engine's compiled loops, kept in the pod's /tmp (an emptyDir, which
          # outlives a container's restart): a restarted container loads them and is ready
          # in about a second instead of compiling for 10-30 s.
          - name: NUMBA_CACHE_DIR
            value: /tmp/numba
          - name: HAMI_COLLECTOR_KUBERNETES
            value: "true"
          - name: HAMI_COLLECTOR_FLAVOURS
            value: {{ join "," $root.Values.discovery.flavours | quote }}
          - name: HAMI_COLLECTOR_NAMESPACES
            value: {{ join "," $root.Values.discovery.namespaces | quote }}
          {{- range $flavour := $root.Values.discovery.flavours }}
          {{- $d := index $root.Values.discovery $flavour }}
          - name: HAMI_COLLECTOR_{{ upper $flavour }}_SELECTOR
            value: {{ $d.selector | quote }}
          - name: HAMI_COLLECTOR_{{ upper $flavour }}_PORT
            value: {{ $d.port | quote }}
          {{- end }}
          - name: HAMI_COLLECTOR_PUSH_AUDIENCE
            value: {{ $root.Values.push.audience | quote }}
          - name: HAMI_COLLECTOR_PUSH_SERVICE_ACCOUNTS
            value: {{ include "huc.pushServiceAccounts" $root | quote }}
          - name: HAMI_COLLECTOR_READ_AUTH
            value: {{ $root.Values.readAuth.mode | quote }}
          - name: HAMI_COLLECTOR_READ_AUTH_TTL
            value: {{ include "huc.envValue" $root.Values.readAuth.ttl | quote }}
          {{- if include "huc.webConfigRendered" $root }}
          - name: HAMI_COLLECTOR_WEB_CONFIG_FILE
            value: {{ printf "%s/web-config.yaml" (include "huc.webConfigMount" $root) | quote }}
          {{- end }}
          {{- if ge (int $shard) 0 }}
          - name: HAMI_COLLECTOR_SHARD_COUNT
            value: {{ $root.Values.collector.shards | quote }}
          - name: HAMI_COLLECTOR_SHARD_INDEX
            value: {{ $shard | quote }}
          {{- end }}
          - name: HAMI_COLLECTOR_REPLICA
            valueFrom:
              fieldRef:
                fieldPath: metadata.name
          {{- with $root.Values.remoteWrite }}
          {{- if .existingSecret }}
          {{- if .bearerTokenKey }}
          - name: HAMI_COLLECTOR_REMOTE_WRITE_BEARER_TOKEN_FILE
            value: {{ printf "%s/%s" (include "huc.remoteWriteMount" $root) .bearerTokenKey | quote }}
          {{- end }}
          {{- if .passwordKey }}
          - name: HAMI_COLLECTOR_REMOTE_WRITE_PASSWORD_FILE
            value: {{ printf "%s/%s" (include "huc.remoteWriteMount" $root) .passwordKey | quote }}
          {{- end }}
          {{- if .caKey }}
          - name: HAMI_COLLECTOR_REMOTE_WRITE_CA_FILE
            value: {{ printf "%s/%s" (include "huc.remoteWriteMount" $root) .caKey | quote }}
          {{- end }}
          {{- end }}
          {{- end }}
          - name: HAMI_COLLECTOR_LOG_FORMAT
            value: {{ $root.Values.collector.logFormat | quote }}
          - name: HAMI_COLLECTOR_LOG_LEVEL
            value: {{ $root.Values.collector.logLevel | quote }}
          {{- with include "huc.settingsEnv" (list "HAMI_COLLECTOR_" $root.Values.collector.settings) | trim }}
          {{- . | nindent 10 }}
          {{- end }}
          {{- with $root.Values.collector.extraEnv }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        ports:
          - name: http
            containerPort: 9396
            protocol: TCP
        {{- $tls := $root.Values.tls }}
        livenessProbe:
          {{- include "huc.collectorProbe" (dict "root" $root "path" "/healthz") | nindent 10 }}
          {{- toYaml $root.Values.collector.livenessProbe | nindent 10 }}
        readinessProbe:
          {{- include "huc.collectorProbe" (dict "root" $root "path" "/readyz") | nindent 10 }}
          {{- toYaml $root.Values.collector.readinessProbe | nindent 10 }}
        resources:
          {{- toYaml $root.Values.collector.resources | nindent 10 }}
        securityContext:
          {{- toYaml $root.Values.collector.securityContext | nindent 10 }}
        volumeMounts:
          - name: tmp
            mountPath: /tmp
          {{- if $root.Values.remoteWrite.existingSecret }}
          - name: remote-write
            mountPath: {{ include "huc.remoteWriteMount" $root }}
            readOnly: true
          {{- end }}
          {{- /* whole-volume mounts, never subPath: a renewed certificate appears in place */}}
          {{- if include "huc.webConfigRendered" $root }}
          - name: web-config
            mountPath: {{ include "huc.webConfigMount" $root }}
            readOnly: true
          {{- end }}
          {{- if $tls.enabled }}
          - name: tls
            mountPath: {{ include "huc.tlsMount" $root }}
            readOnly: true
          {{- if include "huc.collectorClientCa" $root }}
          - name: client-ca
            mountPath: {{ include "huc.agentCaMount" $root }}
            readOnly: true
          {{- end }}
          {{- end }}
    volumes:
      - name: tmp
        emptyDir:
          sizeLimit: 16Mi
      {{- with $root.Values.remoteWrite }}
      {{- if .existingSecret }}
      - name: remote-write
        secret:
          secretName: {{ .existingSecret }}
          defaultMode: 0444
          items:
            {{- range $key := list .bearerTokenKey .passwordKey .caKey | compact | uniq }}
            - key: {{ $key | quote }}
              path: {{ $key | quote }}
            {{- end }}
      {{- end }}
      {{- end }}
      {{- if include "huc.webConfigRendered" $root }}
      - name: web-config
        secret:
          secretName: {{ include "huc.fullname" $root }}-web-config
          defaultMode: 0444
      {{- end }}
      {{- if $tls.enabled }}
      - name: tls
        secret:
          secretName: {{ $tls.secretName }}
          defaultMode: 0444
      {{- if include "huc.collectorClientCa" $root }}
      - name: client-ca
        secret:
          secretName: {{ $tls.caSecretName }}
          defaultMode: 0444
          items:
            - key: {{ $tls.caKey | quote }}
              path: {{ $tls.caKey | quote }}
      {{- end }}
      {{- end }}
    {{- with $root.Values.collector.nodeSelector }}
    nodeSelector:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $root.Values.collector.tolerations }}
    tolerations:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with include "huc.collectorAffinity" (dict "root" $root "shard" $shard) | trim }}
    affinity:
      {{- . | nindent 6 }}
    {{- end }}
    {{- with $root.Values.collector.topologySpreadConstraints }}
    topologySpreadConstraints:
      {{- toYaml . | nindent 6 }}
    {{- end }}
{{- end -}}


{{/* The label that tells one shard's pods from the others' (nothing when unsharded). */}}
{{- define "huc.shardLabel" -}}
{{- if ge (int .) 0 -}}hami-usage-collector/shard: {{ . | quote }}{{- end -}}
{{- end -}}

{{/* The selector of the collector pods of one shard (or of all, unsharded); (dict "root" $ "shard" INDEX). */}}
{{- define "huc.podSelector" -}}
{{ include "huc.collectorSelector" .root }}
{{- with include "huc.shardLabel" .shard }}
{{ . }}
{{- end }}
{{- end -}}

{{/* collector.affinity as given; else, with several replicas, anti-affinity between the
     pods of one shard (replicas of one shard on one node would fall together). */}}
{{- define "huc.collectorAffinity" -}}
{{- $c := .root.Values.collector -}}
{{- if $c.affinity -}}
{{- toYaml $c.affinity -}}
{{- else if and (gt (int $c.replicas) 1) (ne $c.antiAffinity "none") -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "huc.podSelector" . | fromYaml)) -}}
podAntiAffinity:
{{- if eq $c.antiAffinity "hard" }}
  requiredDuringSchedulingIgnoredDuringExecution:
    {{- list $term | toYaml | nindent 4 }}
{{- else }}
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        {{- toYaml $term | nindent 8 }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* Where the remote-write Secret's keys are mounted (read-only) in the collector. */}}
{{- define "huc.remoteWriteMount" -}}
/etc/hami-usage-collector/remote-write
{{- end -}}


{{/* A collector probe of PATH: HTTPS with TLS; tcpSocket where every client must present a
     certificate (the kubelet presents none); (dict "root" $ "path" PATH). */}}
{{- define "huc.collectorProbe" -}}
{{- $tls := .root.Values.tls -}}
{{- if and $tls.enabled (eq $tls.clientAuthType "RequireAndVerifyClientCert") -}}
tcpSocket:
  port: http
{{- else -}}
httpGet:
  path: {{ .path }}
  port: http
  {{- if $tls.enabled }}
  scheme: HTTPS
  {{- end }}
{{- end -}}
{{- end -}}

{{/* "true" when the collector checks client certificates against a CA of another Secret. */}}
{{- define "huc.collectorClientCa" -}}
{{- $tls := .Values.tls -}}
{{- if and $tls.enabled $tls.caSecretName (ne $tls.clientAuthType "NoClientCert") -}}true{{- end -}}
{{- end -}}

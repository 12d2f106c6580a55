{{/* ===== names and labels ===== */}}

{{- define "idem.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "idem.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "idem.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Standard labels (https://helm.sh/docs/chart_best_practices/labels/). */}}
{{- define "idem.labels" -}}
helm.sh/chart: {{ include "idem.chart" . }}
{{ include "idem.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The migrate hook's labels: not the selector labels, so that neither the Service nor
     the PodDisruptionBudget ever selects its pod. */}}
{{- define "idem.migrateLabels" -}}
helm.sh/chart: {{ include "idem.chart" . }}
app.kubernetes.io/name: {{ include "idem.name" . }}-migrate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: migrate
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "idem.selectorLabels" -}}
app.kubernetes.io/name: {{ include "idem.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "idem.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "idem.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* "repository[:tag][@digest]" from an image block; the tag defaults to the given fallback. */}}
{{- define "idem.imageRef" -}}
{{- $img := index . 0 -}}
{{- $tag := default (index . 1) $img.tag | toString -}}
{{- $ref := $img.repository -}}
{{- if $tag }}{{ $ref = printf "%s:%s" $ref $tag }}{{ end -}}
{{- if $img.digest }}{{ $ref = printf "%s@%s" $ref $img.digest }}{{ end -}}
{{- $ref -}}
{{- end }}

{{/* ===== secrets ===== */}}

{{- define "idem.secretName" -}}
{{- include "idem.fullname" . }}
{{- end }}

{{/* The chart creates its Secret only for values given inline or generated. */}}
{{- define "idem.createSecret" -}}
{{- if or (and .Values.redis.password (not .Values.redis.existingSecret)) (include "idem.ownAdminToken" .) -}}
true
{{- end -}}
{{- end }}

{{/* "true" when the admin token lives in the chart's Secret (inline or generated). */}}
{{- define "idem.ownAdminToken" -}}
{{- with .Values.idem.adminToken -}}
{{- if and (not .existingSecret) (or .value .generate) -}}
true
{{- end -}}
{{- end -}}
{{- end }}

{{/* The admin token the chart's Secret holds (base64): the inline value, else the one
     generated at install and read back from the cluster on every upgrade (`lookup`;
     `helm template` has no cluster and renders a fresh one each time). */}}
{{- define "idem.adminTokenData" -}}
{{- if .Values.idem.adminToken.value -}}
{{ .Values.idem.adminToken.value | b64enc }}
{{- else -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "idem.secretName" .) -}}
{{- $kept := "" -}}
{{- if $existing -}}{{- $kept = index ($existing.data | default dict) "admin-token" | default "" -}}{{- end -}}
{{- $kept | default (randAlphaNum 40 | b64enc) -}}
{{- end -}}
{{- end }}

{{- define "idem.redisInUse" -}}
{{- if eq (include "idem.storeBackend" .) "redis" }}true{{ end -}}
{{- end }}

{{- define "idem.postgresInUse" -}}
{{- if eq (include "idem.storeBackend" .) "postgres" }}true{{ end -}}
{{- end }}

{{- define "idem.storeBackend" -}}
{{- (.Values.idem.config.store | default dict).backend | default "memory" -}}
{{- end }}

{{/* "secretName/key" of the Redis password, or "" when there is none. */}}
{{- define "idem.redisPasswordRef" -}}
{{- if and (include "idem.redisInUse" .) (not .Values.redis.existingSecretUrlKey) -}}
{{- if .Values.redis.existingSecret -}}
{{- if .Values.redis.existingSecretPasswordKey -}}
{{ .Values.redis.existingSecret }}/{{ .Values.redis.existingSecretPasswordKey }}
{{- end -}}
{{- else if .Values.redis.password -}}
{{ include "idem.secretName" . }}/redis-password
{{- end -}}
{{- end -}}
{{- end }}

{{/* "secretName/key" of the admin token, or "". */}}
{{- define "idem.adminTokenRef" -}}
{{- with .Values.idem.adminToken -}}
{{- if .existingSecret -}}
{{ .existingSecret }}/{{ .existingSecretKey }}
{{- else if (include "idem.ownAdminToken" $) -}}
{{ include "idem.secretName" $ }}/admin-token
{{- end -}}
{{- end -}}
{{- end }}

{{/* ===== idem.yaml ===== */}}

{{/* store.redis.url as written into the ConfigMap: references to env vars, no secret. */}}
{{- define "idem.redisUrl" -}}
{{- if .Values.redis.existingSecretUrlKey -}}
${IDEM_REDIS_URL}
{{- else -}}
{{- $url := .Values.redis.url -}}
{{- if include "idem.redisPasswordRef" . -}}
{{- $scheme := regexFind "^rediss?://" $url -}}
{{- printf "%s%s:${IDEM_REDIS_PASSWORD}@%s" $scheme .Values.redis.username (trimPrefix $scheme $url) -}}
{{- else if .Values.redis.username -}}
{{- $scheme := regexFind "^rediss?://" $url -}}
{{- printf "%s%s@%s" $scheme .Values.redis.username (trimPrefix $scheme $url) -}}
{{- else -}}
{{- $url -}}
{{- end -}}
{{- end -}}
{{- end }}

{{- define "idem.upstreamUrl" -}}
{{- $up := .Values.idem.config.upstream | default dict -}}
{{- $up.url | default (printf "%s://127.0.0.1:%d" .Values.app.scheme (int .Values.app.port)) -}}
{{- end }}

{{- define "idem.hostPort" -}}
{{- $host := index . 0 -}}
{{- $port := index . 1 | int -}}
{{- if and (contains ":" $host) (not (hasPrefix "[" $host)) -}}
[{{ $host }}]:{{ $port }}
{{- else -}}
{{ $host }}:{{ $port }}
{{- end -}}
{{- end }}

{{/*
The whole idem configuration file. Sections in the order of SPEC section 3; the chart
owns listen, admin, upstream.url, store.redis.url and store.postgres.url, everything else
is idem.config.
*/}}
{{- define "idem.configFile" -}}
{{- $c := .Values.idem.config -}}
{{- $store := $c.store | default dict -}}
# Rendered by the idem Helm chart ({{ include "idem.chart" . }}); edit the chart values, not
# this ConfigMap. ${VAR} references are expanded by idem from the container environment.
listen: {{ include "idem.hostPort" (list .Values.idem.bindAddress .Values.idem.ports.proxy) | quote }}
{{- with $c.server }}
server:
  {{- toYaml . | nindent 2 }}
{{- end }}
admin:
  listen: {{ include "idem.hostPort" (list .Values.idem.bindAddress .Values.idem.ports.admin) | quote }}
  token: "${IDEM_ADMIN_TOKEN:-}"
upstream:
  url: {{ include "idem.upstreamUrl" . | quote }}
  {{- with omit ($c.upstream | default dict) "url" }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
store:
  backend: {{ include "idem.storeBackend" . }}
  {{- with omit $store "backend" "redis" "postgres" "encryption" }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- with .Values.encryption.keys }}
  encryption:
    keys:
      {{- range . }}
      - id: {{ .id | quote }}
        file: {{ printf "/etc/idem-keys/%s" (.secretKey | default .id) | quote }}
      {{- end }}
    {{- with $.Values.encryption.credentialSecretKey }}
    credential_key_file: {{ printf "/etc/idem-keys/%s" . | quote }}
    {{- end }}
  {{- end }}
  {{- if or (include "idem.redisInUse" .) $store.redis }}
  redis:
    {{- /* Cluster mode may leave redis.url empty: its nodes carry the addresses. */}}
    {{- if and (include "idem.redisInUse" .) (or .Values.redis.url .Values.redis.existingSecretUrlKey) }}
    url: {{ include "idem.redisUrl" . | quote }}
    {{- end }}
    {{- with omit ($store.redis | default dict) "url" }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- if and .Values.redis.tls.caSecret (not ($store.redis | default dict).tls) }}
    tls:
      ca_file: {{ printf "/etc/idem-redis-ca/%s" .Values.redis.tls.caKey | quote }}
    {{- end }}
  {{- end }}
  {{- if or (include "idem.postgresInUse" .) $store.postgres }}
  postgres:
    {{- if include "idem.postgresInUse" . }}
    url: "${IDEM_POSTGRES_URL}"
    {{- end }}
    {{- with omit ($store.postgres | default dict) "url" }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
{{- with $c.default }}
default: {{ . }}
{{- end }}
{{- with $c.defaults }}
defaults:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.routes }}
routes:
  {{- range . }}
  - name: {{ toYaml .name }}
    {{- with omit . "name" }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
{{- end }}
{{- end }}

{{/* ===== durations ===== */}}

{{/* Whole seconds (rounded up) of a simple idem duration ("25s", "500ms", "1m", "1h"); -1 when not simple. */}}
{{- define "idem.durationSeconds" -}}
{{- $d := toString . | trim -}}
{{- if regexMatch "^[0-9]+(ms|s|m|h)$" $d -}}
{{- $n := regexFind "^[0-9]+" $d | int -}}
{{- $unit := regexFind "(ms|s|m|h)$" $d -}}
{{- if eq $unit "ms" }}{{ div (add $n 999) 1000 }}
{{- else if eq $unit "s" }}{{ $n }}
{{- else if eq $unit "m" }}{{ mul $n 60 }}
{{- else }}{{ mul $n 3600 }}
{{- end -}}
{{- else -}}
-1
{{- end -}}
{{- end }}

{{/* preStop sleep applies in container mode, on clusters that have the sleep action. */}}
{{- define "idem.preStopSleep" -}}
{{- if and (eq .Values.sidecar.mode "container") (gt (int .Values.idem.preStopSleepSeconds) 0) (semverCompare ">=1.30-0" .Capabilities.KubeVersion.Version) -}}
{{ int .Values.idem.preStopSleepSeconds }}
{{- else -}}
0
{{- end -}}
{{- end }}

{{/* ===== checks that the schema cannot express ===== */}}

{{- define "idem.validate" -}}
{{- $backend := include "idem.storeBackend" . -}}
{{- if and (eq .Values.sidecar.mode "native") (not (semverCompare ">=1.29-0" .Capabilities.KubeVersion.Version)) -}}
{{- fail (printf "sidecar.mode=native needs Kubernetes >= 1.29 (native sidecar containers); this cluster is %s. Set sidecar.mode=container." .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- if and (eq $backend "memory") (gt (int .Values.replicaCount) 1) -}}
{{- fail (printf "idem.config.store.backend=memory keeps idempotency keys inside each pod: with replicaCount=%d a repeat that lands on another pod executes again. Use a shared store (idem.config.store.backend=redis and redis.url, or postgres and postgres.existingSecret) or replicaCount=1." (int .Values.replicaCount)) -}}
{{- end -}}
{{- if and (eq $backend "postgres") (not .Values.postgres.existingSecret) -}}
{{- fail "idem.config.store.backend=postgres needs postgres.existingSecret: the Secret whose key postgres.existingSecretUrlKey holds the URL (postgres://user:password@host:5432/db?sslmode=verify-full)." -}}
{{- end -}}
{{- if and .Values.encryption.keys (not .Values.encryption.existingSecret) -}}
{{- fail "encryption.keys needs encryption.existingSecret: the Secret holding each key (32 random bytes in base64, from `idem keys new-encryption-key`), mounted at /etc/idem-keys." -}}
{{- end -}}
{{- if eq $backend "redis" -}}
{{- $r := .Values.redis -}}
{{- $mode := ((.Values.idem.config.store | default dict).redis | default dict).mode | default "standalone" -}}
{{- if $r.existingSecretUrlKey -}}
{{- if not $r.existingSecret -}}
{{- fail "redis.existingSecretUrlKey needs redis.existingSecret (the Secret that holds the URL)." -}}
{{- end -}}
{{- if or $r.url $r.password $r.username -}}
{{- fail "redis.existingSecretUrlKey takes the whole Redis URL from the Secret: leave redis.url, redis.username and redis.password empty." -}}
{{- end -}}
{{- else -}}
{{- if and (not $r.url) (eq $mode "standalone") -}}
{{- fail "idem.config.store.backend=redis needs redis.url (e.g. redis://redis-master.redis.svc:6379/0), or redis.existingSecret + redis.existingSecretUrlKey." -}}
{{- end -}}
{{- if $r.url -}}
{{- if not (regexMatch "^rediss?://[^/@]+" $r.url) -}}
{{- fail (printf "redis.url %q must look like redis://host:port/db or rediss://host:port/db." $r.url) -}}
{{- end -}}
{{- if contains "@" $r.url -}}
{{- fail "redis.url must not contain credentials: put the password in redis.password or redis.existingSecret (it reaches idem as IDEM_REDIS_PASSWORD), the user name in redis.username." -}}
{{- end -}}
{{- end -}}
{{- if and $r.password $r.existingSecret -}}
{{- fail "Give the Redis password either inline (redis.password) or as redis.existingSecret, not both." -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and .Values.idem.adminToken.value .Values.idem.adminToken.existingSecret -}}
{{- fail "Give the admin token either inline (idem.adminToken.value) or as idem.adminToken.existingSecret, not both." -}}
{{- end -}}
{{- if eq (int .Values.idem.ports.proxy) (int .Values.idem.ports.admin) -}}
{{- fail "idem.ports.proxy and idem.ports.admin must differ." -}}
{{- end -}}
{{- if or (eq (int .Values.app.port) (int .Values.idem.ports.proxy)) (eq (int .Values.app.port) (int .Values.idem.ports.admin)) -}}
{{- fail (printf "app.port %d collides with one of idem's ports (%d, %d): containers of a pod share one network namespace." (int .Values.app.port) (int .Values.idem.ports.proxy) (int .Values.idem.ports.admin)) -}}
{{- end -}}
{{- $grace := include "idem.durationSeconds" (((.Values.idem.config.server | default dict).shutdown_grace) | default "25s") | int -}}
{{- if ge $grace 0 -}}
{{- $needed := add $grace (include "idem.preStopSleep" . | int) -}}
{{- if le (int .Values.terminationGracePeriodSeconds) $needed -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed idem's drain time (%ds = server.shutdown_grace + preStop sleep), or Kubernetes kills idem with SIGKILL before in-flight calls are recorded." (int .Values.terminationGracePeriodSeconds) $needed) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.podDisruptionBudget.enabled (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) (not (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable)) -}}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both (set the other to null)." -}}
{{- end -}}
{{- end }}

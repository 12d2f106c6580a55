{{/* The idem container; the same spec in both sidecar modes, plus restartPolicy in native mode. */}}
{{- define "idem.sidecarContainer" -}}
- name: idem
  image: {{ include "idem.imageRef" (list .Values.idem.image .Chart.AppVersion) | quote }}
  imagePullPolicy: {{ .Values.idem.image.pullPolicy }}
  {{- if eq .Values.sidecar.mode "native" }}
  # Native sidecar: starts before the app, stops after it.
  restartPolicy: Always
  {{- end }}
  args:
    - serve
    - --config
    - /etc/idem/idem.yaml
    - --log-format
    - {{ .Values.idem.logFormat }}
    - --workers
    - {{ .Values.idem.workers | quote }}
  env:
    - name: RUST_LOG
      value: {{ .Values.idem.logLevel | quote }}
    {{- with include "idem.redisPasswordRef" . }}
    {{- $ref := splitList "/" . }}
    - name: IDEM_REDIS_PASSWORD
      valueFrom:
        secretKeyRef:
          name: {{ index $ref 0 }}
          key: {{ index $ref 1 }}
    {{- end }}
    {{- if and (include "idem.redisInUse" .) .Values.redis.existingSecretUrlKey }}
    - name: IDEM_REDIS_URL
      valueFrom:
        secretKeyRef:
          name: {{ .Values.redis.existingSecret }}
          key: {{ .Values.redis.existingSecretUrlKey }}
    {{- end }}
    {{- if include "idem.postgresInUse" . }}
    - name: IDEM_POSTGRES_URL
      valueFrom:
        secretKeyRef:
          name: {{ .Values.postgres.existingSecret }}
          key: {{ .Values.postgres.existingSecretUrlKey }}
    {{- end }}
    {{- with include "idem.adminTokenRef" . }}
    {{- $ref := splitList "/" . }}
    - name: IDEM_ADMIN_TOKEN
      valueFrom:
        secretKeyRef:
          name: {{ index $ref 0 }}
          key: {{ index $ref 1 }}
    {{- end }}
    {{- with .Values.traces }}
    {{- if .otlpEndpoint }}
    - name: OTEL_EXPORTER_OTLP_ENDPOINT
      value: {{ .otlpEndpoint | quote }}
    - name: OTEL_SERVICE_NAME
      value: {{ .serviceName | default (include "idem.fullname" $) | quote }}
    {{- with .sampler }}
    - name: OTEL_TRACES_SAMPLER
      value: {{ . | quote }}
    {{- end }}
    {{- with .samplerArg }}
    - name: OTEL_TRACES_SAMPLER_ARG
      value: {{ . | quote }}
    {{- end }}
    {{- with .resourceAttributes }}
    - name: OTEL_RESOURCE_ATTRIBUTES
      value: {{ . | quote }}
    {{- end }}
    {{- end }}
    {{- end }}
    {{- with .Values.idem.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: idem-proxy
      containerPort: {{ .Values.idem.ports.proxy }}
      protocol: TCP
    - name: idem-admin
      containerPort: {{ .Values.idem.ports.admin }}
      protocol: TCP
  {{- if .Values.idem.startupProbe.enabled }}
  startupProbe:
    httpGet:
      path: /healthz
      port: {{ .Values.idem.ports.admin }}
    {{- toYaml (omit .Values.idem.startupProbe "enabled") | nindent 4 }}
  {{- end }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: {{ .Values.idem.ports.admin }}
    {{- toYaml .Values.idem.livenessProbe | nindent 4 }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: {{ .Values.idem.ports.admin }}
    {{- toYaml .Values.idem.readinessProbe | nindent 4 }}
  {{- with include "idem.preStopSleep" . | int }}
  lifecycle:
    preStop:
      sleep:
        seconds: {{ . }}
  {{- end }}
  {{- with .Values.idem.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.idem.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    # The directory, not a subPath: kubelet then refreshes the file when the ConfigMap
    # changes (for a SIGHUP reload); `helm upgrade` rolls the pods anyway.
    - name: idem-config
      mountPath: /etc/idem
      readOnly: true
    {{- if .Values.redis.tls.caSecret }}
    - name: idem-redis-ca
      mountPath: /etc/idem-redis-ca
      readOnly: true
    {{- end }}
    {{- if .Values.encryption.keys }}
    # The directory: kubelet refreshes the files when the Secret changes, and a SIGHUP
    # (or the rollout a values change makes) picks up a rotated key list.
    - name: idem-keys
      mountPath: /etc/idem-keys
      readOnly: true
    {{- end }}
{{- end }}

{{/* The user's application container. */}}
{{- define "idem.appContainer" -}}
{{- $a := .Values.app -}}
{{- $image := $a.image -}}
{{- $args := $a.args -}}
{{- $securityContext := $a.securityContext -}}
{{- if not $image.repository -}}
{{- /* No app image given: the demo echo server, so the default values deploy something. */ -}}
{{- $image = merge (dict "repository" "hashicorp/http-echo" "tag" "1.0.0") (omit $image "repository") -}}
{{- $args = $args | default (list (printf "-listen=127.0.0.1:%d" (int $a.port)) "-text=hello from behind idem") -}}
{{- $securityContext = merge (dict "runAsUser" 65532 "runAsGroup" 65532) ($securityContext | default dict) -}}
{{- end -}}
- name: {{ $a.name }}
  image: {{ include "idem.imageRef" (list $image "") | quote }}
  imagePullPolicy: {{ $a.image.pullPolicy }}
  {{- with $a.command }}
  command:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $args }}
  args:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $a.env }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $a.envFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $a.ports }}
  ports:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $a.startupProbe }}
  startupProbe:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $a.livenessProbe }}
  livenessProbe:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $a.readinessProbe }}
  readinessProbe:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $a.lifecycle }}
  lifecycle:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $a.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $a.volumeMounts }}
  volumeMounts:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

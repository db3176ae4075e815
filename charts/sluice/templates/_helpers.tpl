{{/*
Labels on every object: config/default's app.kubernetes.io/part-of, and
Helm's own. Pod templates and selectors carry only sluice.selectorLabels,
as in config/default, so an upgrade never changes a selector.
*/}}
{{- define "sluice.commonLabels" -}}
app.kubernetes.io/part-of: sluice
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* Selector labels of one component: (list $ "check") */}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: sluice
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* Labels of an object of one component: (list $ "check") */}}
{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
{{ include "sluice.commonLabels" (index . 0) }}
{{- end }}

{{/* The image: repository@digest, or repository:tag (appVersion by default). */}}
{{- define "sluice.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* The Redis Secret of one component: (list $ "check") */}}
{{- define "sluice.redisSecret" -}}
{{- $c := index (index . 0).Values.redis (index . 1) -}}
{{- $c.existingSecret | default (printf "sluice-redis-%s" (index . 1)) -}}
{{- end }}

{{/* Whether the processes verify Redis with the Secrets' ca.crt. */}}
{{- define "sluice.redisCA" -}}
{{- if or .Values.redis.tls.ca .Values.redis.tls.caFromSecret }}true{{ end -}}
{{- end }}

{{/* The container's Redis settings and its Secret's volume mount: (list $ "check") */}}
{{- define "sluice.redisEnv" -}}
{{- $secret := include "sluice.redisSecret" . -}}
- name: SLUICE_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: url
- name: SLUICE_REDIS_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: username
      optional: true
- name: SLUICE_REDIS_PASSWORD_FILE
  value: /etc/sluice/redis/password
{{- if include "sluice.redisCA" (index . 0) }}
- name: SLUICE_REDIS_CA_FILE
  value: /etc/sluice/redis/ca.crt
{{- end }}
{{- end }}

{{/* The pods' security context: the "restricted" Pod Security Standard. */}}
{{- define "sluice.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "sluice.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{/* Preferred anti-affinity over nodes: (list $ "check") */}}
{{- define "sluice.defaultAffinity" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
  - weight: 100
    podAffinityTerm:
      topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "sluice.selectorLabels" . | nindent 10 }}
{{- end }}

{{/*
sluice.resourceAttributes renders a map as OTEL_RESOURCE_ATTRIBUTES:
key=value pairs, comma-separated, in key order.
*/}}
{{- define "sluice.resourceAttributes" -}}
{{- $pairs := list }}
{{- range $k, $v := . }}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/* The release's base name: kvdev for release "kvdev", else <release>-kvdev. */}}
{{- define "kvdev.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kvdev.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kvdev.controller" -}}{{ include "kvdev.fullname" . }}-host-controller{{- end -}}
{{- define "kvdev.plugin" -}}{{ include "kvdev.fullname" . }}-host-plugin{{- end -}}
{{- define "kvdev.relay" -}}{{ include "kvdev.fullname" . }}-host-relay{{- end -}}

{{/* The namespace everything goes to; `default` is refused. */}}
{{- define "kvdev.namespace" -}}
{{- if eq .Release.Namespace "default" -}}
{{- fail "kvdev: install into a namespace of its own (--namespace kvdev-system --create-namespace), not `default`" -}}
{{- end -}}
{{- .Release.Namespace -}}
{{- end -}}

{{- define "kvdev.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "kvdev.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: kvdev
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component (controller or plugin): never change on upgrade. */}}
{{- define "kvdev.selector" -}}
app.kubernetes.io/name: {{ include "kvdev.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kvdev.componentLabels" -}}
{{ include "kvdev.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kvdev.image" -}}
{{- $i := .Values.image -}}
{{- if $i.digest -}}
{{- printf "%s@%s" $i.repository $i.digest -}}
{{- else -}}
{{- printf "%s:%s" $i.repository (default .Chart.AppVersion $i.tag) -}}
{{- end -}}
{{- end -}}

{{- define "kvdev.pullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{ toYaml . }}
{{- end }}
{{- end -}}

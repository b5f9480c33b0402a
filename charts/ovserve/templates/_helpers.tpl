{{/* Chart name, truncated to a DNS label. */}}
{{- define "ovserve.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name of the release's objects. */}}
{{- define "ovserve.fullname" -}}
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

{{/* Name of cluster-scoped objects: unique per release AND namespace. */}}
{{- define "ovserve.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "ovserve.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ovserve.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ovserve.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ovserve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "ovserve.labels" -}}
helm.sh/chart: {{ include "ovserve.chart" . }}
{{ include "ovserve.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: ovserve
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "ovserve.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ovserve.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "ovserve.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "ovserve.runtimeImage" -}}
{{- default (include "ovserve.image" .) .Values.runtime.image -}}
{{- end -}}

{{/* gpu.nodeSelector as the operator's comma list of k=v (sorted, stable). */}}
{{- define "ovserve.gpuNodeSelector" -}}
{{- $pairs := list -}}
{{- range $k, $v := .Values.gpu.nodeSelector -}}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* Refuse combinations the schema cannot express. */}}
{{- define "ovserve.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "replicaCount > 1 needs leaderElection.enabled=true: without a Lease every replica would reconcile (kopf peering is not leader election)" -}}
{{- end -}}
{{- if and .Values.networkPolicy.default (not .Values.networkPolicy.enabled) -}}
{{- fail "networkPolicy.default=true needs networkPolicy.enabled=true (the operator's permission to manage NetworkPolicies)" -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor")) -}}
{{- fail "metrics.serviceMonitor.enabled=true needs the Prometheus Operator (monitoring.coreos.com/v1 ServiceMonitor) in the cluster" -}}
{{- end -}}
{{- if and .Values.metrics.runtimePodMonitor.enabled (not (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PodMonitor")) -}}
{{- fail "metrics.runtimePodMonitor.enabled=true needs the Prometheus Operator (monitoring.coreos.com/v1 PodMonitor) in the cluster" -}}
{{- end -}}
{{- if and .Values.metrics.prometheusRule.enabled (not (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PrometheusRule")) -}}
{{- fail "metrics.prometheusRule.enabled=true needs the Prometheus Operator (monitoring.coreos.com/v1 PrometheusRule) in the cluster" -}}
{{- end -}}
{{- end -}}

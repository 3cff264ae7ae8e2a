{{/* The release's name, cut to what a label value allows. */}}
{{- define "vkubelet.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "vkubelet.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "vkubelet.labels" -}}
{{ include "vkubelet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The node pods' labels, which the approver's pods do not carry. */}}
{{- define "vkubelet.nodeSelectorLabels" -}}
{{ include "vkubelet.selectorLabels" . }}
app.kubernetes.io/component: node
{{- end -}}

{{- define "vkubelet.approverSelectorLabels" -}}
{{ include "vkubelet.selectorLabels" . }}
app.kubernetes.io/component: csr-approver
{{- end -}}

{{/* The username of the node's bootstrap ServiceAccount. */}}
{{- define "vkubelet.bootstrapUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "vkubelet.fullname" .) -}}
{{- end -}}

{{/* The node names this release owns, as a list of quoted strings. */}}
{{- define "vkubelet.nodeNames" -}}
{{- if .Values.nodes -}}
{{- range $i, $n := .Values.nodes }}{{ if $i }}, {{ end }}{{ $n.name | quote }}{{ end -}}
{{- else -}}
{{- .Values.nodeName | quote -}}
{{- end -}}
{{- end -}}

{{/* The election Leases of this release's nodes, as quoted strings. */}}
{{- define "vkubelet.electionLeases" -}}
{{- if .Values.nodes -}}
{{- range $i, $n := .Values.nodes }}{{ if $i }}, {{ end }}{{ printf "vkubelet-%s" $n.name | quote }}{{ end -}}
{{- else -}}
{{- printf "vkubelet-%s" .Values.nodeName | quote -}}
{{- end -}}
{{- end -}}

{{/* Where the ServiceAccount's credentials are mounted in the pod. */}}
{{- define "vkubelet.saDir" -}}
/var/run/secrets/kubernetes.io/serviceaccount
{{- end -}}

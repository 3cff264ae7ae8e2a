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

{{/* "true" when the replicas spread a NodeSet's nodes between them
(--leader-elect-replicas): several replicas, several nodes. */}}
{{- define "vkubelet.spread" -}}
{{- if and (gt (int .Values.replicas) 1) (gt (len .Values.nodes) 1) -}}true{{- end -}}
{{- end -}}

{{/* The election Leases of this release's nodes, and when the replicas spread
the nodes, their membership Leases (one per replica), as quoted strings. */}}
{{- define "vkubelet.electionLeases" -}}
{{- if .Values.nodes -}}
{{- range $i, $n := .Values.nodes }}{{ if $i }}, {{ end }}{{ printf "vkubelet-%s" $n.name | quote }}{{ end -}}
{{- else -}}
{{- printf "vkubelet-%s" .Values.nodeName | quote -}}
{{- end -}}
{{- if include "vkubelet.spread" . -}}
{{- $group := include "vkubelet.fullname" . -}}
{{- range $i := until (int .Values.replicas) }}, {{ printf "%s-replica-%d" $group $i | quote }}{{ end -}}
{{- end -}}
{{- end -}}

{{/* Where the ServiceAccount's credentials are mounted in the pod. */}}
{{- define "vkubelet.saDir" -}}
/var/run/secrets/kubernetes.io/serviceaccount
{{- end -}}

{{/* The shared directory of the provider sidecar's unix socket. */}}
{{- define "vkubelet.sidecarSocketDir" -}}
/run/vkubelet-provider
{{- end -}}

{{/* The provider's configuration, as JSON: provider.config, or with the
sidecar and no configuration the sidecar's socket. Empty: none. */}}
{{- define "vkubelet.providerConfig" -}}
{{- if .Values.provider.config -}}
{{- toJson .Values.provider.config -}}
{{- else if .Values.providerSidecar.enabled -}}
{{- dict "endpoint" (printf "unix://%s/provider.sock" (include "vkubelet.sidecarSocketDir" .)) | toJson -}}
{{- end -}}
{{- end -}}

{{/* The first node of the release, where the helm test's probe pod runs. */}}
{{- define "vkubelet.firstNode" -}}
{{- if .Values.nodes -}}
{{- (index .Values.nodes 0).name -}}
{{- else -}}
{{- .Values.nodeName -}}
{{- end -}}
{{- end -}}

{{/* The spec of a helm test pod that runs kubectl (the entrypoint of
tests.image) with .args, as the test ServiceAccount, through the release's
kubeconfig (the API server's address and the cluster CA; the pod's own token).
It runs where the node pods run: their nodeSelector, tolerations and network. */}}
{{- define "vkubelet.testPodSpec" -}}
{{- $ := .root -}}
serviceAccountName: {{ include "vkubelet.fullname" $ }}-test
restartPolicy: Never
hostNetwork: {{ $.Values.hostNetwork }}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
{{- with $.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: check
    image: {{ $.Values.tests.image | quote }}
    args:
      - --kubeconfig=/etc/vkubelet/test/kubeconfig
      - --cache-dir=/tmp/kube-cache
      {{- toYaml .args | nindent 6 }}
      - --timeout={{ $.Values.tests.timeoutSeconds }}s
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities:
        drop: ["ALL"]
    resources:
      requests:
        cpu: 10m
        memory: 32Mi
      limits:
        memory: 128Mi
    volumeMounts:
      - name: kubeconfig
        mountPath: /etc/vkubelet/test
        readOnly: true
      - name: tmp
        mountPath: /tmp
volumes:
  - name: kubeconfig
    configMap:
      name: {{ include "vkubelet.fullname" $ }}
      items:
        - key: bootstrap-kubeconfig
          path: kubeconfig
  - name: tmp
    emptyDir: {}
{{- with $.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

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

{{/* The spec of a helm test pod that runs the shell script given as .script
against the API server, with the test ServiceAccount's token. It runs where
the node pods run (their nodeSelector, tolerations and network). Busybox's
wget does not verify the server's certificate: the token it sends may get the
release's nodes and list its namespace's pods, and lives as long as the test. */}}
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
    command: ["sh", "-c"]
    args:
      - |
        api={{ $.Values.apiServer | default "https://kubernetes.default.svc" }}
        deadline=$(( $(date +%s) + {{ $.Values.tests.timeoutSeconds }} ))
        # get PATH: the API's answer, with the test account's token.
        get() {
          wget -q -O - --no-check-certificate \
            --header "Authorization: Bearer $(cat {{ include "vkubelet.saDir" $ }}/token)" "$api$1"
        }
        # await WHAT PATH PATTERN: until the answer at PATH matches PATTERN.
        await() {
          until get "$2" | grep -q "$3"; do
            if [ "$(date +%s)" -ge "$deadline" ]; then
              echo "FAIL: $1, after {{ $.Values.tests.timeoutSeconds }}s; the last answer:"; get "$2"; exit 1
            fi
            sleep 2
          done
          echo "ok: $1"
        }
        {{- .script | trim | nindent 8 }}
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities:
        drop: ["ALL"]
    resources:
      requests:
        cpu: 10m
        memory: 16Mi
      limits:
        memory: 64Mi
{{- with $.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

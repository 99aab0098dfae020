{{/* Base name of every object of this release: the release name, with
"-nfsdir" appended unless it already says nfsdir. */}}
{{- define "nfsdir.fullname" -}}
{{- if contains "nfsdir" .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-nfsdir" .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "nfsdir.labels" -}}
app.kubernetes.io/name: nfsdir
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component (controller or node). */}}
{{- define "nfsdir.selector" -}}
app.kubernetes.io/name: nfsdir
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* image reference: pass (dict "image" .Values.image.x "root" .) */}}
{{- define "nfsdir.image" -}}
{{- $tag := .image.tag | default .root.Chart.AppVersion -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}

{{/* Directory on the node holding the driver's socket. */}}
{{- define "nfsdir.pluginDir" -}}
{{- printf "%s/plugins/%s" (trimSuffix "/" .Values.kubeletDir) .Values.driver.name -}}
{{- end -}}

{{/* Leader-election flags of the controller's sidecars. */}}
{{- define "nfsdir.leaderElection" -}}
- --leader-election
- --leader-election-namespace={{ .Release.Namespace }}
- --leader-election-lease-duration={{ .Values.controller.leaderElection.leaseDuration }}
- --leader-election-renew-deadline={{ .Values.controller.leaderElection.renewDeadline }}
- --leader-election-retry-period={{ .Values.controller.leaderElection.retryPeriod }}
{{- end -}}

{{/*
Host part of the node pods' HTTP addresses (metrics, liveness): the pod's
IP, which on the host network is the node's, so nothing else on the node
(another pod on the host network, a process on localhost) reaches them
through another interface; or every address.
*/}}
{{- define "nfsdir.nodeHTTPHost" -}}
{{- if eq .Values.node.httpBind "podIP" }}[$(POD_IP)]{{ end -}}
{{- end -}}

{{- define "nfsdir.podIPEnv" -}}
{{- if eq .Values.node.httpBind "podIP" }}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}
{{- end -}}

{{/*
"true" when the sidecars pass VolumeAttributesClass parameters to the
driver: feature.enableVolumeAttributesClass, or when null whether the
cluster serves VolumeAttributesClass in storage.k8s.io/v1beta1, the version
the pinned csi-provisioner (v5.3.0) and csi-resizer (v1.14.0) read.
*/}}
{{- define "nfsdir.vac" -}}
{{- $v := .Values.feature.enableVolumeAttributesClass -}}
{{- if kindIs "bool" $v -}}{{ $v }}{{- else -}}{{ .Capabilities.APIVersions.Has "storage.k8s.io/v1beta1/VolumeAttributesClass" }}{{- end -}}
{{- end -}}

{{/*
"true" when the controller's sidecars run as native sidecars (init
containers with restartPolicy Always, started in order):
controller.nativeSidecars, or when null whether the cluster is Kubernetes
1.29 or later, where kubelet does so by default.
*/}}
{{- define "nfsdir.nativeSidecars" -}}
{{- $v := .Values.controller.nativeSidecars -}}
{{- if kindIs "bool" $v -}}{{ $v }}{{- else -}}{{ semverCompare ">=1.29.0-0" .Capabilities.KubeVersion.Version }}{{- end -}}
{{- end -}}

{{/*
Timing of the controller containers' startup probes: tried every 2 s for
up to 5 min (a loaded node may take minutes to start the pod's
containers), so that each next container starts soon after the one before
has started.
*/}}
{{- define "nfsdir.startupProbeTiming" -}}
periodSeconds: 2
timeoutSeconds: 10
failureThreshold: 150
{{- end -}}

{{/* The daemons of NFS over TLS and Kerberos (securityDaemons) as
containers of the pod of component (node or controller): pass (dict "root"
. "component" ...). `nfsdir daemon` writes tlshd's configuration from the
Secret's files, or mounts the kernel's rpc_pipefs for rpc.gssd, and
becomes the daemon. Both need privileges: tlshd takes the kernel's
handshake requests (generic netlink, CAP_NET_ADMIN), rpc.gssd mounts
rpc_pipefs. The node's tlshd also answers the handshakes of an NFS server
on the node's network (tlshd.serverSecretName). */}}
{{- define "nfsdir.securityDaemonContainers" -}}
{{- $root := .root -}}
{{- $d := $root.Values.securityDaemons -}}
{{- $server := and (eq .component "node") $d.tlshd.serverSecretName -}}
{{- range $name, $c := dict "tlshd" $d.tlshd "rpc.gssd" $d.gssd }}
{{- $dir := replace "." "-" $name }}
{{- if $c.enabled }}
- name: {{ $dir }}
  image: {{ include "nfsdir.image" (dict "image" $d.image "root" $root) }}
  imagePullPolicy: {{ $d.image.pullPolicy }}
  args:
    - {{ $name }}
    - --secret-dir=/etc/nfsdir/{{ $dir }}
    {{- if and (eq $name "tlshd") $server }}
    - --server-secret-dir=/etc/nfsdir/tlshd-server
    {{- end }}
    - --log-level={{ $c.logLevel }}
  securityContext:
    privileged: true
  volumeMounts:
    - name: {{ $dir }}-secret
      mountPath: /etc/nfsdir/{{ $dir }}
      readOnly: true
    {{- if and (eq $name "tlshd") $server }}
    - name: tlshd-server-secret
      mountPath: /etc/nfsdir/tlshd-server
      readOnly: true
    {{- end }}
  resources:
    {{- toYaml $d.resources | nindent 4 }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The Secret volumes of nfsdir.securityDaemonContainers: pass the same
dict. */}}
{{- define "nfsdir.securityDaemonVolumes" -}}
{{- $d := .root.Values.securityDaemons -}}
{{- $secrets := dict -}}
{{- if $d.tlshd.enabled }}{{ $_ := set $secrets "tlshd" (required "securityDaemons.tlshd.secretName: the Secret of tlshd's certificates" $d.tlshd.secretName) }}{{ end -}}
{{- if and $d.tlshd.enabled (eq .component "node") $d.tlshd.serverSecretName }}{{ $_ := set $secrets "tlshd-server" $d.tlshd.serverSecretName }}{{ end -}}
{{- if $d.gssd.enabled }}{{ $_ := set $secrets "rpc-gssd" (required "securityDaemons.gssd.secretName: the Secret of rpc.gssd's keytab" $d.gssd.secretName) }}{{ end -}}
{{- range $name, $secret := $secrets }}
- name: {{ $name }}-secret
  secret:
    secretName: {{ $secret }}
    defaultMode: 0400
{{- end }}
{{- end -}}

{{/* "true" when the pod of component (node or controller) runs the
security daemons: pass the same dict. */}}
{{- define "nfsdir.runsSecurityDaemons" -}}
{{- $d := .root.Values.securityDaemons -}}
{{- if and (index $d .component) (or $d.tlshd.enabled $d.gssd.enabled) -}}true{{- end -}}
{{- end -}}

{{/*
The controller's and the node plugin's view of the exports ConfigMap.
*/}}
{{- define "nfsdir.exportsVolume" -}}
- name: exports
  configMap:
    name: {{ include "nfsdir.fullname" . }}-exports
{{- end -}}

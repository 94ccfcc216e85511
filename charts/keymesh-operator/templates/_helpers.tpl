{{/* The release's full name, at most 63 characters. */}}
{{- define "keymesh-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "keymesh-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "keymesh-operator.labels" -}}
{{ include "keymesh-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "keymesh-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "keymesh-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "keymesh-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
The operator's permissions on namespaced objects: exactly the calls it makes (see
operator/README.md, "RBAC"). Server-side apply of an object that does not exist yet needs
`create` besides `patch`. Shared by the ClusterRole and, with watchNamespace, the Role.
*/}}
{{- define "keymesh-operator.namespacedRules" -}}
# Watch CacheClusters; the operator never writes their spec or metadata.
- apiGroups: ["keymesh.io"]
  resources: ["cacheclusters"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["keymesh.io"]
  resources: ["cacheclusters/status"]
  verbs: ["get", "patch", "update"]
# Children, applied server-side and watched (owned objects); deleted by garbage collection.
# A StatefulSet is deleted (its pods orphaned) and created again to change its claim
# templates (spec.persistence turned on or off).
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# spec.persistence: claims are resized, given an owner reference (retainOnDelete: false) and
# deleted after a scale down where the API server has no persistentVolumeClaimRetentionPolicy.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "patch", "delete"]
- apiGroups: [""]
  resources: ["services", "secrets"]
  verbs: ["get", "list", "watch", "create", "patch"]
# The settings ConfigMaps of earlier pod-template revisions are deleted after an upgrade.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The node-tuning DaemonSet (spec.nodeTuning); deleted when tuning is turned off.
- apiGroups: ["apps"]
  resources: ["daemonsets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# A rollback takes the previous pod template from the StatefulSet's history.
- apiGroups: ["apps"]
  resources: ["controllerrevisions"]
  verbs: ["list"]
# Deleted when spec.podDisruptionBudget.enabled / spec.networkPolicy.enabled turns false.
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Only when the Prometheus operator's CRD exists; deleted when turned off.
- apiGroups: ["monitoring.coreos.com"]
  resources: ["servicemonitors"]
  verbs: ["get", "create", "patch", "delete"]
# spec.tls.certManager: only when cert-manager's CRD exists; deleted when turned off.
- apiGroups: ["cert-manager.io"]
  resources: ["certificates"]
  verbs: ["get", "create", "patch", "delete"]
# Pod IPs and readiness for the mesh; which pods the client Service routes to (a pod leaves
# it before its handoff).
- apiGroups: [""]
  resources: ["pods", "endpoints"]
  verbs: ["get", "list", "watch"]
# The pods' readiness gate (keymesh.io/serving), set before a handoff.
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end -}}

{{/* Node zones for the status (cluster-scoped, so never in a Role). */}}
{{- define "keymesh-operator.nodeRules" -}}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get", "list", "watch"]
{{- end -}}

#!/usr/bin/env bash
# Install nfsdir from the plain manifests (rendered from the Helm chart with
# default values, in kube-system). Helm users: helm install nfsdir charts/nfsdir -n kube-system
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kubectl apply -f "$here/nfsdir.yaml"
echo "nfsdir installed. Next: edit and apply $here/example/storageclass.yaml, then a PVC such as $here/example/pvc.yaml."

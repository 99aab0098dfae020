#!/usr/bin/env bash
# Remove nfsdir installed from the plain manifests. Volumes and their data on
# the NFS server are left as they are; delete PVCs first if you want their
# onDelete policy applied.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kubectl delete --ignore-not-found -f "$here/nfsdir.yaml"

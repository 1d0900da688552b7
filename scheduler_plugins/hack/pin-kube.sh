#!/usr/bin/env bash
# Pin a Go module to one Kubernetes release.
#
# k8s.io/kubernetes refers to its staging modules (k8s.io/api, client-go, ...)
# through `replace => ./staging/...` lines that do not work from outside its
# tree. This script reads that replace block from k8s.io/kubernetes' own
# go.mod in the module cache and rewrites it as `k8s.io/x => k8s.io/x v0.N.P`,
# so nobody maintains the list of pins by hand.
#
# usage: pin-kube.sh <module-dir> [kubernetes-version]   (default v1.35.4)
set -euo pipefail
dir=${1:?module dir}
kver=${2:-v1.35.4}
sver="v0.${kver#v1.}"
cd "$dir"
gomod=$(go mod download -json "k8s.io/kubernetes@$kver" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
mods=$(sed -n '/^replace (/,/^)/p' "$gomod" | awk '$2 == "=>" && $3 ~ /^\.\/staging/ {print $1}')
args=()
for m in $mods; do args+=("-replace=$m=$m@$sver"); done
go mod edit "${args[@]}"
go mod edit -require="k8s.io/kubernetes@$kver"
echo "pinned $(echo "$mods" | wc -w) staging modules to $sver, k8s.io/kubernetes to $kver" >&2

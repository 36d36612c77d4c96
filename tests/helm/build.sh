#!/usr/bin/env bash
# helm (helm.sh/helm/v3/cmd/helm, pinned in this directory's go.mod/go.sum) into build/helm/bin/helm
# ($HELM_OUT instead), cached by tests/gotool.sh's key.
exec "$(dirname "$0")/../gotool.sh" helm helm.sh/helm/v3/cmd/helm ${HELM_OUT:+"$HELM_OUT"}

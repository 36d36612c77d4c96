#!/usr/bin/env bash
# promtool (github.com/prometheus/prometheus/cmd/promtool, pinned in this directory's
# go.mod/go.sum) into build/promtool/bin/promtool ($PROMTOOL_OUT instead), for the chart's alert
# rules tests; cached by tests/gotool.sh's key.
exec "$(dirname "$0")/../gotool.sh" promtool github.com/prometheus/prometheus/cmd/promtool ${PROMTOOL_OUT:+"$PROMTOOL_OUT"}

# kvdev developer entry points. `make test` works from a fresh checkout: it builds its own
# virtualenv in .venv (Python >= 3.11) and runs every check CI runs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# where make cluster keeps its control plane (the tests of the local walk use their own)
CLUSTER_DIR ?= build/cluster

# Root targets (network namespaces, a chroot, QEMU): as root they run here; as a user the
# virtualenv is built first as that user (so .venv and the egg-info stay theirs and `make clean`
# works), then the same command runs again under sudo, writing no bytecode into the clone. So
# `make demo` and `make test` work as root in a container without sudo and as a user with sudo.
# Every other target runs as whoever calls it.
ROOT_GOALS := demo test e2e vm-image deb deb-chroot packages dist test-compat bench bench-api robustness
ROOT_GOALS += robustness-long
ifneq ($(shell id -u),0)
ifneq ($(filter $(ROOT_GOALS),$(MAKECMDGOALS)),)
AS_ROOT := sudo
endif
endif

ifdef AS_ROOT
.PHONY: $(MAKECMDGOALS)
$(firstword $(MAKECMDGOALS)):
	@command -v sudo >/dev/null 2>&1 || { echo "make $(MAKECMDGOALS): needs root (network namespaces, a chroot, QEMU), and there is no sudo: run it as root" >&2; exit 2; }
	$(MAKE) $(STAMP)
	sudo env PYTHONDONTWRITEBYTECODE=1 $(MAKE) $(MAKECMDGOALS)
$(wordlist 2,$(words $(MAKECMDGOALS)),$(MAKECMDGOALS)):
	@:
else

.PHONY: help demo example test quick test-loaded check lint typecheck imports unit bench bench-api bench-schedule clean proto upstream
.PHONY: record-kubevirt upstream-cluster cluster cluster-down bench-controller helm promtool manifests go-early

help:  ## list the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' \
	    '{ name[NR] = $$1; what[NR] = $$2; if (length($$1) > w) w = length($$1) } \
	     END { for (i = 1; i <= NR; i++) printf "  %-" w "s  %s\n", name[i], what[i] }'

# The first build says so before pip goes quiet: 91 s at load 11-16 on 2 cores, downloads
# included (pip's cache empty or full alike).
$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "kvdev needs Python >= 3.11")'
	@echo "make: building $(VENV), the virtualenv with kvdev and its tools (about 2 minutes, once)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[host,dev]'
	touch $@

demo: $(STAMP)  ## (root) the agent configures real links for the bundled example, in a throwaway netns
	packaging/demo/netns-demo.sh $(BIN)/kvdev-agent

example: $(STAMP)  ## validate the bundled example metadata tree, hints and config drive
	$(BIN)/kvdev metadata validate packaging/examples/dra-device-attributes packaging/examples/config-drive/openstack/latest/meta_data.json

test: go-early check docs test-compat dist unit e2e  ## everything CI runs: lint, types, imports, docs, tests, dist/, VM e2e

# make test starts the Go builds (the judges and control plane, helm) in the background first:
# a cold one (about 30 min of a loaded 2-core machine) then overlaps the steps before the unit
# run, which wait on the network and the disk as much as on the cores; the unit run's own
# prerequisites wait for it (each build script's lock) and find it up to date. Warm, both
# answer "up to date" at once. Its output: build/go-early.log (a failure there is repeated, in
# the foreground, by the prerequisite that needs it).
go-early:
	@mkdir -p build
	@{ tests/helm/build.sh; tests/promtool/build.sh; tests/upstream/build.sh --cluster; } >build/go-early.log 2>&1 </dev/null &
	@echo "make test: helm, promtool, the Go judges and the control plane build in the background (build/go-early.log)"

quick: check unit  ## the fast loop: lint, types, imports, tests (no packages, no VM)

# LOADED=1: the unit run competes with LOAD_WORKERS stress-ng CPU workers (tests/loaded.sh), so
# a test that depends on the machine's speed fails here rather than on a busy user's machine.
# CI sets it for make test: its one unit run is the loaded run, no second suite run.
LOADED ?=
LOAD_WORKERS ?= 2
test-loaded:  ## make quick while 2 stress-ng CPU workers compete for the cores
	$(MAKE) quick LOADED=1

check: lint typecheck imports  ## static checks only

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

imports: $(STAMP)
	$(BIN)/lint-imports

# UNIT_JOBS=N: N pytest workers share the suite (pytest-xdist); the tests on the session's one
# real control plane stay together on one worker (tests/conftest.py), so it starts once. The
# default is one process: split across the two cores of a loaded machine, the kubelet plugin's
# gRPC server twice did not finish stopping (testing.md, "Splitting the unit run").
UNIT_JOBS ?= 0
unit: $(STAMP) upstream-cluster helm promtool
	$(if $(LOADED),tests/loaded.sh $(LOAD_WORKERS)) $(BIN)/pytest $(if $(filter-out 0,$(UNIT_JOBS)),-n $(UNIT_JOBS) --dist loadgroup) --durations=15

bench: $(STAMP)  ## (root) agent benchmarks on real links, not timing-asserted; BENCH_ARGS=--quick
	$(BIN)/python tests/bench/bench_agent.py $(BENCH_ARGS)

bench-api: $(STAMP)  ## (root) GET /v1/status latency and req/s vs two floors; BENCH_ARGS=--quick
	$(BIN)/python tests/bench/bench_api.py $(BENCH_ARGS)

bench-controller: $(STAMP) upstream-cluster  ## the controller on a real API server: 1k/10k VMIs, start, p50/p99
	$(BIN)/python tests/bench/bench_controller_cluster.py $(BENCH_ARGS)

bench-schedule: $(STAMP)  ## schedule 10k pods over 1k nodes: claims/s, cache on/off; BENCH_ARGS=--quick
	$(BIN)/python tests/bench/bench_schedule.py $(BENCH_ARGS)

upstream:  ## upstream's own Go code (v1.37.2) as judges: build/upstream/bin, cached by go.sum + sources
	tests/upstream/build.sh

record-kubevirt: $(STAMP)  ## KubeVirt's own code judges kvdev's VMIs: record KUBEVIRT=DIR (a checkout) into tests/data/kubevirt
	@test -n "$(KUBEVIRT)" || { echo "usage: make record-kubevirt KUBEVIRT=<KubeVirt checkout>"; exit 2; }
	tests/kubevirt/record.sh "$(KUBEVIRT)"

upstream-cluster:  ## the same plus the control plane (etcd, kube-apiserver, -controller-manager, -scheduler) and kubectl
	tests/upstream/build.sh --cluster

helm:  ## helm (v3.22.0, from its own pinned Go module) into build/helm/bin, cached by go.sum
	tests/helm/build.sh

promtool:  ## promtool (Prometheus module v0.316.0, its own pinned Go module) into build/promtool/bin, cached by go.sum
	tests/promtool/build.sh

manifests: helm  ## packaging/kubernetes/{controller,plugin}.yaml = helm template of the chart's defaults
	packaging/helm/manifests.sh

cluster: $(STAMP)  ## start a real v1.37.2 control plane under build/cluster; prints its kubeconfig
	$(BIN)/python tests/cluster/controlplane.py up $(CLUSTER_DIR)

cluster-down:  ## stop what make cluster started (the pids in build/cluster/state.json)
	$(PYTHON) tests/cluster/controlplane.py down $(CLUSTER_DIR)

proto: $(STAMP)  ## regenerate the committed gRPC stubs of agent/kvdev/host/proto/*.proto
	$(BIN)/python -m kvdev.host.proto

# The docs site and the man pages, one source (docs/, Sphinx + MyST; graphviz's dot draws the
# diagrams). -W --keep-going -n: every warning, a broken internal link or a missing page among
# them, fails the build after all are listed; -E: the generated reference pages are rendered
# from the parsers and files of this tree every time. Nothing reaches the network.
.PHONY: docs man
SPHINX := $(BIN)/sphinx-build -q -E -W --keep-going -n

docs: $(STAMP)  ## the docs site in build/docs/html; fails on a warning, a broken link or a stale man page
	$(SPHINX) -b html -d build/docs/doctrees-html docs build/docs/html
	rm -rf build/docs/man
	$(SPHINX) -b man -d build/docs/doctrees-man docs build/docs/man
	@diff -u -r packaging/man build/docs/man || { echo "make docs: packaging/man/ is not what docs/ renders: run make man and commit it" >&2; exit 1; }

man: $(STAMP)  ## rewrite packaging/man/ from docs/ (the pages the packages install; commit them)
	rm -rf build/docs/man
	$(SPHINX) -b man -d build/docs/doctrees-man docs build/docs/man
	rm -f packaging/man/*
	cp build/docs/man/* packaging/man/

.PHONY: robustness robustness-long

robustness: $(STAMP)  ## (root) abuse + fuzz the running agent (300 inputs); prints the evidence table
	$(BIN)/python tests/robustness/report.py

robustness-long: $(STAMP)  ## (root) the same, long: 10,000 fuzz inputs, five API storms
	$(BIN)/python tests/robustness/report.py --long

.PHONY: vm-image e2e virtiofsd

virtiofsd:  ## the Rust virtiofsd KubeVirt runs, from crates.io (cached by version in /var/cache/kvdev-e2e)
	tests/e2e/build-virtiofsd.sh

vm-image:  ## (root) the e2e guest images: Debian 13 and 12 via mmdebstrap, cached by recipe hash
	packaging/vm/build-image.sh --suite trixie
	packaging/vm/build-image.sh --suite bookworm

# The package make deb just built in the trixie chroot (KVDEV_E2E_DEB=other.deb tests another);
# the same .deb boots in the Debian 13 guests and the Debian 12 one (test_vm_bookworm.py).
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' agent/kvdev/__init__.py)
KVDEV_E2E_DEB ?= $(CURDIR)/dist/kvdev_$(VERSION)_all.deb

e2e: $(STAMP) deb vm-image virtiofsd  ## (root) the fresh .deb in a QEMU guest: service, NIC rules, live change, hot-plug
	KVDEV_E2E_DEB=$(KVDEV_E2E_DEB) KVDEV_E2E=1 $(BIN)/pytest -m e2e tests/e2e

.PHONY: deb deb-chroot deb-host rpm packages dist check-units test-compat

# Everything a user installs, in dist/ with SHA256SUMS: the .deb and .rpms (the two targets
# below), the wheel and sdist, the packaged chart and the kvdev-host image (an OCI archive built
# from Debian's packages and the wheel, cached in /var/cache/kvdev-dist by the wheel's hash and
# its recipe), then the image run from its archive (tests/packaging/test_dist.py).
dist: $(STAMP) deb rpm helm  ## (root) dist/: .deb, .rpms, wheel, sdist, chart, kvdev-host OCI image; SHA256SUMS
	PIP=$(CURDIR)/$(BIN)/pip packaging/pkg/dist.sh
	KVDEV_DIST=$(CURDIR)/dist $(BIN)/pytest -q -p no:cacheprovider tests/packaging/test_dist.py

# The .deb CI and the e2e install: built as Debian builds it, in a trixie chroot.
deb: $(STAMP)  ## (root) dist/kvdev_<version>_all.deb built in a Debian 13 chroot: tests, lintian --pedantic
	packaging/pkg/deb.sh
	KVDEV_DEB_BUILD=build/pkg/deb $(BIN)/pytest -q -p no:cacheprovider tests/packaging/test_deb.py

deb-chroot:  ## (root) only that build chroot: mmdebstrap, build deps preinstalled, cached by recipe hash
	packaging/pkg/build-chroot.sh

deb-host: $(STAMP)  ## a developer .deb built on this host, no root (Debian 12: no build tests, units in /lib)
	packaging/pkg/deb-host.sh

rpm: $(STAMP)  ## dist/kvdev-<version>-1.noarch.rpm and dist/el9/ (smoke builds off Fedora), rpmlint
	packaging/pkg/rpm.sh
	packaging/pkg/rpm.sh --el9

packages: check-units deb rpm  ## the unit checks and both packages

check-units: $(STAMP)  ## systemd-analyze verify + security (exposure <= 1.6) of systemd/*
	$(BIN)/pytest -q tests/packaging/test_units.py

test-compat: $(STAMP)  ## (root) guest tests at each supported distribution's versions (COMPAT_LEGS=)
	tests/packaging/test_compat.sh

clean:  ## remove the virtualenv and caches
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis build agent/*.egg-info

endif

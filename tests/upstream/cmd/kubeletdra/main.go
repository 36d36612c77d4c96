// Command kubeletdra is kubelet's own DRA client, to drive a DRA driver's kubelet plugin
// (kvdev-host serve) exactly as a node does, at the release pinned in go.mod: the plugin
// manager of k8s.io/kubernetes/pkg/kubelet/pluginmanager (its plugin watcher on the registry
// dir, its reconciler and the registration handshake: GetInfo, NotifyRegistrationStatus)
// hands plugins to the DRA manager of pkg/kubelet/cm/dra (its DRA plugin manager picks the
// gRPC service and dials the endpoint; PrepareResources / UnprepareResources for a pod call
// NodePrepareResources / NodeUnprepareResources with all of the pod's claims of a driver in
// one call; GetResources gives each container its CDI device IDs from the claim info cache,
// checkpointed in --state-dir). The API server is a fake clientset holding the claims the
// script puts there.
//
// Usage: kubeletdra --registry-dir DIR --state-dir DIR [--node NAME] [--offer SVC,...] [-v N]
//
// stdin is a script of JSON lines, one command each; stdout gets one JSON line per command,
// {"ok": bool, "error": "...", ...}, written when the command is done:
//
//	{"op": "claims", "objects": [ResourceClaim, ...]}   create or replace them (resource.k8s.io/v1)
//	{"op": "prepare", "pod": Pod}       -> "containers": {"name": ["cdi-id", ...]}
//	{"op": "prepare", "pods": [Pod, ...]}  all at once, each from its own goroutine (as
//	    kubelet's pod workers do) -> "pods": [{"ok", "error", "containers"}, ...] in order
//	{"op": "unprepare", "pod": Pod}
//	{"op": "wait", "driver": D, "plugins": [endpoint, ...], "after": N, "deadline": S}
//	    until kubelet has exactly these plugins of D registered (and, with "after", has
//	    registered one since event N); "deadline" (seconds, default 120) only guards a hang
//	{"op": "wait", "driver": D, "kind": K, "count": N, "endpoint": E, "connected": B, "deadline": S}
//	    until there are N events of kind K for D (and E, and connected B, where given)
//	{"op": "events", "after": N}        -> "events": what kubelet did since event N
//	{"op": "names", "registryDir": DIR, "driver": D, "podUID": UID}
//	    -> "registration": the registration socket's basename a plugin pod UID gets from
//	    upstream's kubeletplugin helper (RollingUpdateRegistrarSocketFile)
//
// Every answer carries "seq", the number of the last event so far. Events are the calls of
// the plugin manager on the DRA handler (register, register-failed, validate-failed,
// deregister), the DRA plugin manager's chosen service and connection changes (from its own
// log lines) and its ResourceSlice wipes. --offer narrows the services a plugin advertises
// before kubelet's handler sees them (e.g. only v1beta1.DRAPlugin, as an older plugin would).
// EOF on stdin stops kubelet's loops and exits 0; exit 2 on a usage error.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

type command struct {
	Op       string                      `json:"op"`
	Objects  []resourceapi.ResourceClaim `json:"objects"`
	Pod      *v1.Pod                     `json:"pod"`
	Pods     []*v1.Pod                   `json:"pods"`
	Driver   string                      `json:"driver"`
	Plugins  []string                    `json:"plugins"`
	After    *int                        `json:"after"`
	Deadline float64                     `json:"deadline"`
	Registry string                      `json:"registryDir"`
	PodUID   string                      `json:"podUID"`
	Kind     string                      `json:"kind"`
	Count    int                         `json:"count"`
	Endpoint string                      `json:"endpoint"`
	Connect  *bool                       `json:"connected"`
}

type answer struct {
	OK         bool                `json:"ok"`
	Error      string              `json:"error,omitempty"`
	Containers map[string][]string `json:"containers,omitempty"`
	Pods       []answer            `json:"pods,omitempty"`
	Events     []event             `json:"events,omitempty"`
	Name       string              `json:"registration,omitempty"`
	Seq        int                 `json:"seq"`
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kubeletdra", flag.ContinueOnError)
	fs.SetOutput(stderr)
	registryDir := fs.String("registry-dir", "", "kubelet's plugin registry dir, watched for registration sockets (required)")
	stateDir := fs.String("state-dir", "", "where the DRA manager checkpoints its claim info (required)")
	node := fs.String("node", "node-a", "the node's name")
	offer := fs.String("offer", "", "comma-separated gRPC services a plugin may offer kubelet (default: all it advertises)")
	verbosity := fs.Int("v", 0, "echo kubelet's log lines up to this verbosity on stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *registryDir == "" || *stateDir == "" || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "kubeletdra: --registry-dir and --state-dir are required, no arguments")
		return 2
	}
	var services []string
	if *offer != "" {
		services = strings.Split(*offer, ",")
	}
	rec := newRecorder()
	klog.EnableContextualLogging(true)
	logger := logr.New(&sink{rec: rec, out: stderr, verbosity: *verbosity})
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	k, err := startKubelet(ctx, *registryDir, *stateDir, *node, services, rec)
	if err != nil {
		fmt.Fprintln(stderr, "kubeletdra:", err)
		return 1
	}
	defer k.close()
	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(stdout)
	for in.Scan() {
		if strings.TrimSpace(in.Text()) == "" {
			continue
		}
		var c command
		a := answer{}
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			a.Error = fmt.Sprintf("not a command: %v", err)
		} else {
			a = k.do(ctx, c)
		}
		a.Seq = len(rec.since(0))
		if err := out.Encode(a); err != nil {
			fmt.Fprintln(stderr, "kubeletdra:", err)
			return 1
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(stderr, "kubeletdra: stdin:", err)
		return 1
	}
	return 0
}

func (k *kubelet) do(ctx context.Context, c command) answer {
	a := answer{}
	var err error
	switch c.Op {
	case "claims":
		for i := range c.Objects {
			if err = k.putClaim(ctx, &c.Objects[i]); err != nil {
				break
			}
		}
	case "prepare", "unprepare":
		if c.Op == "prepare" && c.Pods != nil {
			a.Pods = k.prepareAll(ctx, c.Pods)
			break
		}
		if c.Pod == nil {
			err = fmt.Errorf("%s: no pod", c.Op)
		} else if c.Op == "prepare" {
			a.Containers, err = k.prepare(ctx, c.Pod)
		} else {
			err = k.unprepare(ctx, c.Pod)
		}
	case "wait":
		after, deadline := -1, 120*time.Second
		if c.After != nil {
			after = *c.After
		}
		if c.Deadline > 0 {
			deadline = time.Duration(c.Deadline * float64(time.Second))
		}
		if c.Plugins == nil {
			c.Plugins = []string{}
		}
		if c.Kind != "" {
			want := event{Kind: c.Kind, Driver: c.Driver, Endpoint: c.Endpoint, Connected: c.Connect}
			err = k.rec.waitEvents(want, c.Count, deadline)
		} else {
			err = k.rec.waitFor(c.Driver, c.Plugins, after, deadline)
		}
	case "events":
		after := 0
		if c.After != nil {
			after = *c.After
		}
		a.Events = k.rec.since(after)
	case "names":
		a.Name = kubeletplugin.RollingUpdateRegistrarSocketFile(c.Registry, c.Driver, types.UID(c.PodUID))
	default:
		err = fmt.Errorf("unknown op %q (claims, prepare, unprepare, wait, events, names)", c.Op)
	}
	a.OK = err == nil
	if err != nil {
		a.Error = err.Error()
	}
	return a
}

// prepareAll prepares the pods concurrently, one goroutine each; one answer per pod, in order.
func (k *kubelet) prepareAll(ctx context.Context, pods []*v1.Pod) []answer {
	answers := make([]answer, len(pods))
	var wg sync.WaitGroup
	for i, pod := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			containers, err := k.prepare(ctx, pod)
			answers[i] = answer{OK: err == nil, Containers: containers}
			if err != nil {
				answers[i].Error = err.Error()
			}
		}()
	}
	wg.Wait()
	return answers
}

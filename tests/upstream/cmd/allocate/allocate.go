package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// gates maps kvdev-host's gate names to the switch they turn in upstream's Features (the
// scheduler's own mapping: DRADeviceBindingConditions stands for the pair it needs).
var gates = map[string]func(*structured.Features, bool){
	"DRAAdminAccess":               func(f *structured.Features, v bool) { f.AdminAccess = v },
	"DRAConsumableCapacity":        func(f *structured.Features, v bool) { f.ConsumableCapacity = v },
	"DRADerivedAttributes":         func(f *structured.Features, v bool) { f.DerivedAttributes = v },
	"DRADeviceBindingConditions":   func(f *structured.Features, v bool) { f.DeviceBindingAndStatus = v },
	"DRADeviceCompatibilityGroups": func(f *structured.Features, v bool) { f.CompatibilityGroups = v },
	"DRADeviceTaints":              func(f *structured.Features, v bool) { f.DeviceTaints = v },
	"DRAExtendedResource":          func(*structured.Features, bool) {},
	"DRAFractionalCapacityRange":   func(f *structured.Features, v bool) { f.FractionalCapacityRange = v },
	"DRAListTypeAttributes":        func(f *structured.Features, v bool) { f.ListTypeAttributes = v },
	"DRAOptionalNodeOperations":    func(f *structured.Features, v bool) { f.OptionalNodeOperations = v },
	"DRAPartitionableDevices":      func(f *structured.Features, v bool) { f.PartitionableDevices = v },
	"DRAPrioritizedList":           func(f *structured.Features, v bool) { f.PrioritizedList = v },
}

func parseGates(text string) (structured.Features, bool, error) {
	var features structured.Features
	for _, set := range gates {
		set(&features, true)
	}
	extended := true
	for _, item := range strings.Split(text, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, value, ok := strings.Cut(item, "=")
		value = strings.ToLower(strings.TrimSpace(value))
		if !ok || (value != "true" && value != "false") {
			return features, extended, fmt.Errorf("--feature-gates: %q is not GATE=true or GATE=false", item)
		}
		set, known := gates[strings.TrimSpace(name)]
		if !known {
			names := make([]string, 0, len(gates))
			for g := range gates {
				names = append(names, g)
			}
			sort.Strings(names)
			return features, extended, fmt.Errorf("--feature-gates: unknown allocator feature %s (known: %s)", name, strings.Join(names, ", "))
		}
		set(&features, value == "true")
		if strings.TrimSpace(name) == "DRAExtendedResource" {
			extended = value == "true"
		}
	}
	return features, extended, nil
}

type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// input is the documents sorted for the allocator.
type input struct {
	classes classLister
	slices  []*resourceapi.ResourceSlice
	rules   []*resourceapi.DeviceTaintRule
	inUse   []*resourceapi.ResourceClaim
	pending []*resourceapi.ResourceClaim
	nodes   []*v1.Node
	pods    []*v1.Pod
}

func sortDocuments(docs []document, stderr io.Writer) input {
	in := input{classes: classLister{}}
	for _, d := range docs {
		switch obj := d.obj.(type) {
		case *resourceapi.DeviceClass:
			in.classes[obj.Name] = obj
		case *resourceapi.ResourceSlice:
			in.slices = append(in.slices, obj)
		case *resourceapi.DeviceTaintRule:
			in.rules = append(in.rules, obj)
		case *resourceapi.ResourceClaim:
			if obj.Status.Allocation != nil {
				in.inUse = append(in.inUse, obj)
			} else {
				in.pending = append(in.pending, obj)
			}
		case *v1.Node:
			in.nodes = append(in.nodes, obj)
		case *v1.Pod:
			in.pods = append(in.pods, obj)
		default:
			fmt.Fprintf(stderr, "allocate: warning: %s: %s skipped (not an object the allocator reads)\n", d.source, d.kind)
		}
	}
	return in
}

func pickNode(name string, nodes []*v1.Node) (*v1.Node, error) {
	if len(nodes) == 0 {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil
	}
	known := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if n.Name == name {
			return n, nil
		}
		known = append(known, n.Name)
	}
	sort.Strings(known)
	return nil, fmt.Errorf("--node %s: no Node object of that name among the input (have %s)", name, strings.Join(known, ", "))
}

// patchedSlices adds each DeviceTaintRule's taint to the devices it selects, by the rule of
// upstream's ResourceSlice tracker (resourceslice/tracker applyPatches: no selector selects
// nothing; driver, pool and device narrow it). The tracker itself needs informers; driven by a
// fake clientset here it never reported synced, so its rule is restated (facts, not code).
func patchedSlices(slices []*resourceapi.ResourceSlice, rules []*resourceapi.DeviceTaintRule) []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, len(slices))
	for i, slice := range slices {
		out[i] = slice
		for _, rule := range rules {
			sel := rule.Spec.DeviceSelector
			if sel == nil || (sel.Driver != nil && *sel.Driver != slice.Spec.Driver) || (sel.Pool != nil && *sel.Pool != slice.Spec.Pool.Name) {
				continue
			}
			for d := range slice.Spec.Devices {
				if sel.Device != nil && *sel.Device != slice.Spec.Devices[d].Name {
					continue
				}
				if out[i] == slice {
					out[i] = slice.DeepCopy()
				}
				out[i].Spec.Devices[d].Taints = append(out[i].Spec.Devices[d].Taints, rule.Spec.Taint)
			}
		}
	}
	return out
}

// allocatedState is what the claims in use hold, gathered as the scheduler's DRA manager does
// (admin access holds nothing; with consumable capacity off a shared result is dedicated).
func allocatedState(claims []*resourceapi.ResourceClaim, consumable bool) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, claim := range claims {
		hold(&state, *claim.Status.Allocation, consumable)
	}
	return state
}

// hold adds what one allocation holds to the state.
func hold(state *structured.AllocatedState, r resourceapi.AllocationResult, consumable bool) {
	for _, d := range r.Devices.Results {
		if ptr.Deref(d.AdminAccess, false) {
			continue
		}
		id := structured.MakeDeviceID(d.Driver, d.Pool, d.Device)
		if consumable && d.ShareID != nil {
			state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, d.ShareID))
			if d.ConsumedCapacity != nil {
				state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, d.ConsumedCapacity))
			}
			continue
		}
		state.AllocatedDevices.Insert(id)
	}
}

// keywords turns upstream's error text into kvdev-host's reason keywords (the fixture README's
// table); the first fragment found wins.
var keywords = []struct{ fragment, keyword string }{
	{"could not retrieve device class", "class-not-found"},
	{"missing device class name", "missing-class-name"},
	{"actual cost limit exceeded", "cel-cost-limit"},
	{"CEL compile error", "cel-compile-error"},
	{"compile derived attribute", "cel-compile-error"},
	{"CEL runtime error", "cel-runtime-error"},
	{"evaluate derived attribute", "cel-runtime-error"},
	{"exceeds the claim limit", "too-many-devices"},
	{"is too large", "too-many-devices"},
	{"invalid resource pools were encountered", "invalid-pool"},
	{"is currently being updated", "pool-incomplete"},
	{"is currently invalid", "pool-invalid"},
	{"because a claim constraint would not be satisfied", "constraint-unsatisfiable"},
	{"empty constraint", "unknown-constraint"},
	{"CEL expression empty", "unknown-selector"},
	{"unsupported count mode", "unsupported-allocation-mode"},
	{"the feature is disabled", "feature-disabled"},
	{"feature is disabled", "feature-disabled"},
}

func keyword(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "filter-timeout"
	}
	text := err.Error()
	for _, k := range keywords {
		if strings.Contains(text, k.fragment) {
			return k.keyword
		}
	}
	return "allocator-error"
}

func allocateDocuments(docs []document, o options, stdout, stderr io.Writer) int {
	timeout, err := parseTimeout(o.filterTimeout)
	if err != nil {
		return fail("usage", err.Error(), o.output, stdout, stderr, exitInvalid)
	}
	features, extended, err := parseGates(o.featureGates)
	if err != nil {
		return fail("usage", err.Error(), o.output, stdout, stderr, exitInvalid)
	}
	in := sortDocuments(docs, stderr)
	node, err := pickNode(o.node, in.nodes)
	if err != nil {
		return fail("usage", err.Error(), o.output, stdout, stderr, exitInvalid)
	}
	if extended && len(in.pods) > 0 {
		return fail("oracle-unsupported", "Pods given: the oracle does not make the scheduler's extended-resource claims (run with DRAExtendedResource=false to ignore them)", o.output, stdout, stderr, exitInvalid)
	}
	seen := map[string]bool{}
	var dups []string
	for _, c := range in.pending {
		if seen[c.Name] {
			dups = append(dups, c.Name)
		}
		seen[c.Name] = true
	}
	if len(dups) > 0 {
		return fail("usage", fmt.Sprintf("claims to allocate must have distinct names: %s appear more than once", strings.Join(dups, ", ")), o.output, stdout, stderr, exitInvalid)
	}
	if len(in.pending) == 0 {
		fmt.Fprintln(stderr, "allocate: no claim without status.allocation: nothing to do")
		return printClaims(nil, o.output, stdout)
	}
	slices := in.slices
	if features.DeviceTaints {
		slices = patchedSlices(in.slices, in.rules)
	}
	celCache := cel.NewCache(10, cel.Features{
		EnableConsumableCapacity: features.ConsumableCapacity,
		EnableListTypeAttributes: features.ListTypeAttributes,
	})
	if o.benchRepeat > 0 || o.firstFit {
		return runBench(benchInput{in: in, node: node, slices: slices, features: features, celCache: celCache, timeout: timeout}, o, stdout, stderr)
	}
	ctx, cancel := withTimeout(timeout)
	defer cancel()
	allocator, err := structured.NewAllocator(ctx, features, allocatedState(in.inUse, features.ConsumableCapacity), in.classes, slices, celCache)
	if err != nil {
		return fail(keyword(err), err.Error(), o.output, stdout, stderr, exitInvalid)
	}
	results, err := allocator.Allocate(ctx, node, in.pending)
	if err != nil {
		return fail(keyword(err), err.Error(), o.output, stdout, stderr, exitInvalid)
	}
	if results == nil {
		return fail("unschedulable", fmt.Sprintf("claims do not fit on node %s", o.node), o.output, stdout, stderr, exitUnschedulable)
	}
	out := make([]*resourceapi.ResourceClaim, len(in.pending))
	for i, c := range in.pending {
		c = c.DeepCopy()
		c.Status.Allocation = &results[i]
		out[i] = c
	}
	return printClaims(out, o.output, stdout)
}

// list is the -o json shape of kvdev-host allocate: a v1 List of the allocated claims.
type list struct {
	APIVersion string                       `json:"apiVersion"`
	Kind       string                       `json:"kind"`
	Metadata   struct{}                     `json:"metadata"`
	Items      []*resourceapi.ResourceClaim `json:"items"`
}

func printClaims(claims []*resourceapi.ResourceClaim, output string, stdout io.Writer) int {
	if output == "json" {
		if claims == nil {
			claims = []*resourceapi.ResourceClaim{}
		}
		data, err := json.MarshalIndent(list{APIVersion: "v1", Kind: "List", Items: claims}, "", "  ")
		if err != nil {
			return exitInvalid
		}
		fmt.Fprintf(stdout, "%s\n", data)
		return exitOK
	}
	for i, c := range claims {
		data, err := yaml.Marshal(c)
		if err != nil {
			return exitInvalid
		}
		if i > 0 {
			fmt.Fprint(stdout, "---\n")
		}
		fmt.Fprintf(stdout, "%s", data)
	}
	return exitOK
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// benchInput is what one timed run reads: the documents sorted, the node, the slices with
// DeviceTaintRules applied, and one CEL cache kept across runs (as the scheduler keeps it).
type benchInput struct {
	in       input
	node     *v1.Node
	slices   []*resourceapi.ResourceSlice
	features structured.Features
	celCache *cel.Cache
	timeout  time.Duration
}

type benchOutput struct {
	Samples []float64 `json:"samples"`
	Calls   int       `json:"calls"`
	Placed  int       `json:"placed"`
}

func cpuSeconds() float64 {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return float64(u.Utime.Sec+u.Stime.Sec) + float64(u.Utime.Usec+u.Stime.Usec)/1e6
}

// runBench times the allocation (--bench-repeat), or runs the first-fit loop once and
// prints its claims (--first-fit alone).
func runBench(b benchInput, o options, stdout, stderr io.Writer) int {
	if o.benchRepeat == 0 {
		claims, _, err := b.run(o.firstFit)
		if err != nil {
			return fail(keyword(err), err.Error(), o.output, stdout, stderr, exitInvalid)
		}
		if claims == nil {
			return fail("unschedulable", "some claim fits on no node", o.output, stdout, stderr, exitUnschedulable)
		}
		return printClaims(claims, o.output, stdout)
	}
	out := benchOutput{}
	for i := 0; i <= o.benchRepeat; i++ {
		start := cpuSeconds()
		claims, calls, err := b.run(o.firstFit)
		took := cpuSeconds() - start
		if err != nil {
			return fail(keyword(err), err.Error(), o.output, stdout, stderr, exitInvalid)
		}
		if i == 0 {
			out.Calls, out.Placed = calls, len(claims)
			continue // the warm-up: CEL compiled into the cache
		}
		out.Samples = append(out.Samples, took)
	}
	data, _ := json.Marshal(out)
	fmt.Fprintf(stdout, "%s\n", data)
	return exitOK
}

// run is one allocation: all pending claims together on the node, or (firstFit) each claim
// alone over the nodes in input order. It returns the allocated claims (nil: some claim did
// not fit) and the number of Allocate calls.
func (b benchInput) run(firstFit bool) ([]*resourceapi.ResourceClaim, int, error) {
	ctx, cancel := withTimeout(b.timeout)
	defer cancel()
	state := allocatedState(b.in.inUse, b.features.ConsumableCapacity)
	if !firstFit {
		allocator, err := structured.NewAllocator(ctx, b.features, state, b.in.classes, b.slices, b.celCache)
		if err != nil {
			return nil, 0, err
		}
		results, err := allocator.Allocate(ctx, b.node, b.in.pending)
		if err != nil || results == nil {
			return nil, 1, err
		}
		return withResults(b.in.pending, results), 1, nil
	}
	nodes := b.in.nodes
	if len(nodes) == 0 {
		nodes = []*v1.Node{b.node}
	}
	calls := 0
	out := make([]*resourceapi.ResourceClaim, 0, len(b.in.pending))
	for _, claim := range b.in.pending {
		allocator, err := structured.NewAllocator(ctx, b.features, state, b.in.classes, b.slices, b.celCache)
		if err != nil {
			return nil, calls, err
		}
		placed := false
		for _, node := range nodes {
			calls++
			results, err := allocator.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
			if err != nil {
				return nil, calls, err
			}
			if results == nil {
				continue
			}
			hold(&state, results[0], b.features.ConsumableCapacity)
			out = append(out, withResults([]*resourceapi.ResourceClaim{claim}, results)...)
			placed = true
			break
		}
		if !placed {
			return nil, calls, nil
		}
	}
	return out, calls, nil
}

func withResults(claims []*resourceapi.ResourceClaim, results []resourceapi.AllocationResult) []*resourceapi.ResourceClaim {
	out := make([]*resourceapi.ResourceClaim, len(claims))
	for i, c := range claims {
		c = c.DeepCopy()
		c.Status.Allocation = &results[i]
		out[i] = c
	}
	return out
}

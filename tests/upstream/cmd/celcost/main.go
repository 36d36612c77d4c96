// Command celcost is upstream's CEL environment for DRA device selectors at the release kvdev
// targets (k8s.io/dynamic-resource-allocation/cel v0.37.2, the compiler the API server's
// validation and the scheduler share), as a judge of cost: for each expression, its
// compile-time cost estimate (what the API server compares with
// resourceapi.CELSelectorExpressionMaxCost), and, given a device, what the evaluation did under
// the runtime cost limit (the program's actual cost, or that the limit tripped).
//
// Usage: celcost   (stdin lines {"expression": S, "derived": B, "device": D} where D is
// {"driver": S, "allowMultipleAllocations": B, "attributes": {name: DeviceAttribute},
// "capacity": {name: DeviceCapacity}} in resource.k8s.io/v1 JSON, optional; one result line
// each:
//
//	{"compileError": S}                                    (compilation failed)
//	{"maxCost": N, "limit": L, "overLimit": B,             (compiled; overLimit: MaxCost > L,
//	 "evaluated": B, "actualCost": N,                       what the API server refuses)
//	 "costLimitExceeded": B, "runtimeError": S, "result": V}
//
// Both features kvdev enables by default (DRAConsumableCapacity, DRAListTypeAttributes) are
// on, as in the allocate judge. Exit 0 when every result was printed.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

type device struct {
	Driver                   string                                                    `json:"driver"`
	AllowMultipleAllocations *bool                                                     `json:"allowMultipleAllocations,omitempty"`
	Attributes               map[resourceapi.QualifiedName]resourceapi.DeviceAttribute `json:"attributes,omitempty"`
	Capacity                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity  `json:"capacity,omitempty"`
}

type request struct {
	Expression string  `json:"expression"`
	Derived    bool    `json:"derived"`
	Device     *device `json:"device,omitempty"`
}

type result struct {
	CompileError      string `json:"compileError,omitempty"`
	MaxCost           uint64 `json:"maxCost"`
	Limit             uint64 `json:"limit"`
	OverLimit         bool   `json:"overLimit"`
	Evaluated         bool   `json:"evaluated"`
	ActualCost        uint64 `json:"actualCost"`
	CostLimitExceeded bool   `json:"costLimitExceeded"`
	RuntimeError      string `json:"runtimeError,omitempty"`
	Result            any    `json:"result,omitempty"`
}

var compiler = cel.GetCompiler(cel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: true})

func judge(req request) result {
	compiled := compiler.CompileCELExpression(req.Expression, cel.Options{DerivedAttribute: req.Derived})
	if compiled.Error != nil {
		return result{CompileError: compiled.Error.Error()}
	}
	res := result{
		MaxCost:   compiled.MaxCost,
		Limit:     resourceapi.CELSelectorExpressionMaxCost,
		OverLimit: compiled.MaxCost > resourceapi.CELSelectorExpressionMaxCost,
	}
	if req.Device == nil {
		return res
	}
	input := cel.Device{
		Driver:                   req.Device.Driver,
		AllowMultipleAllocations: req.Device.AllowMultipleAllocations,
		Attributes:               req.Device.Attributes,
		Capacity:                 req.Device.Capacity,
	}
	res.Evaluated = true
	var err error
	var details interface{ ActualCost() *uint64 }
	if req.Derived {
		attr, d, e := compiled.EvaluateDerivedAttribute(context.Background(), input)
		err = e
		if d != nil {
			details = d
		}
		if e == nil {
			res.Result = attr
		}
	} else {
		matches, d, e := compiled.DeviceMatches(context.Background(), input)
		err = e
		if d != nil {
			details = d
		}
		if e == nil {
			res.Result = matches
		}
	}
	if details != nil && details.ActualCost() != nil {
		res.ActualCost = *details.ActualCost()
	}
	if err != nil {
		res.RuntimeError = err.Error()
		res.CostLimitExceeded = strings.Contains(err.Error(), "actual cost limit exceeded")
	}
	return res
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<20), 64<<20)
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "celcost: bad request:", err)
			os.Exit(2)
		}
		if err := enc.Encode(judge(req)); err != nil {
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "celcost:", err)
		os.Exit(1)
	}
}

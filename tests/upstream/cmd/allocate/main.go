// Command allocate is the allocator oracle: it judges kvdev-host allocate by running upstream's
// own structured-parameters allocator (k8s.io/dynamic-resource-allocation/structured, the
// release pinned in go.mod) on the same documents, with the same flags, output and exit codes.
//
// It reads ResourceSlices, DeviceClasses, ResourceClaims, DeviceTaintRules and Nodes (YAML or
// JSON, multi-document or kind: List), adds each DeviceTaintRule's taint to the slices it
// selects with upstream's ResourceSlice tracker (as kube-scheduler does), gathers the devices
// and capacity that claims with status.allocation hold (as the scheduler's DRA manager does),
// and allocates every other claim together on --node with structured.NewAllocator+Allocate.
//
// Exit status: 0 allocated (or nothing to do), 1 the claims do not fit, 2 usage error,
// invalid input or an allocator error. With -o json a failure prints {"reason", "message"}.
//
// --batch reads a stream of JSON cases {"node", "featureGates", "documents": [...]} on stdin
// and writes one JSON line {"exit", "stdout", "stderr"} per case: one process for many cases.
//
// --bench-repeat N (tests/bench/bench_allocator.py) times N runs after one warm-up and prints
// {"samples": [CPU seconds per run], "calls": Allocate calls per run}; --first-fit places
// each claim alone on the first Node that fits, as a scheduler loop over the nodes does.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

const (
	exitOK            = 0
	exitUnschedulable = 1
	exitInvalid       = 2
)

type fileList []string

func (f *fileList) String() string     { return strings.Join(*f, ",") }
func (f *fileList) Set(v string) error { *f = append(*f, v); return nil }

// options are the command line of kvdev-host allocate (plus --batch).
type options struct {
	files         fileList
	node          string
	output        string
	explain       bool
	featureGates  string
	filterTimeout string
	batch         bool
	benchRepeat   int
	firstFit      bool
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("allocate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(&o.files, "f", "a YAML/JSON file of objects; repeat for several files")
	fs.Var(&o.files, "filename", "same as -f")
	fs.StringVar(&o.node, "node", "", "the node to allocate on (required)")
	fs.StringVar(&o.output, "o", "yaml", "output format: yaml or json")
	fs.StringVar(&o.output, "output", "yaml", "same as -o")
	fs.BoolVar(&o.explain, "explain", false, "accepted for kvdev-host allocate's sake; the oracle explains nothing")
	fs.StringVar(&o.featureGates, "feature-gates", "", "GATE=BOOL,... (all gates on by default)")
	fs.StringVar(&o.filterTimeout, "filter-timeout", "10s", "give up on the allocation after this long (0: no limit)")
	fs.BoolVar(&o.batch, "batch", false, "read JSON cases on stdin, write one JSON result line per case")
	fs.IntVar(&o.benchRepeat, "bench-repeat", 0, "time N runs of the allocation after one warm-up (CPU seconds of NewAllocator+Allocate only) and print them as JSON")
	fs.BoolVar(&o.firstFit, "first-fit", false, "allocate each claim alone on the first Node (input order) where it fits, holding what earlier claims got")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: allocate -f FILE... --node NAME [-o yaml|json] [--feature-gates G=B,...]\n"+
			"       allocate --batch < cases.jsonl\n\n"+
			"upstream's structured allocator (k8s.io/dynamic-resource-allocation/structured) behind\n"+
			"kvdev-host allocate's command line; exit 0 allocated, 1 does not fit, 2 error.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitInvalid
	}
	if o.batch {
		return runBatch(stdin, stdout, stderr)
	}
	if o.output != "yaml" && o.output != "json" {
		fmt.Fprintf(stderr, "allocate: -o %q: not yaml or json\n", o.output)
		return exitInvalid
	}
	if o.node == "" || len(o.files) == 0 {
		fmt.Fprintln(stderr, "allocate: -f FILE and --node NAME are required")
		return exitInvalid
	}
	var docs []document
	for _, name := range o.files {
		data, err := os.ReadFile(name)
		if err != nil {
			return fail("usage", err.Error(), o.output, stdout, stderr, exitInvalid)
		}
		found, err := splitDocuments(data, name)
		if err != nil {
			return fail("invalid-input", err.Error(), o.output, stdout, stderr, exitInvalid)
		}
		docs = append(docs, found...)
	}
	return allocateDocuments(docs, o, stdout, stderr)
}

// batchCase is one case of --batch: the documents of one kvdev-host allocate run.
type batchCase struct {
	Node          string            `json:"node"`
	FeatureGates  string            `json:"featureGates"`
	FilterTimeout string            `json:"filterTimeout"`
	Documents     []json.RawMessage `json:"documents"`
}

type batchResult struct {
	Exit   int    `json:"exit"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
}

func runBatch(stdin io.Reader, stdout, stderr io.Writer) int {
	dec := json.NewDecoder(bufio.NewReader(stdin))
	enc := json.NewEncoder(stdout)
	for n := 1; ; n++ {
		var c batchCase
		if err := dec.Decode(&c); err == io.EOF {
			return exitOK
		} else if err != nil {
			fmt.Fprintf(stderr, "allocate --batch: case %d: %v\n", n, err)
			return exitInvalid
		}
		var out, errOut bytes.Buffer
		o := options{node: c.Node, output: "json", featureGates: c.FeatureGates, filterTimeout: c.FilterTimeout}
		if o.filterTimeout == "" {
			o.filterTimeout = "10s"
		}
		docs := make([]document, 0, len(c.Documents))
		source := fmt.Sprintf("case %d", n)
		var code int
		for i, raw := range c.Documents {
			found, err := decodeObject(raw, fmt.Sprintf("%s, document %d", source, i+1))
			if err != nil {
				code = fail("invalid-input", err.Error(), "json", &out, &errOut, exitInvalid)
				break
			}
			docs = append(docs, found...)
		}
		if out.Len() == 0 {
			code = allocateDocuments(docs, o, &out, &errOut)
		}
		if err := enc.Encode(batchResult{Exit: code, Stdout: out.String(), Stderr: errOut.String()}); err != nil {
			fmt.Fprintf(stderr, "allocate --batch: %v\n", err)
			return exitInvalid
		}
	}
}

func fail(reason, message, output string, stdout, stderr io.Writer, code int) int {
	fmt.Fprintf(stderr, "allocate: %s\n", message)
	if output == "json" {
		line, _ := json.Marshal(map[string]string{"reason": reason, "message": message})
		fmt.Fprintf(stdout, "%s\n", line)
	}
	return code
}

// parseTimeout reads --filter-timeout as kvdev does: 10s, 500ms, 1m or plain seconds.
func parseTimeout(text string) (time.Duration, error) {
	t := strings.TrimSpace(text)
	for _, unit := range []struct {
		suffix string
		scale  float64
	}{{"ms", 1e-3}, {"s", 1}, {"m", 60}, {"", 1}} {
		if !strings.HasSuffix(t, unit.suffix) {
			continue
		}
		var v float64
		if _, err := fmt.Sscanf(strings.TrimSuffix(t, unit.suffix), "%g", &v); err != nil || v < 0 {
			break
		}
		return time.Duration(v * unit.scale * float64(time.Second)), nil
	}
	return 0, fmt.Errorf("--filter-timeout: %q is not a duration (10s, 500ms, 1m, 0)", text)
}

func withTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	if d == 0 {
		return context.WithCancel(context.Background())
	}
	return context.WithTimeout(context.Background(), d)
}

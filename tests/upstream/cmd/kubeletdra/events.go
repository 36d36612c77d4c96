// The record of what kubelet did: events, the registered plugins, and the logr sink that
// reads the DRA plugin manager's own log lines.

package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// event is one thing kubelet's code did or saw about a DRA plugin, in the order it happened.
// Kinds: register, register-failed, validate-failed, deregister (the calls the plugin
// manager's reconciler made on the DRA handler), chosen (the DRA plugin manager's pick of a
// gRPC service), connection (its gRPC connection monitor), wipe (its ResourceSlice wiping, as
// a DeleteCollection on the client).
type event struct {
	Seq       int      `json:"seq"`
	Kind      string   `json:"kind"`
	Driver    string   `json:"driver,omitempty"`
	Endpoint  string   `json:"endpoint,omitempty"`
	Services  []string `json:"services,omitempty"`
	Chosen    string   `json:"chosenService,omitempty"`
	Connected *bool    `json:"connected,omitempty"`
	Selector  string   `json:"fieldSelector,omitempty"`
	Error     string   `json:"error,omitempty"`
	// Plugins is how many plugins of Driver kubelet has registered after this event.
	Plugins int `json:"plugins"`
}

// recorder keeps the events and the registered endpoints per driver; waiters are woken on
// every change.
type recorder struct {
	mu         sync.Mutex
	events     []event
	registered map[string]map[string]bool // driver -> its registered endpoints
	changed    chan struct{}
}

func newRecorder() *recorder {
	return &recorder{registered: map[string]map[string]bool{}, changed: make(chan struct{})}
}

func (r *recorder) add(e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e.Kind {
	case "register":
		if r.registered[e.Driver] == nil {
			r.registered[e.Driver] = map[string]bool{}
		}
		r.registered[e.Driver][e.Endpoint] = true
	case "deregister":
		delete(r.registered[e.Driver], e.Endpoint)
	}
	e.Seq = len(r.events) + 1
	e.Plugins = len(r.registered[e.Driver])
	r.events = append(r.events, e)
	close(r.changed)
	r.changed = make(chan struct{})
}

// since returns the events after sequence number seq.
func (r *recorder) since(seq int) []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq < 0 || seq > len(r.events) {
		seq = len(r.events)
	}
	return append([]event{}, r.events[seq:]...)
}

// waitFor blocks until driver's registered endpoints are exactly want and, when after >= 0,
// kubelet has registered one of them since event number after; or until the deadline (a
// failure guard) passes.
func (r *recorder) waitFor(driver string, want []string, after int, deadline time.Duration) error {
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	for {
		r.mu.Lock()
		have := r.registered[driver]
		ok := len(have) == len(want)
		for _, endpoint := range want {
			ok = ok && have[endpoint]
		}
		if ok && after >= 0 {
			ok = false
			for _, e := range r.events[min(after, len(r.events)):] {
				ok = ok || (e.Kind == "register" && e.Driver == driver)
			}
		}
		got := make([]string, 0, len(have))
		for endpoint := range have {
			got = append(got, endpoint)
		}
		changed := r.changed
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-timer.C:
			sort.Strings(got)
			return fmt.Errorf("after %s kubelet has %q registered for %s, not %q (registered since event %d)",
				deadline, got, driver, want, after)
		}
	}
}

// waitEvents blocks until there are count events like want (its kind and driver, and its
// endpoint and connection state where set), or the deadline (a failure guard) passes.
func (r *recorder) waitEvents(want event, count int, deadline time.Duration) error {
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	for {
		r.mu.Lock()
		seen := 0
		for _, e := range r.events {
			if e.Kind == want.Kind && e.Driver == want.Driver &&
				(want.Endpoint == "" || e.Endpoint == want.Endpoint) &&
				(want.Connected == nil || (e.Connected != nil && *e.Connected == *want.Connected)) {
				seen++
			}
		}
		changed := r.changed
		r.mu.Unlock()
		if seen >= count {
			return nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return fmt.Errorf("after %s kubelet has %d %s events for %s %s, not %d",
				deadline, seen, want.Kind, want.Driver, want.Endpoint, count)
		}
	}
}

// sink is the logr sink of kubelet's contextual logger: it turns the DRA plugin manager's own
// log lines about connections and the service it chose into events, and echoes every line
// at or below the verbosity to out.
type sink struct {
	rec       *recorder
	out       io.Writer
	verbosity int
	name      string
	values    []any
}

var _ logr.LogSink = &sink{}

func (s *sink) Init(logr.RuntimeInfo) {}

// Enabled is true up to V(5): kubelet logs the chosen service at V(3), connections at V(2).
func (s *sink) Enabled(level int) bool { return level <= 5 }

func (s *sink) Info(level int, msg string, kv ...any) {
	values := append(append([]any{}, s.values...), kv...)
	s.observe(msg, values)
	if level <= s.verbosity {
		s.write("I", msg, values)
	}
}

func (s *sink) Error(err error, msg string, kv ...any) {
	values := append(append([]any{}, s.values...), kv...)
	s.write("E", msg, append(values, "err", err))
}

func (s *sink) WithValues(kv ...any) logr.LogSink {
	c := *s
	c.values = append(append([]any{}, s.values...), kv...)
	return &c
}

func (s *sink) WithName(name string) logr.LogSink {
	c := *s
	if c.name != "" {
		name = c.name + "/" + name
	}
	c.name = name
	return &c
}

func (s *sink) observe(msg string, kv []any) {
	value := func(key string) any {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == key {
				return kv[i+1]
			}
		}
		return nil
	}
	driver, _ := value("driverName").(string)
	endpoint, _ := value("endpoint").(string)
	switch msg {
	case "Connection changed": // DRAPluginManager's monitoredPlugin.HandleConn
		if connected, ok := value("connected").(bool); ok {
			s.rec.add(event{Kind: "connection", Driver: driver, Endpoint: endpoint, Connected: &connected})
		}
	case "Registered DRA plugin": // DRAPluginManager.add
		chosen, _ := value("chosenService").(string)
		s.rec.add(event{Kind: "chosen", Driver: driver, Endpoint: endpoint, Chosen: chosen})
	}
}

func (s *sink) write(severity, msg string, kv []any) {
	if s.out == nil {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %q", severity, s.name, msg)
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, " %v=%v", kv[i], kv[i+1])
	}
	fmt.Fprintln(s.out, b.String())
}

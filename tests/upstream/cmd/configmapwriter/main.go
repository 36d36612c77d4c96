// Command configmapwriter is the controller benchmark's baseline: client-go (the release kvdev
// targets) creating N ConfigMaps of a given size with W concurrent writers and no client-side
// rate limit, against the same API server the controller wrote to. It measures what the API
// server and etcd give a Go client on this machine, so the controller's start is read as a
// ratio to it (tests/bench/bench_controller_cluster.py).
//
// Usage: configmapwriter --kubeconfig FILE --namespace NS --count N --writers W --bytes B
//
//	[--prefix NAME] [--content-type application/json]
//
// The namespace is created when missing. Each ConfigMap is NAME-<i> with one data key, padded so
// that its JSON request body is exactly B bytes (the size of the controller's ConfigMap the
// benchmark measured). The content type is JSON, as the controller's Python client sends.
// stdout is one JSON object: count, writers, bytes, seconds (first request to last answer),
// writes_per_s, errors. Exit 1 on a failed write (the first error on stderr).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type result struct {
	Count      int     `json:"count"`
	Writers    int     `json:"writers"`
	Bytes      int     `json:"bytes"`
	Seconds    float64 `json:"seconds"`
	WritesPerS float64 `json:"writes_per_s"`
	Errors     int64   `json:"errors"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the admin kubeconfig")
	namespace := flag.String("namespace", "", "where the ConfigMaps are created (made if missing)")
	count := flag.Int("count", 0, "how many ConfigMaps")
	writers := flag.Int("writers", 4, "concurrent writers (goroutines sharing one client)")
	size := flag.Int("bytes", 0, "each ConfigMap's JSON request body, in bytes")
	prefix := flag.String("prefix", "baseline", "the ConfigMaps' name prefix")
	contentType := flag.String("content-type", "application/json", "the request's content type")
	flag.Parse()
	if *kubeconfig == "" || *namespace == "" || *count < 1 || *writers < 1 {
		fail(fmt.Errorf("--kubeconfig, --namespace, --count >= 1 and --writers >= 1 are required"))
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	config.QPS = -1 // no client-side rate limiter: the API server is the only bound
	config.Burst = 1 << 20
	config.ContentType = *contentType
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: *namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil &&
		!apierrors.IsAlreadyExists(err) {
		fail(err)
	}
	objects := make([]*v1.ConfigMap, *count)
	for i := range objects {
		objects[i] = padded(fmt.Sprintf("%s-%d", *prefix, i), *namespace, *size)
	}
	var next, errors atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	began := time.Now()
	for w := 0; w < *writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(objects) {
					return
				}
				_, err := client.CoreV1().ConfigMaps(*namespace).Create(ctx, objects[i], metav1.CreateOptions{})
				if err != nil {
					errors.Add(1)
					once.Do(func() { first = err })
				}
			}
		}()
	}
	wg.Wait()
	seconds := time.Since(began).Seconds()
	out := result{*count, *writers, *size, seconds, float64(*count) / seconds, errors.Load()}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
	if first != nil {
		fail(first)
	}
}

// padded is a ConfigMap whose JSON body is size bytes (or its unpadded size, when larger).
func padded(name, namespace string, size int) *v1.ConfigMap {
	cm := &v1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Data:       map[string]string{"pad": ""},
	}
	body, err := json.Marshal(cm)
	if err != nil {
		fail(err)
	}
	if missing := size - len(body); missing > 0 {
		cm.Data["pad"] = strings.Repeat("x", missing)
	}
	return cm
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "configmapwriter:", err)
	os.Exit(1)
}

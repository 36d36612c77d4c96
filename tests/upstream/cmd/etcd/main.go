// Command etcd is the test control plane's etcd: one embedded etcd server
// (go.etcd.io/etcd/server/v3/embed, the release k8s.io/kubernetes pins for its etcd client)
// on loopback, and a compact subcommand the failure-mode tests use to make the API server's
// watch cache and its clients see 410 Gone.
//
//	etcd --data-dir DIR --client-url http://127.0.0.1:P --peer-url http://127.0.0.1:Q
//	etcd compact --endpoint http://127.0.0.1:P   (compacts at the current revision, prints it)
//
// It stops cleanly on SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "compact" {
		os.Exit(compact(os.Args[2:]))
	}
	os.Exit(serve(os.Args[1:]))
}

func serve(args []string) int {
	flags := flag.NewFlagSet("etcd", flag.ContinueOnError)
	dir := flags.String("data-dir", "", "the data directory (required)")
	client := flags.String("client-url", "http://127.0.0.1:2379", "the client URL to listen on")
	peer := flags.String("peer-url", "http://127.0.0.1:2380", "the peer URL to listen on")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		return 2
	}
	clientURL, err := url.Parse(*client)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: --client-url: %v\n", err)
		return 2
	}
	peerURL, err := url.Parse(*peer)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: --peer-url: %v\n", err)
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Name = "kvdev-test"
	cfg.Dir = *dir
	cfg.ListenClientUrls = []url.URL{*clientURL}
	cfg.AdvertiseClientUrls = []url.URL{*clientURL}
	cfg.ListenPeerUrls = []url.URL{*peerURL}
	cfg.AdvertisePeerUrls = []url.URL{*peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "warn"
	server, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		return 1
	}
	defer server.Close()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-server.Server.ReadyNotify():
		fmt.Printf("etcd: ready on %s\n", clientURL)
	case err := <-server.Err():
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		return 1
	case <-signals:
		return 0
	}
	select {
	case err := <-server.Err():
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		return 1
	case <-signals:
		return 0
	}
}

func compact(args []string) int {
	flags := flag.NewFlagSet("etcd compact", flag.ContinueOnError)
	endpoint := flags.String("endpoint", "http://127.0.0.1:2379", "the client URL")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{*endpoint}, DialTimeout: 30 * time.Second})
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd compact: %v\n", err)
		return 1
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A write first, so the revision compacted at is one no watcher has reached yet.
	put, err := cli.Put(ctx, "/kvdev-test/compact", time.Now().UTC().Format(time.RFC3339Nano))
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd compact: %v\n", err)
		return 1
	}
	rev := put.Header.Revision
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		fmt.Fprintf(os.Stderr, "etcd compact: %v\n", err)
		return 1
	}
	fmt.Println(rev)
	return 0
}

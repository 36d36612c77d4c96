// Command configmapvolume lays out a ConfigMap volume exactly as kubelet does: the payload
// from kubelet's own configmap volume plugin (MakePayload: every key of data and binaryData,
// no items, the volume's defaultMode) written by kubelet's AtomicWriter (pkg/volume/util), so
// the tests' ConfigMap volumes (the guest agent's reader, the KubeVirt e2e) swap `..data`
// exactly as a node would, at the release kvdev targets.
//
// Usage: configmapvolume --dir DIR [--default-mode 0644] < configmap.json
//
// stdin is one v1 ConfigMap (JSON). Each call is one kubelet sync of the volume: the first
// creates DIR's layout, later ones make a new timestamped version and swap `..data` to it.
// stdout is {"dir": DIR, "version": "..<timestamp>"} (the version `..data` points at).
// Exit 1 with the error on stderr when kubelet's code refuses the payload or the write.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/volume/configmap"
	volumeutil "k8s.io/kubernetes/pkg/volume/util"
)

func main() {
	dir := flag.String("dir", "", "the volume's directory (kubelet's pods/<uid>/volumes/kubernetes.io~configmap/<name>)")
	mode := flag.String("default-mode", "0644", "the volume's defaultMode, octal (the API's default: 0644)")
	flag.Parse()
	if *dir == "" {
		fail(fmt.Errorf("--dir is required"))
	}
	parsed, err := strconv.ParseInt(*mode, 8, 32)
	if err != nil {
		fail(fmt.Errorf("--default-mode %q: %w", *mode, err))
	}
	defaultMode := int32(parsed)
	var cm v1.ConfigMap
	if err := json.NewDecoder(os.Stdin).Decode(&cm); err != nil {
		fail(fmt.Errorf("stdin: not a ConfigMap: %w", err))
	}
	payload, err := configmap.MakePayload(nil, &cm, &defaultMode, nil, false)
	if err != nil {
		fail(err)
	}
	// The volume's directory is the emptyDir kubelet's configmap plugin wraps: emptyDir's
	// setupDir makes it 0777 (and chmods it so whatever the umask). No fsGroup here: the
	// writer's setPerms hook (SetVolumeOwnership) is left out, as for a pod without one.
	if err := os.MkdirAll(*dir, 0o777); err != nil {
		fail(err)
	}
	if err := os.Chmod(*dir, 0o777); err != nil {
		fail(err)
	}
	writer, err := volumeutil.NewAtomicWriter(*dir, "kvdev-tests")
	if err != nil {
		fail(err)
	}
	if err := writer.Write(payload, nil); err != nil {
		fail(err)
	}
	version, err := os.Readlink(filepath.Join(*dir, "..data"))
	if err != nil {
		fail(err)
	}
	out := map[string]string{"dir": *dir, "version": version}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "configmapvolume:", err)
	os.Exit(1)
}

// Command metadatawriter is upstream's KEP-5304 metadata writer at the release kvdev targets:
// k8s.io/dynamic-resource-allocation/kubeletplugin (v0.37.2) with EnableDeviceMetadata, driven
// through its public API only. For each case it starts a kubeletplugin.Helper (a fake
// clientset holding the claim; our DRAPlugin hands back the case's devices), calls
// NodePrepareResources over the helper's own v1 gRPC socket, then Helper.UpdateRequestMetadata
// for each update, and stops the helper. The metadata files and CDI specs are what the helper
// wrote under the case's directories; nothing here encodes a byte of them.
//
// Usage: metadatawriter < cases.jsonl
//
// Each stdin line is one case:
//
//	{"driver": NAME, "pluginDataDir": DIR, "cdiDir": DIR, "versions": [GROUP/VERSION...],
//	 "claim": ResourceClaim (resource.k8s.io/v1),
//	 "devices": [{"requests": [...], "pool": P, "device": D, "shareID": S?,
//	              "cdiDeviceIDs": [...], "metadata": {"attributes": {...}, "networkData": {...}}?}],
//	 "updates": [{"request": NAME, "devices": [...as above]}]}
//
// and gets one stdout line: {"devices": [the NodePrepareResources response's devices for the
// claim: requestNames, poolName, deviceName, cdiDeviceIDs, shareID], "error": prepare's
// error or "", "updateErrors": [one string per update, "" for success], "inodes": {each
// metadata file: [its inode after prepare, after the updates]}}. A case that cannot
// be run at all (bad JSON, Start refused) gets {"fatal": MESSAGE}. Exit 0 at the end of stdin.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
)

type device struct {
	Requests     []string                      `json:"requests"`
	Pool         string                        `json:"pool"`
	Device       string                        `json:"device"`
	ShareID      *string                       `json:"shareID,omitempty"`
	CDIDeviceIDs []string                      `json:"cdiDeviceIDs,omitempty"`
	Metadata     *kubeletplugin.DeviceMetadata `json:"metadata,omitempty"`
}

type update struct {
	Request string   `json:"request"`
	Devices []device `json:"devices"`
}

type writeCase struct {
	Driver        string                    `json:"driver"`
	PluginDataDir string                    `json:"pluginDataDir"`
	CDIDir        string                    `json:"cdiDir"`
	Versions      []string                  `json:"versions"`
	Claim         resourceapi.ResourceClaim `json:"claim"`
	Devices       []device                  `json:"devices"`
	Updates       []update                  `json:"updates"`
}

type preparedDevice struct {
	RequestNames []string `json:"requestNames"`
	PoolName     string   `json:"poolName"`
	DeviceName   string   `json:"deviceName"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
	ShareID      *string  `json:"shareID,omitempty"`
}

type result struct {
	Devices      []preparedDevice `json:"devices"`
	Error        string           `json:"error"`
	UpdateErrors []string         `json:"updateErrors"`
	// Inodes: per metadata file (relative to pluginDataDir), its inode after prepare and
	// after the updates: whether the writer rewrote it in place or renamed a new file over it.
	Inodes map[string][2]uint64 `json:"inodes"`
	Fatal  string               `json:"fatal,omitempty"`
}

// inodes maps every regular file named metadata.json under dir to its inode.
func inodes(dir string) map[string]uint64 {
	out := map[string]uint64{}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "metadata.json" {
			return nil
		}
		info, err := d.Info()
		if st, ok := info.Sys().(*syscall.Stat_t); err == nil && ok {
			rel, _ := filepath.Rel(dir, path)
			out[rel] = st.Ino
		}
		return nil
	})
	return out
}

// plugin is the driver side: it prepares every claim with the case's devices.
type plugin struct {
	devices []kubeletplugin.Device
}

func (p *plugin) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		out[claim.UID] = kubeletplugin.PrepareResult{Devices: p.devices}
	}
	return out, nil
}

func (p *plugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		out[claim.UID] = nil
	}
	return out, nil
}

func (p *plugin) HandleError(_ context.Context, err error, msg string) {
	fmt.Fprintln(os.Stderr, "metadatawriter:", msg+":", err)
}

func (p *plugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func toPlugin(in []device) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(in))
	for _, d := range in {
		dev := kubeletplugin.Device{
			Requests:     d.Requests,
			PoolName:     d.Pool,
			DeviceName:   d.Device,
			CDIDeviceIDs: d.CDIDeviceIDs,
			Metadata:     d.Metadata,
		}
		if d.ShareID != nil {
			uid := types.UID(*d.ShareID)
			dev.ShareID = &uid
		}
		out = append(out, dev)
	}
	return out
}

func run(ctx context.Context, socketDir string, n int, c writeCase) result {
	var versions []schema.GroupVersion
	for _, v := range c.Versions {
		gv, err := schema.ParseGroupVersion(v)
		if err != nil {
			return result{Fatal: fmt.Sprintf("versions: %v", err)}
		}
		versions = append(versions, gv)
	}
	socket := filepath.Join(socketDir, "dra-"+strconv.Itoa(n)+".sock")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	helper, err := kubeletplugin.Start(ctx, &plugin{devices: toPlugin(c.Devices)},
		kubeletplugin.DriverName(c.Driver),
		kubeletplugin.KubeClient(fake.NewClientset(&c.Claim)),
		kubeletplugin.PluginDataDirectoryPath(c.PluginDataDir),
		kubeletplugin.PluginListener(func(_ context.Context, _ string) (net.Listener, error) {
			return net.Listen("unix", socket)
		}),
		kubeletplugin.RegistrationService(false),
		kubeletplugin.HealthService(false),
		kubeletplugin.EnableDeviceMetadata(true, versions),
		kubeletplugin.CDIDirectory(c.CDIDir),
	)
	if err != nil {
		return result{Fatal: fmt.Sprintf("kubeletplugin.Start: %v", err)}
	}
	defer helper.Stop()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return result{Fatal: fmt.Sprintf("dial %s: %v", socket, err)}
	}
	defer conn.Close()
	resp, err := drapbv1.NewDRAPluginClient(conn).NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{
		Claims: []*drapbv1.Claim{{Namespace: c.Claim.Namespace, Name: c.Claim.Name, Uid: string(c.Claim.UID)}},
	})
	out := result{Devices: []preparedDevice{}, UpdateErrors: []string{}}
	if err != nil {
		out.Error = err.Error()
	} else if claim := resp.Claims[string(c.Claim.UID)]; claim != nil {
		out.Error = claim.Error
		for _, d := range claim.Devices {
			out.Devices = append(out.Devices, preparedDevice{
				RequestNames: d.RequestNames,
				PoolName:     d.PoolName,
				DeviceName:   d.DeviceName,
				CDIDeviceIDs: append([]string{}, d.CdiDeviceIds...),
				ShareID:      d.ShareId,
			})
		}
	}
	before := inodes(c.PluginDataDir)
	for _, u := range c.Updates {
		msg := ""
		if err := helper.UpdateRequestMetadata(ctx, c.Claim.Namespace, c.Claim.Name, c.Claim.UID, u.Request, toPlugin(u.Devices)); err != nil {
			msg = err.Error()
		}
		out.UpdateErrors = append(out.UpdateErrors, msg)
	}
	out.Inodes = map[string][2]uint64{}
	for rel, ino := range inodes(c.PluginDataDir) {
		out.Inodes[rel] = [2]uint64{before[rel], ino}
	}
	return out
}

func main() {
	socketDir, err := os.MkdirTemp("", "metadatawriter-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "metadatawriter:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(socketDir)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<20), 64<<20)
	enc := json.NewEncoder(os.Stdout)
	for n := 0; in.Scan(); n++ {
		var c writeCase
		var out result
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			out = result{Fatal: fmt.Sprintf("case %d: %v", n, err)}
		} else {
			out = run(context.Background(), socketDir, n, c)
		}
		if err := enc.Encode(out); err != nil {
			fmt.Fprintln(os.Stderr, "metadatawriter:", err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "metadatawriter: stdin:", err)
		os.Exit(1)
	}
}

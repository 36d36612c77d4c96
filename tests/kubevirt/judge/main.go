// Command kvdev-kubevirt-judge asks KubeVirt's own packages what they make of kvdev's VMIs.
//
// It is built inside a KubeVirt checkout (tests/kubevirt/record.sh adds it with go build's
// -overlay, against the checkout's vendor/) and reads one JSON document on stdin: the
// KubeVirt configuration (feature gates, network binding plugins) and the cases (named VMIs).
// For each case it prints, as one JSON document on stdout:
//
//   - admission: the VMI mutating webhook's patch applied (defaulting), then the VMI create
//     validating admitter with the spec validators virt-api registers (allowed, message,
//     causes, warnings);
//   - domain: the libvirt domain XML of virtwrap/converter, with the host devices virt-launcher
//     resolves from KEP-5304 metadata files (written here, one fake host PCI address each);
//   - devices: the config drive's devices[] that virt-launcher builds from the domain;
//   - configDrive: every file on the config drive (openstack/latest/meta_data.json, user_data,
//     network_data.json) by its path there, where the VMI has a cloudInitConfigDrive volume;
//   - pod: the virt-launcher pod the template service renders (volumes, containers).
//
// "crd" as the first argument prints virt-operator's VirtualMachineInstance CRD instead.
//
//go:debug randseednop=0
package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"

	admissionv1 "k8s.io/api/admission/v1"
	authv1 "k8s.io/api/authentication/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/google/uuid"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	v1 "kubevirt.io/api/core/v1"

	cloudinit "kubevirt.io/kubevirt/pkg/cloud-init"
	"kubevirt.io/kubevirt/pkg/dra/metadata"
	ephemeraldisk "kubevirt.io/kubevirt/pkg/ephemeral-disk"
	netadmitter "kubevirt.io/kubevirt/pkg/network/admitter"
	"kubevirt.io/kubevirt/pkg/testutils"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks/mutating-webhook/mutators"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks/validating-webhook/admitters"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/converter"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/converter/arch"
	convertertypes "kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/converter/types"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/device/hostdevice/dra"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/device/hostdevice/sriov"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
)

// requester is the user the webhooks see: a namespace's workload, not a KubeVirt component.
const requester = "system:serviceaccount:vms:default"

type input struct {
	FeatureGates []string                             `json:"featureGates"`
	Bindings     map[string]v1.InterfaceBindingPlugin `json:"bindings"`
	Cases        []inputCase                          `json:"cases"`
}

type inputCase struct {
	Name string          `json:"name"`
	VMI  json.RawMessage `json:"vmi"`
}

type admission struct {
	Allowed  bool                 `json:"allowed"`
	Message  string               `json:"message,omitempty"`
	Causes   []metav1.StatusCause `json:"causes,omitempty"`
	Warnings []string             `json:"warnings,omitempty"`
}

type result struct {
	Name        string            `json:"name"`
	Defaulted   json.RawMessage   `json:"defaulted,omitempty"`
	MutateError string            `json:"mutateError,omitempty"`
	Admission   *admission        `json:"admission,omitempty"`
	Domain      string            `json:"domain,omitempty"`
	DomainError string            `json:"domainError,omitempty"`
	Devices     json.RawMessage   `json:"devices,omitempty"`
	DevicesErr  string            `json:"devicesError,omitempty"`
	ConfigDrive map[string]string `json:"configDrive,omitempty"`
	HostPCI     map[string]string `json:"hostPCI,omitempty"`
	Pod         json.RawMessage   `json:"pod,omitempty"`
	PodError    string            `json:"podError,omitempty"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "crd" {
		crd, err := components.NewVirtualMachineInstanceCrd()
		check(err)
		out, err := yaml.Marshal(crd)
		check(err)
		_, err = os.Stdout.Write(out)
		check(err)
		return
	}
	raw, err := io.ReadAll(os.Stdin)
	check(err)
	var in input
	check(json.Unmarshal(raw, &in))

	config := &v1.KubeVirtConfiguration{
		DeveloperConfiguration: &v1.DeveloperConfiguration{FeatureGates: in.FeatureGates},
		NetworkConfiguration:   &v1.NetworkConfiguration{Binding: in.Bindings},
	}
	clusterConfig, _, _ := testutils.NewFakeClusterConfigUsingKVConfig(config)
	presets, _ := testutils.NewFakeInformerFor(&v1.VirtualMachineInstancePreset{})
	mutator := &mutators.VMIsMutator{ClusterConfig: clusterConfig, VMIPresetInformer: presets, KubeVirtServiceAccounts: map[string]struct{}{}}
	admitter := &admitters.VMICreateAdmitter{ClusterConfig: clusterConfig, SpecValidators: specValidators(), KubeVirtServiceAccounts: map[string]struct{}{}}

	var results []result
	for _, c := range in.Cases {
		results = append(results, judge(c, mutator, admitter, clusterConfig))
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	check(enc.Encode(results))
}

func judge(c inputCase, mutator *mutators.VMIsMutator, admitter *admitters.VMICreateAdmitter, clusterConfig *virtconfig.ClusterConfig) result {
	r := result{Name: c.Name}
	seed(c.Name)
	resp := mutator.Mutate(review(c.VMI))
	if !resp.Allowed {
		r.MutateError = statusMessage(resp)
		return r
	}
	defaulted := []byte(c.VMI)
	if len(resp.Patch) > 0 {
		p, err := jsonpatch.DecodePatch(resp.Patch)
		if err != nil {
			r.MutateError = err.Error()
			return r
		}
		if defaulted, err = p.Apply(defaulted); err != nil {
			r.MutateError = err.Error()
			return r
		}
	}
	vmi := &v1.VirtualMachineInstance{}
	if err := json.Unmarshal(defaulted, vmi); err != nil {
		r.MutateError = err.Error()
		return r
	}
	// The mutator stamps the time of the request; a recording must not change with it.
	vmi.Status.PhaseTransitionTimestamps = nil
	shown, err := json.Marshal(struct {
		Metadata metav1.ObjectMeta             `json:"metadata"`
		Spec     v1.VirtualMachineInstanceSpec `json:"spec"`
	}{vmi.ObjectMeta, vmi.Spec})
	check(err)
	r.Defaulted = shown

	aresp := admitter.Admit(context.Background(), review(defaulted))
	a := &admission{Allowed: aresp.Allowed, Warnings: aresp.Warnings}
	if aresp.Result != nil {
		a.Message = aresp.Result.Message
		if aresp.Result.Details != nil {
			a.Causes = aresp.Result.Details.Causes
		}
	}
	r.Admission = a
	if !aresp.Allowed {
		return r
	}

	dir, err := os.MkdirTemp("", "kvdev-kubevirt-judge-")
	check(err)
	defer os.RemoveAll(dir)
	r.HostPCI = writeMetadata(filepath.Join(dir, "dra"), vmi)

	// where virt-launcher keeps cloud-init's files (its --ephemeral-disk-dir default): the
	// domain names the config drive's ISO there; configDrive writes into dir instead
	cloudinit.SetLocalDirectoryOnly("/var/run/kubevirt-ephemeral-disks/cloud-init-data")
	domain, err := convert(vmi, filepath.Join(dir, "dra"))
	if err != nil {
		r.DomainError = err.Error()
	} else {
		out, err := xml.MarshalIndent(domain.Spec, "", "  ")
		check(err)
		r.Domain = string(out) + "\n"
		devices, drive, err := configDrive(vmi, string(out), filepath.Join(dir, "cloud-init"))
		if err != nil {
			r.DevicesErr = err.Error()
		} else {
			r.Devices = devices
			r.ConfigDrive = drive
		}
	}
	pod, err := launcherPod(vmi, clusterConfig)
	if err != nil {
		r.PodError = err.Error()
	} else {
		r.Pod = pod
	}
	return r
}

// seed makes what KubeVirt draws at random for a VMI (the UUIDs it makes, the launcher's
// QEMU timeout jitter) the same on every run, and different per case.
func seed(name string) {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	s := int64(h.Sum64() & (1<<62 - 1))
	rand.Seed(s) //nolint:staticcheck // KubeVirt draws from the global source
	uuid.SetRand(rand.New(rand.NewSource(s)))
}

// netValidator is SIG-Network's VMI spec validator, as virt-api registers it.
func netValidator(f *field.Path, spec *v1.VirtualMachineInstanceSpec, config *virtconfig.ClusterConfig) []metav1.StatusCause {
	return netadmitter.Validate(f, spec, config)
}

func review(raw []byte) *admissionv1.AdmissionReview {
	return &admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{
		UID:       "kvdev-judge",
		Operation: admissionv1.Create,
		Resource:  metav1.GroupVersionResource{Group: v1.GroupVersion.Group, Version: v1.GroupVersion.Version, Resource: "virtualmachineinstances"},
		Object:    k8sruntime.RawExtension{Raw: raw},
		UserInfo:  authv1.UserInfo{Username: requester},
	}}
}

func statusMessage(resp *admissionv1.AdmissionResponse) string {
	if resp.Result == nil {
		return "refused without a message"
	}
	return resp.Result.Message
}

// writeMetadata writes, for every DRA device the VMI names (networks, GPUs, host devices), the
// KEP-5304 file virt-launcher reads its host PCI address from, and returns those addresses.
func writeMetadata(base string, vmi *v1.VirtualMachineInstance) map[string]string {
	type ref struct{ claim, request string }
	var refs []ref
	for _, n := range vmi.Spec.Networks {
		if n.ResourceClaim != nil {
			refs = append(refs, ref{n.ResourceClaim.ClaimName, n.ResourceClaim.RequestName})
		}
	}
	for _, g := range vmi.Spec.Domain.Devices.GPUs {
		if g.ClaimRequest != nil {
			refs = append(refs, ref{g.ClaimRequest.ClaimName, g.ClaimRequest.RequestName})
		}
	}
	for _, h := range vmi.Spec.Domain.Devices.HostDevices {
		if h.ClaimRequest != nil {
			refs = append(refs, ref{h.ClaimRequest.ClaimName, h.ClaimRequest.RequestName})
		}
	}
	addresses := map[string]string{}
	for i, rf := range refs {
		dir := ""
		for _, rc := range vmi.Spec.ResourceClaims {
			if rc.Name != rf.claim {
				continue
			}
			if rc.ResourceClaimName != nil && *rc.ResourceClaimName != "" {
				dir = filepath.Join(base, "resourceclaims", *rc.ResourceClaimName, rf.request)
			} else {
				dir = filepath.Join(base, "resourceclaimtemplates", rc.Name, rf.request)
			}
		}
		if dir == "" {
			continue
		}
		address := fmt.Sprintf("0000:3b:%02x.0", i+1)
		addresses[rf.claim+"/"+rf.request] = address
		md := metadata.DeviceMetadata{
			TypeMeta: metav1.TypeMeta{APIVersion: metadata.APIVersionV1Alpha1, Kind: "DeviceMetadata"},
			Requests: []metadata.DeviceMetadataRequest{{
				Name: rf.request,
				Devices: []metadata.Device{{
					Driver: "judge.kvdev.io", Pool: "node-a", Name: fmt.Sprintf("dev-%d", i+1),
					Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
						metadata.PCIBusIDAttribute: {StringValue: &address},
					},
				}},
			}},
		}
		out, err := json.Marshal(md)
		check(err)
		check(os.MkdirAll(dir, 0o755))
		check(os.WriteFile(filepath.Join(dir, "judge.kvdev.io-metadata.json"), out, 0o644))
	}
	return addresses
}

func convert(vmi *v1.VirtualMachineInstance, draBase string) (*api.Domain, error) {
	sriovDevices, err := sriov.CreateDRAHostDevices(vmi, draBase)
	if err != nil {
		return nil, err
	}
	generic, err := dra.CreateDRAHostDevices(vmi, draBase)
	if err != nil {
		return nil, err
	}
	gpus, err := dra.CreateDRAGPUHostDevices(vmi, draBase)
	if err != nil {
		return nil, err
	}
	c := &convertertypes.ConverterContext{
		Architecture:              arch.NewConverter(runtime.GOARCH),
		VirtualMachine:            vmi,
		AllowEmulation:            true,
		HypervisorDeviceAvailable: true,
		HostArchitecture:          runtime.GOARCH,
		SRIOVDevices:              sriovDevices,
		GenericHostDevices:        generic,
		GPUHostDevices:            gpus,
		DisksInfo:                 disksInfo(vmi),
		EphemeraldiskCreator:      ephemeraldisk.NewEphemeralDiskCreator("/var/run/kubevirt-ephemeral-disks/disk-data"),
		SerialConsoleLog:          true,
	}
	domain := &api.Domain{}
	if err := converter.Convert_v1_VirtualMachineInstance_To_api_Domain(vmi, domain, c); err != nil {
		return nil, err
	}
	return domain, nil
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvdev-kubevirt-judge:", err)
		os.Exit(2)
	}
}

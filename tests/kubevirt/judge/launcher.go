package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"go.uber.org/mock/gomock"
	"k8s.io/client-go/tools/cache"

	v1 "kubevirt.io/api/core/v1"

	cloudinit "kubevirt.io/kubevirt/pkg/cloud-init"
	diskutils "kubevirt.io/kubevirt/pkg/ephemeral-disk-utils"
	"kubevirt.io/kubevirt/pkg/hooks"
	"kubevirt.io/kubevirt/pkg/network/netbinding"
	netannotations "kubevirt.io/kubevirt/pkg/network/pod/annotations"
	netresources "kubevirt.io/kubevirt/pkg/network/resources"
	"kubevirt.io/kubevirt/pkg/os/disk"
	storageannotations "kubevirt.io/kubevirt/pkg/storage/pod/annotations"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	"kubevirt.io/kubevirt/pkg/virt-controller/services"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/cli"
)

// disksInfo is what virt-launcher learns from qemu-img about each containerDisk image.
func disksInfo(vmi *v1.VirtualMachineInstance) map[string]*disk.DiskInfo {
	infos := map[string]*disk.DiskInfo{}
	for _, v := range vmi.Spec.Volumes {
		if v.ContainerDisk != nil {
			infos[v.Name] = &disk.DiskInfo{Format: "qcow2", VirtualSize: 4 << 30, ActualSize: 1 << 30}
		}
	}
	return infos
}

// reporter turns a gomock failure into the judge's own.
type reporter struct{}

func (reporter) Errorf(format string, args ...any) { check(fmt.Errorf(format, args...)) }
func (reporter) Fatalf(format string, args ...any) { check(fmt.Errorf(format, args...)) }

// configDrive gives the config drive's devices[] that virt-launcher builds from the defined
// domain (here the converter's XML: libvirt assigns no addresses of its own in the judge), and,
// where the VMI has a cloudInitConfigDrive volume, every file cloud-init's GenerateLocalData
// puts on the drive (meta_data.json with those devices, user_data, network_data.json), by its
// path on the drive, captured where it would make the ISO. A tagged device the domain gives no
// address (libvirt's to assign) makes KubeVirt's builder panic: an error here.
func configDrive(vmi *v1.VirtualMachineInstance, domainXML string, dir string) (shown json.RawMessage, files map[string]string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the devices metadata builder panicked (a tagged device with no guest address?): %v", r)
		}
	}()
	ctrl := gomock.NewController(reporter{})
	dom := cli.NewMockVirDomain(ctrl)
	dom.EXPECT().GetXMLDesc(gomock.Any()).Return(domainXML, nil).AnyTimes()
	devices, err := virtwrap.KvdevJudgeDevicesMetadata(vmi, dom)
	if err != nil {
		return nil, nil, err
	}
	shown, err = json.Marshal(cloudinit.ConfigDriveMetadata{Devices: &devices})
	if err != nil {
		return nil, nil, err
	}
	data, err := cloudinit.ReadCloudInitVolumeDataSource(vmi, filepath.Join(dir, "secrets"))
	if err != nil {
		return nil, nil, err
	}
	if data == nil || data.DataSource != cloudinit.DataSourceConfigDrive {
		return shown, nil, nil
	}
	if devices != nil { // as virt-launcher's generateSomeCloudInitISO: no devices, no key
		data.DevicesData = &devices
	}
	// The ISO's owner (virt-launcher's qemu user) is no part of what the drive carries.
	diskutils.MockDefaultOwnershipManager()
	if err := cloudinit.SetLocalDirectory(filepath.Join(dir, "local")); err != nil {
		return nil, nil, err
	}
	cloudinit.SetIsoCreationFunction(func(isoOutFile, volumeID string, inDir string) error {
		if volumeID != "config-2" {
			return fmt.Errorf("config drive labelled %q, not config-2", volumeID)
		}
		files = map[string]string{}
		err := filepath.WalkDir(inDir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			text, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(inDir, path)
			files[filepath.ToSlash(rel)] = string(text)
			return err
		})
		if err != nil {
			return err
		}
		return os.WriteFile(isoOutFile, nil, 0o600)
	})
	if err := cloudinit.GenerateLocalData(vmi, "", data); err != nil {
		return nil, nil, err
	}
	return shown, files, nil
}

// launcherPod renders the virt-launcher pod with the template service virt-controller runs,
// with the sidecar creators, memory calculator and annotation generators it registers.
func launcherPod(vmi *v1.VirtualMachineInstance, clusterConfig *virtconfig.ClusterConfig) (out json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("template service panicked: %v", r)
		}
	}()
	store := func() cache.Store { return cache.NewStore(cache.MetaNamespaceKeyFunc) }
	svc := services.NewTemplateService("virt-launcher:judge", 240, "/var/run/kubevirt",
		"/var/run/kubevirt-ephemeral-disks", "/var/run/kubevirt/container-disks",
		"/var/run/kubevirt/hotplug-disks", "", store(), nil, clusterConfig, 107,
		"virt-exportserver:judge", store(), store(),
		// the options virt-controller's application passes (pkg/virt-controller/watch)
		services.WithSidecarCreator(func(vmi *v1.VirtualMachineInstance, _ *v1.KubeVirtConfiguration) (hooks.HookSidecarList, error) {
			return hooks.UnmarshalHookSidecarList(vmi)
		}),
		services.WithSidecarCreator(netbinding.NetBindingPluginSidecarList),
		services.WithNetMemoryCalculator(netresources.MemoryCalculator{}),
		services.WithAnnotationsGenerators(netannotations.NewGenerator(clusterConfig), storageannotations.Generator{}),
		services.WithNetTargetAnnotationsGenerator(netannotations.NewGenerator(clusterConfig)),
	)
	pod, err := svc.RenderLaunchManifest(vmi)
	if err != nil {
		return nil, err
	}
	return json.Marshal(pod)
}

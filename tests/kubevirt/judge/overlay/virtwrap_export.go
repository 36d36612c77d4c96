package virtwrap

// Added to KubeVirt's virtwrap package in the judge's build only (go build -overlay): it lets
// the judge call the config-drive device builder, which virt-launcher calls on a defined domain.

import (
	v1 "kubevirt.io/api/core/v1"

	cloudinit "kubevirt.io/kubevirt/pkg/cloud-init"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/cli"
)

// KvdevJudgeDevicesMetadata is buildDevicesMetadata of a manager that holds nothing.
func KvdevJudgeDevicesMetadata(vmi *v1.VirtualMachineInstance, dom cli.VirDomain) ([]cloudinit.DeviceData, error) {
	return (&LibvirtDomainManager{}).buildDevicesMetadata(vmi, dom)
}

//go:build kvstorage

package main

import (
	storageadmitters "kubevirt.io/kubevirt/pkg/storage/admitters"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks/validating-webhook/admitters"
)

// specValidators are the ones virt-api registers for VMI create where SIG-Storage has its own.
func specValidators() []admitters.SpecValidator {
	return []admitters.SpecValidator{netValidator, storageadmitters.Validate}
}

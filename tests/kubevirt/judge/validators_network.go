//go:build !kvstorage

package main

import "kubevirt.io/kubevirt/pkg/virt-api/webhooks/validating-webhook/admitters"

// specValidators are the ones virt-api registers for VMI create (SIG-Network's only).
func specValidators() []admitters.SpecValidator {
	return []admitters.SpecValidator{netValidator}
}

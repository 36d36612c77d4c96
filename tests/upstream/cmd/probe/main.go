// Command probe is a placeholder that pins the upstream packages the oracles import.
package main

import (
	_ "k8s.io/dynamic-resource-allocation/structured"
	_ "k8s.io/kubernetes/pkg/volume/util"
)

func main() {}

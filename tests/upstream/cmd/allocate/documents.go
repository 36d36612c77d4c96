package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	resourcedefaults "k8s.io/kubernetes/pkg/apis/resource/v1"
)

// document is one object of the input, typed by its apiVersion and kind (obj is nil for a
// kind the allocator does not read: it is skipped with a warning, as kvdev-host does).
type document struct {
	source string
	kind   string
	obj    any
}

type typeMeta struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Items      []json.RawMessage `json:"items"`
}

// splitDocuments reads a YAML or JSON stream (several documents, or a kind: List).
func splitDocuments(data []byte, source string) ([]document, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []document
	for n := 1; ; n++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, n, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
			continue
		}
		found, err := decodeObject(raw, fmt.Sprintf("%s: document %d", source, n))
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
}

// decodeObject types one JSON object (a List gives its items).
func decodeObject(raw json.RawMessage, source string) ([]document, error) {
	var meta typeMeta
	if err := utiljson.Unmarshal(raw, &meta); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if meta.Kind == "List" || (meta.Kind != "" && meta.Items != nil && meta.APIVersion == "v1" && len(meta.Kind) > 4 && meta.Kind[len(meta.Kind)-4:] == "List") {
		var out []document
		for i, item := range meta.Items {
			found, err := decodeObject(item, fmt.Sprintf("%s, item %d", source, i))
			if err != nil {
				return nil, err
			}
			out = append(out, found...)
		}
		return out, nil
	}
	var obj any
	switch meta.APIVersion + "/" + meta.Kind {
	case "resource.k8s.io/v1/DeviceClass":
		obj = &resourceapi.DeviceClass{}
	case "resource.k8s.io/v1/ResourceSlice":
		obj = &resourceapi.ResourceSlice{}
	case "resource.k8s.io/v1/ResourceClaim":
		obj = &resourceapi.ResourceClaim{}
	case "resource.k8s.io/v1/DeviceTaintRule":
		obj = &resourceapi.DeviceTaintRule{}
	case "v1/Node":
		obj = &v1.Node{}
	case "v1/Pod":
		obj = &v1.Pod{}
	default:
		return []document{{source: source, kind: meta.APIVersion + "/" + meta.Kind}}, nil
	}
	if err := utiljson.Unmarshal(raw, obj); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", source, meta.Kind, err)
	}
	// The API server's defaults (count 1, ExactCount, toleration operator Equal ...), as the
	// scheduler sees every object: upstream's own generated defaulters.
	switch o := obj.(type) {
	case *resourceapi.ResourceClaim:
		resourcedefaults.SetObjectDefaults_ResourceClaim(o)
	case *resourceapi.ResourceSlice:
		resourcedefaults.SetObjectDefaults_ResourceSlice(o)
	case *resourceapi.DeviceTaintRule:
		resourcedefaults.SetObjectDefaults_DeviceTaintRule(o)
	}
	return []document{{source: source, kind: meta.Kind, obj: obj}}, nil
}

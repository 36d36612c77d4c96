// Command metadatareader is upstream's KEP-5304 metadata reader at the release kvdev targets:
// k8s.io/dynamic-resource-allocation/devicemetadata (v0.37.2) DecodeMetadataFromStream, with
// an encoding/json Decoder on the stream as upstream's own readers make it, into the internal
// metadata.DeviceMetadata type (what the package recommends), and its validation result.
//
// Usage: metadatareader FILE          (one stream: one result line)
//
//	metadatareader --batch       (stdin lines {"data": BASE64}: one result line each)
//
// A result is {"ok": true, "apiVersion": the version decoded, "object": the decoded object as
// v1beta1 JSON (what a reader keeps: metadata, podClaimName, every request and device),
// "validation": the validation error or ""} or {"ok": false, "error": upstream's error}.
// Exit 0 when every result was printed (a refused stream is a result, not a failure).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/devicemetadata"
)

type result struct {
	OK         bool                            `json:"ok"`
	APIVersion string                          `json:"apiVersion,omitempty"`
	Object     *metadatav1beta1.DeviceMetadata `json:"object,omitempty"`
	Validation string                          `json:"validation,omitempty"`
	Error      string                          `json:"error,omitempty"`
}

func decode(data []byte) result {
	var dm metadata.DeviceMetadata
	var gvk schema.GroupVersionKind
	var validation error
	err := devicemetadata.DecodeMetadataFromStream(json.NewDecoder(bytes.NewReader(data)), &dm,
		devicemetadata.DecodeMetadataStoreGVKResult(&gvk),
		devicemetadata.DecodeMetadataWithValidationResult(&validation))
	if err != nil {
		return result{Error: err.Error()}
	}
	// The internal type has no JSON form of its own: print it as the v1beta1 object (the
	// same fields; the conversion is upstream's generated one).
	var out metadatav1beta1.DeviceMetadata
	if err := metadatav1beta1.Convert_metadata_DeviceMetadata_To_v1beta1_DeviceMetadata(&dm, &out, nil); err != nil {
		return result{Error: "converting the decoded object for printing: " + err.Error()}
	}
	out.APIVersion, out.Kind = "", ""
	res := result{OK: true, APIVersion: gvk.GroupVersion().String(), Object: &out}
	if validation != nil {
		res.Validation = validation.Error()
	}
	return res
}

func main() {
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	if len(os.Args) == 2 && os.Args[1] != "--batch" {
		data, err := os.ReadFile(os.Args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, "metadatareader:", err)
			os.Exit(2)
		}
		if err := enc.Encode(decode(data)); err != nil {
			os.Exit(1)
		}
		return
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: metadatareader FILE | metadatareader --batch")
		os.Exit(2)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for in.Scan() {
		var line struct {
			Data []byte `json:"data"`
		}
		res := result{Error: "batch line: not {\"data\": BASE64}"}
		if err := json.Unmarshal(in.Bytes(), &line); err == nil {
			res = decode(line.Data)
		}
		if err := enc.Encode(res); err != nil {
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "metadatareader: stdin:", err)
		os.Exit(1)
	}
}

// Command istiomesh reads Helm values for istiod (a file holding
// meshConfig) and decodes meshConfig into Istio's own MeshConfig type
// (istio.io/api/mesh/v1alpha1) with protojson, refusing unknown fields and
// values of the wrong type, then prints the extension providers as
// protojson. It is a module of its own so that the project's go.mod does
// not depend on Istio; test/gatewayapi runs it.
package main

import (
	"fmt"
	"os"

	"google.golang.org/protobuf/encoding/protojson"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	"sigs.k8s.io/yaml"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) != 2 {
		return fmt.Errorf("usage: istiomesh VALUES.yaml")
	}
	b, err := os.ReadFile(os.Args[1])
	if err != nil {
		return err
	}
	var values map[string]any
	if err := yaml.UnmarshalStrict(b, &values); err != nil {
		return fmt.Errorf("%s: %w", os.Args[1], err)
	}
	mesh, ok := values["meshConfig"]
	if !ok {
		return fmt.Errorf("%s: no meshConfig", os.Args[1])
	}
	j, err := yaml.Marshal(mesh)
	if err != nil {
		return err
	}
	if j, err = yaml.YAMLToJSON(j); err != nil {
		return err
	}
	var cfg meshv1alpha1.MeshConfig
	if err := (protojson.UnmarshalOptions{}).Unmarshal(j, &cfg); err != nil {
		return fmt.Errorf("meshConfig: %w", err)
	}
	out, err := protojson.MarshalOptions{Multiline: true}.Marshal(&meshv1alpha1.MeshConfig{ExtensionProviders: cfg.GetExtensionProviders()})
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}

// Package manifest reads RateLimitPolicy and RateLimitOverrides manifests:
// YAML (or JSON) streams of documents, as kubectl reads them, decoded
// strictly (a field the API does not know is an error naming it, in the API
// server's words). Local mode's files and the middleware's WithPolicyYAML
// both read through it; local mode adds the CRD schema's validation and
// defaults (an Admission: internal/crdschema), which the middleware, a
// library, does without.
package manifest

import (
	"bytes"
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
)

// Kinds of the API read here.
const (
	KindPolicy    = "RateLimitPolicy"
	KindOverrides = "RateLimitOverrides"
)

// Admission checks an object of the API as the API server would on
// create, filling in the schema's defaults in place; the error names each
// field at fault.
type Admission func(ctx context.Context, obj map[string]any) error

// Document is one object of the API in a stream.
type Document struct {
	// Index is the document's place in the stream, from 1.
	Index int
	// One of Policy and Overrides is set.
	Policy    *ratelimitv1alpha1.RateLimitPolicy
	Overrides *ratelimitv1alpha1.RateLimitOverrides
	// Invalid is why the API server would refuse the object (the
	// Admission's or the strict decoding's error); nil when it would
	// accept it. An invalid object holds what could be decoded of it.
	Invalid error
}

// Name is the document's metadata.name.
func (d *Document) Name() string { return d.object().GetName() }

// Namespace is the document's metadata.namespace, "" when it names none.
func (d *Document) Namespace() string { return d.object().GetNamespace() }

// apiObject is what Policy and Overrides both are.
type apiObject interface {
	runtime.Object
	metav1.Object
}

func (d *Document) object() apiObject {
	if d.Policy != nil {
		return d.Policy
	}
	return d.Overrides
}

// Read reads the RateLimitPolicy and RateLimitOverrides documents of b;
// documents of other kinds (a kustomization) are skipped. admit, when not
// nil, checks and defaults each object before it is decoded. The error is
// for a stream that cannot be read as one of the API's manifests (YAML
// that does not parse, a document without a kind, a wrong apiVersion, a
// name the API server refuses); an object it would refuse otherwise is a
// Document with Invalid set.
func Read(ctx context.Context, b []byte, admit Admission) ([]Document, error) {
	var docs []Document
	for i, raw := range splitDocuments(b) {
		d, err := readDocument(ctx, raw, admit)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		if d != nil {
			d.Index = i + 1
			docs = append(docs, *d)
		}
	}
	return docs, nil
}

// readDocument reads one document: nil for an empty one or one of another kind.
func readDocument(ctx context.Context, raw []byte, admit Admission) (*Document, error) {
	js, err := yaml.YAMLToJSONStrict(raw) // a key twice is an error, as the API server says
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(js, &obj); err != nil {
		return nil, err
	}
	if len(obj) == 0 {
		return nil, nil // only comments
	}
	kind, _ := obj["kind"].(string)
	d := &Document{}
	switch kind {
	case "":
		return nil, field.Required(field.NewPath("kind"), "want a RateLimitPolicy manifest (apiVersion, kind, metadata.name, spec)")
	case KindPolicy:
		d.Policy = &ratelimitv1alpha1.RateLimitPolicy{}
	case KindOverrides:
		d.Overrides = &ratelimitv1alpha1.RateLimitOverrides{}
	default:
		return nil, nil
	}
	if v, _ := obj["apiVersion"].(string); v != ratelimitv1alpha1.GroupVersion.String() {
		return nil, fmt.Errorf("apiVersion %q: want %s", v, ratelimitv1alpha1.GroupVersion)
	}
	if admit != nil {
		d.Invalid = admit(ctx, obj)
		if js, err = utiljson.Marshal(obj); err != nil {
			return nil, err
		}
	}
	if err := decodeStrict(js, d.object()); err != nil && d.Invalid == nil {
		d.Invalid = err
	}
	if err := validateNames(d.object()); err != nil {
		return nil, err
	}
	return d, nil
}

// decodeStrict decodes js into obj, refusing unknown and duplicate fields
// as the API server's strict field validation does (and in its words).
func decodeStrict(js []byte, obj runtime.Object) error {
	strict, err := kjson.UnmarshalStrict(js, obj)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		return runtime.NewStrictDecodingError(strict)
	}
	return nil
}

// validateNames checks metadata.name and metadata.namespace as the API
// server does for a namespaced custom resource: the name a DNS subdomain,
// the namespace a DNS label. A file must not hold an object the cluster
// would refuse (nor one whose name, holding a "/", reads as another's).
func validateNames(o metav1.Object) error {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	name := o.GetName()
	if name == "" {
		return field.Required(meta.Child("name"), "")
	}
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(meta.Child("name"), name, msg))
	}
	if ns := o.GetNamespace(); ns != "" {
		for _, msg := range validation.IsDNS1123Label(ns) {
			errs = append(errs, field.Invalid(meta.Child("namespace"), ns, msg))
		}
	}
	return errs.ToAggregate()
}

// splitDocuments splits a YAML stream at "---" lines.
func splitDocuments(b []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if len(bytes.TrimSpace(cur.Bytes())) > 0 {
			docs = append(docs, append([]byte(nil), cur.Bytes()...))
		}
		cur.Reset()
	}
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		trimmed := bytes.TrimRight(line, " \t\r\n")
		if bytes.Equal(trimmed, []byte("---")) || bytes.HasPrefix(trimmed, []byte("--- ")) {
			flush()
			continue
		}
		cur.Write(line)
	}
	flush()
	return docs
}

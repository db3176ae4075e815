// Package crdschema validates and defaults objects read outside the API
// server against the CRDs themselves (config/crd/bases, embedded), with the
// apiextensions libraries the API server uses: unknown fields refused as
// strict field validation refuses them, the schema's defaults, its value
// validation (types, patterns, formats, bounds, enums, list sizes and list
// types) and its CEL rules. So local mode accepts exactly the objects a
// cluster accepts, with the same words.
package crdschema

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/config/crd/bases"
)

// Validator holds the schema of each kind of the API, built once.
type Validator struct {
	kinds map[string]*kindSchema
}

// kindSchema is one kind's schema in the forms the API server applies it.
type kindSchema struct {
	apiVersion string
	structural *structuralschema.Structural
	values     apiservervalidation.SchemaValidator
	rules      *cel.Validator
}

// Shared is the process's Validator: building one compiles every CEL rule
// of the CRDs, so it is built once, on first use.
var Shared = sync.OnceValues(New)

// New builds a Validator from the embedded CRDs.
func New() (*Validator, error) {
	v := &Validator{kinds: map[string]*kindSchema{}}
	for _, doc := range [][]byte{bases.RateLimitPolicies, bases.RateLimitOverrides} {
		kind, ks, err := newKindSchema(doc)
		if err != nil {
			return nil, err
		}
		v.kinds[kind] = ks
	}
	return v, nil
}

// newKindSchema reads a CRD of one served version, as the API server's
// custom resource handler builds its validators.
func newKindSchema(doc []byte) (string, *kindSchema, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(doc, &crd); err != nil {
		return "", nil, fmt.Errorf("crdschema: read CRD: %w", err)
	}
	kind := crd.Spec.Names.Kind
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Schema == nil {
		return "", nil, fmt.Errorf("crdschema: %s: want one version with a schema", kind)
	}
	ver := crd.Spec.Versions[0]
	var internal apiextensions.CustomResourceValidation
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(ver.Schema, &internal, nil); err != nil {
		return "", nil, fmt.Errorf("crdschema: %s: %w", kind, err)
	}
	s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		return "", nil, fmt.Errorf("crdschema: %s: structural schema: %w", kind, err)
	}
	s = s.DeepCopy()
	if err := structuraldefaulting.PruneDefaults(s); err != nil {
		return "", nil, fmt.Errorf("crdschema: %s: defaults: %w", kind, err)
	}
	values, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		return "", nil, fmt.Errorf("crdschema: %s: value validation: %w", kind, err)
	}
	ks := &kindSchema{
		apiVersion: crd.Spec.Group + "/" + ver.Name,
		structural: s,
		values:     values,
		rules:      cel.NewValidator(s, true, celconfig.PerCallLimit),
	}
	return kind, ks, nil
}

// Admit checks obj, an object of the API decoded from JSON (integers as
// int64), as the API server checks one created with strict field
// validation, and fills in the schema's defaults in place. A field the
// schema does not know is a strict decoding error, as the API server
// says; otherwise the errors are the field errors of its validation, each
// naming its field.
func (v *Validator) Admit(ctx context.Context, obj map[string]any) error {
	kind, _ := obj["kind"].(string)
	ks, ok := v.kinds[kind]
	if !ok {
		return field.NotSupported(field.NewPath("kind"), kind, v.kindNames())
	}
	if apiVersion, _ := obj["apiVersion"].(string); apiVersion != ks.apiVersion {
		return field.Invalid(field.NewPath("apiVersion"), apiVersion, "must be "+ks.apiVersion)
	}
	delete(obj, "status") // a create ignores it: the status subresource's
	if err := ks.decode(obj); err != nil {
		return err
	}
	structuraldefaulting.Default(obj, ks.structural)
	return ks.validate(ctx, obj).ToAggregate()
}

// decode is what the API server's decoder does: metadata coerced, unknown
// fields found (and pruned), nulls without defaults dropped.
func (ks *kindSchema) decode(obj map[string]any) error {
	ferr, unknown := schemaobjectmeta.CoerceWithOptions(nil, obj, ks.structural, true,
		schemaobjectmeta.CoerceOptions{ReturnUnknownFieldPaths: true})
	if ferr != nil {
		return field.ErrorList{ferr}.ToAggregate()
	}
	unknown = append(unknown, pruning.PruneWithOptions(obj, ks.structural, true,
		structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})...)
	if len(unknown) > 0 {
		errs := make([]error, len(unknown))
		for i, p := range unknown {
			errs[i] = fmt.Errorf("unknown field %q", p)
		}
		return runtime.NewStrictDecodingError(errs)
	}
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, ks.structural)
	return nil
}

// validate is the API server's validation of a create: values, embedded
// metadata, list types, then the CEL rules unless an error would make
// them meaningless.
func (ks *kindSchema) validate(ctx context.Context, obj map[string]any) field.ErrorList {
	errs := apiservervalidation.ValidateCustomResource(nil, obj, ks.values)
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, obj, ks.structural, false)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, ks.structural, obj)...)
	if blocking(errs) {
		return append(errs, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"))
	}
	ruleErrs, _ := ks.rules.Validate(ctx, nil, ks.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, ruleErrs...)
}

// blocking reports errors after which the API server does not run the CEL
// rules (the rules could not read the object as typed).
func blocking(errs field.ErrorList) bool {
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true
		}
	}
	return false
}

func (v *Validator) kindNames() []string { return slices.Sorted(maps.Keys(v.kinds)) }

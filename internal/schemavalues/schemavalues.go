// Package schemavalues applies the value rules of the RateLimitPolicy
// CRD's OpenAPI schema (types, patterns, enums, lengths, bounds, list
// sizes, sets and maps) to a spec, read from the generated CRD itself
// (config/crd/bases), without the API server's libraries: the middleware,
// a library users import, checks what it is given against the very schema
// a cluster applies. Its CEL rules need a CEL environment like the API
// server's; internal/policy repeats those in Go, held equal to the API
// server by the parity test of internal/policyfiles. Local mode applies
// the whole schema with the API server's libraries (internal/crdschema).
package schemavalues

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/config/crd/bases"
)

// schema is the part of an OpenAPI v3 schema the CRDs use for values.
type schema struct {
	Type        string             `json:"type"`
	Properties  map[string]*schema `json:"properties"`
	Items       *schema            `json:"items"`
	Required    []string           `json:"required"`
	Enum        []any              `json:"enum"`
	Pattern     string             `json:"pattern"`
	MaxLength   *int64             `json:"maxLength"`
	MinLength   *int64             `json:"minLength"`
	MaxItems    *int64             `json:"maxItems"`
	MinItems    *int64             `json:"minItems"`
	Maximum     *float64           `json:"maximum"`
	Minimum     *float64           `json:"minimum"`
	ListType    string             `json:"x-kubernetes-list-type"`
	ListMapKeys []string           `json:"x-kubernetes-list-map-keys"`

	pattern *regexp.Regexp
}

type crd struct {
	Spec struct {
		Versions []struct {
			Schema struct {
				OpenAPIV3Schema *schema `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

var policySpec = sync.OnceValues(func() (*schema, error) { return specSchema(bases.RateLimitPolicies) })

// specSchema reads the schema of spec from a CRD's YAML, its patterns
// compiled (the API server's are Go regular expressions too).
func specSchema(doc []byte) (*schema, error) {
	var c crd
	if err := yaml.Unmarshal(doc, &c); err != nil {
		return nil, fmt.Errorf("read the CRD: %w", err)
	}
	if len(c.Spec.Versions) != 1 || c.Spec.Versions[0].Schema.OpenAPIV3Schema == nil {
		return nil, fmt.Errorf("the CRD has %d versions, want one with a schema", len(c.Spec.Versions))
	}
	spec := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	if spec == nil {
		return nil, fmt.Errorf("the CRD's schema has no spec")
	}
	return spec, spec.compile()
}

func (s *schema) compile() error {
	if s.Pattern != "" {
		re, err := regexp.Compile(s.Pattern)
		if err != nil {
			return fmt.Errorf("pattern %q: %w", s.Pattern, err)
		}
		s.pattern = re
	}
	for _, p := range s.Properties {
		if err := p.compile(); err != nil {
			return err
		}
	}
	if s.Items != nil {
		return s.Items.compile()
	}
	return nil
}

// PolicySpec checks spec, any value that encodes as a RateLimitPolicySpec
// does, against the value rules of the CRD's schema, each error naming its
// field under spec.
func PolicySpec(spec any) field.ErrorList {
	s, err := policySpec()
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("spec"), err)}
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("spec"), err)}
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("spec"), err)}
	}
	return s.validate(v, field.NewPath("spec"))
}

func (s *schema) validate(v any, path *field.Path) field.ErrorList {
	if v == nil {
		return nil // an absent optional value; required ones are checked by their object
	}
	switch s.Type {
	case "object":
		return s.validateObject(v, path)
	case "array":
		return s.validateArray(v, path)
	case "string":
		return s.validateString(v, path)
	case "integer", "number":
		return s.validateNumber(v, path)
	case "boolean":
		if _, ok := v.(bool); !ok {
			return field.ErrorList{field.TypeInvalid(path, v, "must be of type boolean")}
		}
	}
	return nil
}

func (s *schema) validateObject(v any, path *field.Path) field.ErrorList {
	m, ok := v.(map[string]any)
	if !ok {
		return field.ErrorList{field.TypeInvalid(path, v, "must be of type object")}
	}
	var errs field.ErrorList
	for _, name := range s.Required {
		if value, ok := m[name]; !ok || isZero(value) {
			errs = append(errs, field.Required(path.Child(name), ""))
			delete(m, name)
		}
	}
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if p := s.Properties[name]; p != nil {
			errs = append(errs, p.validate(m[name], path.Child(name))...)
		}
	}
	return errs
}

// isZero says a required value is its type's zero: what a Go value
// encodes when the field is missing, which a manifest would leave out
// (the API server then says it is required).
func isZero(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case float64:
		return v == 0
	}
	return false
}

func (s *schema) validateArray(v any, path *field.Path) field.ErrorList {
	list, ok := v.([]any)
	if !ok {
		return field.ErrorList{field.TypeInvalid(path, v, "must be of type array")}
	}
	var errs field.ErrorList
	if s.MaxItems != nil && int64(len(list)) > *s.MaxItems {
		errs = append(errs, field.TooMany(path, len(list), int(*s.MaxItems)))
	}
	if s.MinItems != nil && int64(len(list)) < *s.MinItems {
		errs = append(errs, field.Invalid(path, len(list), fmt.Sprintf("must have at least %d items", *s.MinItems)))
	}
	errs = append(errs, s.uniqueItems(list, path)...)
	if s.Items != nil {
		for i, item := range list {
			errs = append(errs, s.Items.validate(item, path.Index(i))...)
		}
	}
	return errs
}

// uniqueItems is x-kubernetes-list-type: a set's items, and a map's items'
// keys, are unique.
func (s *schema) uniqueItems(list []any, path *field.Path) field.ErrorList {
	if s.ListType != "set" && s.ListType != "map" {
		return nil
	}
	var errs field.ErrorList
	seen := make(map[string]bool, len(list))
	for i, item := range list {
		id := identity(item, s.ListType, s.ListMapKeys)
		if seen[id] {
			errs = append(errs, field.Duplicate(path.Index(i), duplicateValue(item, s.ListType, s.ListMapKeys)))
		}
		seen[id] = true
	}
	return errs
}

func identity(item any, listType string, keys []string) string {
	if listType == "map" {
		m, _ := item.(map[string]any)
		parts := make([]any, len(keys))
		for i, k := range keys {
			parts[i] = m[k]
		}
		item = parts
	}
	b, _ := json.Marshal(item)
	return string(b)
}

func duplicateValue(item any, listType string, keys []string) any {
	if listType != "map" {
		return item
	}
	m, _ := item.(map[string]any)
	out := make(map[string]any, len(keys))
	for _, k := range keys {
		out[k] = m[k]
	}
	return out
}

func (s *schema) validateString(v any, path *field.Path) field.ErrorList {
	str, ok := v.(string)
	if !ok {
		return field.ErrorList{field.TypeInvalid(path, v, "must be of type string")}
	}
	var errs field.ErrorList
	n := int64(utf8.RuneCountInString(str)) // the API server counts characters
	if s.MaxLength != nil && n > *s.MaxLength {
		errs = append(errs, field.TooLong(path, "", int(*s.MaxLength)))
	}
	if s.MinLength != nil && n < *s.MinLength {
		errs = append(errs, field.Invalid(path, str, fmt.Sprintf("should be at least %d chars long", *s.MinLength)))
	}
	if s.pattern != nil && !s.pattern.MatchString(str) {
		errs = append(errs, field.Invalid(path, str, fmt.Sprintf("should match '%s'", s.Pattern)))
	}
	if len(s.Enum) > 0 && !slices.ContainsFunc(s.Enum, func(e any) bool { return e == str }) {
		allowed := make([]string, len(s.Enum))
		for i, e := range s.Enum {
			allowed[i] = fmt.Sprint(e)
		}
		errs = append(errs, field.NotSupported(path, str, allowed))
	}
	return errs
}

func (s *schema) validateNumber(v any, path *field.Path) field.ErrorList {
	f, ok := v.(float64)
	if !ok {
		return field.ErrorList{field.TypeInvalid(path, v, "must be of type "+s.Type)}
	}
	if s.Type == "integer" && f != float64(int64(f)) {
		return field.ErrorList{field.TypeInvalid(path, v, "must be of type integer")}
	}
	var errs field.ErrorList
	if s.Minimum != nil && f < *s.Minimum {
		errs = append(errs, field.Invalid(path, v, fmt.Sprintf("should be greater than or equal to %s", trimFloat(*s.Minimum))))
	}
	if s.Maximum != nil && f > *s.Maximum {
		errs = append(errs, field.Invalid(path, v, fmt.Sprintf("should be less than or equal to %s", trimFloat(*s.Maximum))))
	}
	return errs
}

func trimFloat(f float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%f", f), "0"), ".")
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// The API reference is made from the CRDs controller-gen writes from the Go
// types and their markers (config/crd/bases): the schema the API server
// enforces, so the page says what the cluster accepts.

// crd is the part of a CustomResourceDefinition the page reads.
type crd struct {
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Kind       string   `json:"kind"`
			Plural     string   `json:"plural"`
			ShortNames []string `json:"shortNames"`
			Categories []string `json:"categories"`
		} `json:"names"`
		Scope    string `json:"scope"`
		Versions []struct {
			Name    string `json:"name"`
			Columns []struct {
				Name     string `json:"name"`
				JSONPath string `json:"jsonPath"`
				Type     string `json:"type"`
			} `json:"additionalPrinterColumns"`
			Schema struct {
				OpenAPIV3Schema *schema `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

// schema is an OpenAPI v3 schema node with Kubernetes' extensions.
type schema struct {
	Description string             `json:"description"`
	Type        string             `json:"type"`
	Format      string             `json:"format"`
	Pattern     string             `json:"pattern"`
	Enum        []any              `json:"enum"`
	Default     json.RawMessage    `json:"default"`
	Minimum     *float64           `json:"minimum"`
	Maximum     *float64           `json:"maximum"`
	MinLength   *int64             `json:"minLength"`
	MaxLength   *int64             `json:"maxLength"`
	MinItems    *int64             `json:"minItems"`
	MaxItems    *int64             `json:"maxItems"`
	Required    []string           `json:"required"`
	Properties  map[string]*schema `json:"properties"`
	Items       *schema            `json:"items"`
	ListType    string             `json:"x-kubernetes-list-type"`
	ListMapKeys []string           `json:"x-kubernetes-list-map-keys"`
	Rules       []celRule          `json:"x-kubernetes-validations"`
}

// celRule is a CEL validation rule of the schema.
type celRule struct {
	Rule      string `json:"rule"`
	Message   string `json:"message"`
	FieldPath string `json:"fieldPath"`
}

// apiPages are the reference pages of the two kinds.
func apiPages(root string) ([]page, error) {
	var pages []page
	for _, k := range []struct{ file, out string }{
		{"ratelimit.sluice.dev_ratelimitpolicies.yaml", "docs/reference/policy.md"},
		{"ratelimit.sluice.dev_ratelimitoverrides.yaml", "docs/reference/overrides.md"},
	} {
		path := filepath.Join("config", "crd", "bases", k.file)
		raw, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			return nil, err
		}
		var c crd
		if err := yaml.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		data, err := kindPage(&c, path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		pages = append(pages, page{k.out, data})
	}
	return pages, nil
}

// kindPage is one kind's reference: its names, its printer columns, then
// every object of its spec and status with a table of fields.
func kindPage(c *crd, source string) ([]byte, error) {
	if len(c.Spec.Versions) != 1 || c.Spec.Versions[0].Schema.OpenAPIV3Schema == nil {
		return nil, fmt.Errorf("want one version with a schema, got %d", len(c.Spec.Versions))
	}
	v := c.Spec.Versions[0]
	n := c.Spec.Names
	d := newDoc(code(source) + ", which controller-gen writes from the Go types in `api/v1alpha1` and their markers")
	d.p("# %s", n.Kind)
	d.p("%s Every field below is the schema the API server enforces: its type, bounds, defaults and validation rules, with each rule's message as `kubectl apply` prints it.", prose(v.Schema.OpenAPIV3Schema.Description))
	fmt.Fprintf(d, "- **API version:** %s\n- **Kind:** %s, %s\n- **Resource:** %s; short names %s; categories %s\n\n",
		code(c.Spec.Group+"/"+v.Name), code(n.Kind), strings.ToLower(c.Spec.Scope), code(n.Plural), joinCodes(n.ShortNames), joinCodes(n.Categories))
	if len(v.Columns) > 0 {
		d.p("`kubectl get %s` prints:", n.Plural)
		var rows [][]string
		for _, col := range v.Columns {
			rows = append(rows, []string{col.Name, code(col.JSONPath), col.Type})
		}
		d.table([]string{"column", "JSON path", "type"}, "---", rows)
	}
	top := v.Schema.OpenAPIV3Schema
	for _, part := range []struct{ name, title, note string }{
		{"spec", "Spec", ""},
		{"status", "Status", "Written by the controller; read it, do not set it."},
	} {
		s := top.Properties[part.name]
		if s == nil {
			continue
		}
		d.p("## %s", part.title)
		if part.note != "" {
			d.p("%s", part.note)
		}
		objectSections(d, part.name, s)
	}
	return d.Bytes(), nil
}

func joinCodes(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = code(n)
	}
	return strings.Join(out, ", ")
}

// objectSections writes the section of object s at path, then those of
// the objects its fields hold, depth first.
func objectSections(d *doc, path string, s *schema) {
	d.p("### `%s`", path)
	if s.Description != "" {
		d.p("%s", prose(s.Description))
	}
	names := sortedKeys(s.Properties)
	var rows [][]string
	for _, name := range names {
		f := s.Properties[name]
		var rules []string // the object's rules that name this field
		for _, r := range s.Rules {
			if at := strings.TrimPrefix(r.FieldPath, "."); at == name || strings.HasPrefix(at, name+".") {
				rules = append(rules, fmt.Sprintf("**Rule** (on %s, at %s): %s", code(path), code(at), text(r.Message)))
			}
		}
		rows = append(rows, fieldRow(path, name, f, slices.Contains(s.Required, name), rules))
	}
	d.table([]string{"field", "description"}, "--", rows)
	rulesList(d, "Rules on this object", s.Rules)
	for _, name := range names {
		if child, childPath := nested(path, name, s.Properties[name]); child != nil {
			objectSections(d, childPath, child)
		}
	}
}

// nested is the object a field holds, itself or as list items, and its
// path; nil for a field of scalars.
func nested(path, name string, f *schema) (*schema, string) {
	switch {
	case f.Type == "object" && len(f.Properties) > 0:
		return f, path + "." + name
	case f.Type == "array" && f.Items != nil && f.Items.Type == "object" && len(f.Items.Properties) > 0:
		return f.Items, path + "." + name + "[]"
	}
	return nil, ""
}

func sortedKeys(m map[string]*schema) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// fieldRow is one field's row: its name (a link to its object's section),
// type and whether it is required; then its description, default,
// validation and the rules of its object that name it. Two columns, so that the description has the page's width.
func fieldRow(path, field string, f *schema, required bool, rules []string) []string {
	cell := name(field)
	if _, childPath := nested(path, field, f); childPath != "" {
		cell = fmt.Sprintf("[%s](#%s)", cell, anchor(childPath))
	}
	req := "optional"
	if required {
		req = "**required**"
	}
	desc := prose(f.Description)
	var facts []string
	if len(f.Default) > 0 {
		facts = append(facts, "**Default:** "+code(defaultText(f.Default)))
	}
	for _, v := range validation(f) {
		facts = append(facts, "**"+upperFirst(v.what)+":** "+v.text)
	}
	facts = append(facts, rules...)
	if len(facts) > 0 {
		desc += "<br><br>" + strings.Join(facts, "<br>")
	}
	return []string{cell + "<br>" + typeName(f) + ", " + req, desc}
}

// defaultText is a default as a person writes it in YAML: a string
// without its quotes.
func defaultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// typeName is a field's type as the page shows it.
func typeName(f *schema) string {
	switch {
	case f.Type == "array" && f.Items != nil:
		return "[]" + typeName(f.Items)
	case f.Format != "":
		return f.Type + " (" + f.Format + ")"
	}
	return f.Type
}

// fact is one thing the schema says of a field: what, and its text.
type fact struct{ what, text string }

// validation lists what the schema bounds in a field: bounds, lengths,
// pattern, values, list semantics and the field's own CEL rules.
func validation(f *schema) []fact {
	var v []fact
	add := func(what, text string) { v = append(v, fact{what, text}) }
	if f.Minimum != nil || f.Maximum != nil {
		add("range", bounds("", floatPtr(f.Minimum), floatPtr(f.Maximum)))
	}
	if f.MinLength != nil || f.MaxLength != nil {
		add("length", bounds("", intPtr(f.MinLength), intPtr(f.MaxLength)))
	}
	if f.MinItems != nil || f.MaxItems != nil {
		add("items", bounds("", intPtr(f.MinItems), intPtr(f.MaxItems)))
	}
	if f.Pattern != "" {
		add("pattern", code(f.Pattern))
	}
	if len(f.Enum) > 0 {
		vals := make([]string, len(f.Enum))
		for i, e := range f.Enum {
			vals[i] = code(fmt.Sprint(e))
		}
		add("one of", strings.Join(vals, ", "))
	}
	if f.ListType != "" {
		s := code(f.ListType)
		if len(f.ListMapKeys) > 0 {
			s += ", keyed by " + joinCodes(f.ListMapKeys)
		}
		add("list type", s)
	}
	if f.Type == "array" && f.Items != nil && f.Items.Type != "object" {
		for _, item := range validation(f.Items) {
			add("each item's "+item.what, item.text)
		}
	}
	for _, r := range f.Rules {
		add("rule", text(r.Message))
	}
	return v
}

func floatPtr(p *float64) string {
	if p == nil {
		return ""
	}
	if *p == float64(int64(*p)) {
		return grouped(int64(*p))
	}
	return strconv.FormatFloat(*p, 'f', -1, 64)
}

func intPtr(p *int64) string {
	if p == nil {
		return ""
	}
	return grouped(*p)
}

// grouped writes n with its thousands grouped (1,000,000).
func grouped(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}

// bounds says "1..8", "≥ 1" or "≤ 8", prefixed with what is bounded.
func bounds(what, lo, hi string) string {
	switch {
	case lo != "" && hi != "":
		return what + lo + ".." + hi
	case lo != "":
		return what + "≥ " + lo
	}
	return what + "≤ " + hi
}

// rulesList writes an object's CEL rules: each message (what a person
// reads when it refuses), the field it names, and the rule itself.
func rulesList(d *doc, title string, rules []celRule) {
	if len(rules) == 0 {
		return
	}
	d.p("%s (CEL; the API server refuses an object that breaks one with its message):", title)
	for _, r := range rules {
		at := ""
		if r.FieldPath != "" {
			at = " (at " + code(strings.TrimPrefix(r.FieldPath, ".")) + ")"
		}
		fmt.Fprintf(d, "- **%s**%s\n\n    ```\n    %s\n    ```\n\n", text(strings.TrimSpace(r.Message)), at, strings.Join(strings.Fields(r.Rule), " "))
	}
}

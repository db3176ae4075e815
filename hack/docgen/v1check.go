package main

import (
	_ "embed"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"text/template"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// The /v1/check page is a template of prose whose tables are filled from
// the Go types of the request and answer bodies (webhook/), read with
// go/parser so that every field, its JSON name and its doc comment come
// from the code, and from the check's reasons (internal/check).

//go:embed templates/v1-check.md
var v1CheckTemplate string

// jsonField is one field of a JSON body.
type jsonField struct {
	name, typ, doc string
	optional       bool
}

// structFields reads the fields of the named struct types in the Go files.
func structFields(files ...*ast.File) map[string][]jsonField {
	types := map[string][]jsonField{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || !ts.Name.IsExported() {
				return true
			}
			if st, ok := ts.Type.(*ast.StructType); ok {
				types[ts.Name.Name] = fieldsOf(st)
			}
			return false
		})
	}
	return types
}

func fieldsOf(st *ast.StructType) []jsonField {
	var out []jsonField
	for _, f := range st.Fields.List {
		if f.Tag == nil || len(f.Names) == 0 {
			continue
		}
		tag, _ := strconv.Unquote(f.Tag.Value)
		name, opts, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
		_, pointer := f.Type.(*ast.StarExpr)
		out = append(out, jsonField{
			name: name, typ: jsonType(f.Type), doc: fieldDoc(f),
			// A pointer tells a field that is absent from one that is 0;
			// its doc says when it is required all the same.
			optional: (strings.Contains(opts, "omitempty") || pointer) && !strings.HasSuffix(fieldDoc(f), "Required."),
		})
	}
	return out
}

// fieldDoc is a field's doc comment, without the Go name it starts with.
func fieldDoc(f *ast.Field) string {
	doc := strings.TrimSpace(f.Doc.Text())
	name := f.Names[0].Name
	for _, sep := range []string{" is ", " are ", ", ", ": ", " "} {
		if rest, ok := strings.CutPrefix(doc, name+sep); ok {
			return upperFirst(strings.TrimSpace(rest))
		}
	}
	return doc
}

// typeSections are the template's sections of the bodies' object types.
var typeSections = map[string]string{"OriginalRequest": "request", "PolicyReport": "policies", "LimitReport": "policieslimits", "UsageReport": "settling-a-token-budget"}

// jsonType is the JSON type of a Go type expression.
func jsonType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return jsonType(t.X)
	case *ast.ArrayType:
		return "array of " + jsonType(t.Elt)
	case *ast.MapType:
		return "object of " + jsonType(t.Value) + "s"
	case *ast.Ident:
		switch t.Name {
		case "string":
			return "string"
		case "bool":
			return "boolean"
		case "int", "int64", "int32":
			return "integer"
		}
		if section, ok := typeSections[t.Name]; ok {
			return "[object](#" + section + ")"
		}
		return "object"
	}
	return fmt.Sprintf("%T", e)
}

// reasons reads the Reason constants of internal/check and their docs.
func reasons(f *ast.File) [][]string {
	var rows [][]string
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Reason" || len(vs.Values) != 1 {
				continue
			}
			lit, ok := vs.Values[0].(*ast.BasicLit)
			if !ok {
				continue
			}
			v, _ := strconv.Unquote(lit.Value)
			doc := strings.TrimSpace(vs.Doc.Text())
			if _, rest, ok := strings.Cut(doc, ": "); ok && strings.HasPrefix(doc, vs.Names[0].Name) {
				doc = upperFirst(rest)
			}
			rows = append(rows, []string{name(v), prose(doc)})
		}
	}
	return rows
}

func parseFiles(root string, paths ...string) ([]*ast.File, error) {
	fset := token.NewFileSet()
	var files []*ast.File
	for _, p := range paths {
		f, err := parser.ParseFile(fset, filepath.Join(root, p), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// v1CheckPages is docs/reference/v1-check.md.
func v1CheckPages(root string) ([]page, error) {
	files, err := parseFiles(root, "webhook/api.go", "webhook/release.go", "internal/check/outcome.go")
	if err != nil {
		return nil, err
	}
	types := structFields(files[0], files[1])
	var missing []string
	funcs := template.FuncMap{
		"table": func(name string) string {
			fields, ok := types[name]
			if !ok {
				missing = append(missing, name)
				return ""
			}
			return fieldTable(fields, !strings.HasSuffix(name, "Request"))
		},
		"reasons": func() string {
			var d doc
			d.table([]string{"reason", "meaning"}, "--", reasons(files[2]))
			return strings.TrimSpace(d.String())
		},
	}
	t, err := template.New("v1-check").Funcs(funcs).Parse(v1CheckTemplate)
	if err != nil {
		return nil, err
	}
	d := newDoc("`hack/docgen/templates/v1-check.md` and the Go types in `webhook/api.go` and `webhook/release.go`")
	values := map[string]any{"MaxBody": "1 MiB (1,048,576)", "MaxCost": ratelimit.MaxCount}
	if err := t.Execute(d, values); err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("types not found in webhook/: %s", strings.Join(missing, ", "))
	}
	return []page{{"docs/reference/v1-check.md", d.Bytes()}}, nil
}

// fieldTable is a body's fields; an answer's say whether they are always
// present or left out when empty.
func fieldTable(fields []jsonField, answer bool) string {
	var d doc
	rows := make([][]string, len(fields))
	for i, f := range fields {
		rows[i] = []string{name(f.name), f.typ, prose(f.doc)}
		if answer {
			present := "always"
			if f.optional {
				present = "when set"
			}
			rows[i] = []string{name(f.name), f.typ, present, prose(f.doc)}
		}
	}
	if answer {
		d.table([]string{"field", "type", "present", "description"}, "----", rows)
	} else {
		d.table([]string{"field", "type", "description"}, "---", rows)
	}
	return strings.TrimSpace(d.String())
}

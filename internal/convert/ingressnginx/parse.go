package ingressnginx

import (
	"bytes"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/internal/convert"
)

// File is one input: YAML or JSON holding Ingress manifests, several
// documents, or a List (as `kubectl get ingress -A -o yaml` writes); Name
// is how reports name it ("-" for standard input).
type File = convert.File

// ingress is what the conversion reads of one Ingress manifest.
type ingress struct {
	pos       Pos // the line of metadata.name, or of the object
	namespace string
	name      string
	// annotations by full name (prefix included).
	annotations map[string]annotation
	rules       []rule
	// defaultBackend: spec.defaultBackend (spec.backend in v1beta1) is set.
	defaultBackend bool
}

// id names the Ingress in reports: namespace/name, or name alone.
func (ing *ingress) id() string {
	if ing.namespace == "" {
		return ing.name
	}
	return ing.namespace + "/" + ing.name
}

type annotation struct {
	value string
	pos   Pos
	// notString: the value is written as a YAML number or boolean, which
	// Kubernetes refuses (annotations are strings).
	notString bool
}

// rule is one of spec.rules.
type rule struct {
	host string
	pos  Pos
	// http: the rule has an http block; a rule without one still gives
	// ingress-nginx a server for its host.
	http  bool
	paths []path
}

type path struct {
	path     string
	pathType string // "" when not written (v1beta1)
	pos      Pos
}

// maxItems bounds the objects, rules and paths read from one document,
// aliases expanded, so that a small file cannot make the converter walk
// an exponential tree.
const maxItems = 100_000

var lineInError = regexp.MustCompile(`line (\d+)`)

// parseFile reads every Ingress of f. Documents of other kinds are
// skipped; a document that is not YAML ends the file with an error.
func parseFile(f File, rs *reports) []*ingress {
	p := &parser{file: f.Name, rs: rs, budget: maxItems}
	dec := yaml.NewDecoder(bytes.NewReader(f.Data))
	var out []*ingress
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			pos := Pos{File: f.Name}
			if m := lineInError.FindStringSubmatch(err.Error()); m != nil {
				pos.Line, _ = strconv.Atoi(m[1])
			}
			rs.add(Report{Pos: pos, Severity: Error, Message: "cannot read the file: " + err.Error()})
			return out
		}
		if len(doc.Content) == 0 {
			continue
		}
		out = p.object(deref(doc.Content[0]), out)
	}
}

type parser struct {
	file   string
	rs     *reports
	budget int
}

func (p *parser) pos(n *yaml.Node) Pos { return Pos{File: p.file, Line: n.Line} }

// spend takes n items from the document budget; false when it is spent
// (reported once).
func (p *parser) spend(n *yaml.Node) bool {
	p.budget--
	if p.budget == 0 {
		p.rs.add(Report{Pos: p.pos(n), Severity: Error, Message: "more than 100000 objects, rules and paths in this file (aliases expanded): the rest is not read"})
	}
	return p.budget > 0
}

// object reads one Kubernetes object: an Ingress, or a list of objects.
func (p *parser) object(n *yaml.Node, out []*ingress) []*ingress {
	if n.Kind != yaml.MappingNode || !p.spend(n) {
		return out
	}
	kind := scalar(get(n, "kind"))
	switch {
	case kind == "Ingress":
		if ing := p.ingress(n); ing != nil {
			out = append(out, ing)
		}
	case strings.HasSuffix(kind, "List"):
		if items := get(n, "items"); items != nil && items.Kind == yaml.SequenceNode {
			for _, item := range items.Content {
				out = p.object(deref(item), out)
			}
		}
	}
	return out
}

func (p *parser) ingress(n *yaml.Node) *ingress {
	ing := &ingress{pos: p.pos(n), annotations: map[string]annotation{}}
	meta := get(n, "metadata")
	if nameNode := get(meta, "name"); nameNode != nil {
		ing.name = scalar(nameNode)
		ing.pos = p.pos(nameNode)
	}
	ing.namespace = scalar(get(meta, "namespace"))
	if ing.name == "" {
		p.rs.add(Report{Pos: ing.pos, Severity: Error, Message: "an Ingress without metadata.name: skipped"})
		return nil
	}
	if anns := get(meta, "annotations"); anns != nil && anns.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(anns.Content); i += 2 {
			k, v := anns.Content[i], deref(anns.Content[i+1])
			ing.annotations[k.Value] = annotation{
				value:     v.Value,
				pos:       p.pos(k),
				notString: v.Kind == yaml.ScalarNode && v.Tag != "!!str" && v.Tag != "!!null",
			}
		}
	}
	spec := get(n, "spec")
	ing.defaultBackend = get(spec, "defaultBackend") != nil || get(spec, "backend") != nil
	if rules := get(spec, "rules"); rules != nil && rules.Kind == yaml.SequenceNode {
		for _, rn := range rules.Content {
			rn = deref(rn)
			if !p.spend(rn) {
				return ing
			}
			r := rule{pos: p.pos(rn)}
			if h := get(rn, "host"); h != nil {
				r.host = scalar(h)
				r.pos = p.pos(h)
			}
			if http := get(rn, "http"); http != nil {
				r.http = true
				if paths := get(http, "paths"); paths != nil && paths.Kind == yaml.SequenceNode {
					for _, pn := range paths.Content {
						pn = deref(pn)
						if !p.spend(pn) {
							return ing
						}
						pt := path{pos: p.pos(pn)}
						if v := get(pn, "path"); v != nil {
							pt.path = scalar(v)
							pt.pos = p.pos(v)
						}
						pt.pathType = scalar(get(pn, "pathType"))
						r.paths = append(r.paths, pt)
					}
				}
			}
			ing.rules = append(ing.rules, r)
		}
	}
	return ing
}

// get is the value of key in mapping m; nil when m is not a mapping or
// has no such key (the last one wins, as with Kubernetes' decoder).
func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil {
		return nil
	}
	m = deref(m)
	if m.Kind != yaml.MappingNode {
		return nil
	}
	var v *yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			v = deref(m.Content[i+1])
		}
	}
	return v
}

// scalar is a scalar node's text; "" for anything else.
func scalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return ""
	}
	return n.Value
}

func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

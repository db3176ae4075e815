package ingressnginx

import (
	"bytes"
	"errors"
	"io"
	"iter"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/internal/convert"
)

// ingress is what the conversion reads of one Ingress manifest.
type ingress struct {
	pos       convert.Pos // the line of metadata.name, or of the object
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
	pos   convert.Pos
	// notString: the value is written as a YAML number or boolean, which
	// Kubernetes refuses (annotations are strings).
	notString bool
}

// rule is one of spec.rules.
type rule struct {
	host string
	pos  convert.Pos
	// http: the rule has an http block; a rule without one still gives
	// ingress-nginx a server for its host.
	http  bool
	paths []path
}

type path struct {
	path     string
	pathType string // "" when not written (v1beta1)
	pos      convert.Pos
}

// maxItems bounds the objects, rules and paths read from one document,
// aliases expanded, so that a small file cannot make the converter walk
// an exponential tree.
const maxItems = 100_000

// parseFile reads every Ingress of f. Documents of other kinds are
// skipped; a document that is not YAML ends the file with an error.
func parseFile(f convert.File, rs *reports) []*ingress {
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
			rs.add(convert.DecodeErrorPos(f.Name, err), convert.Error, "cannot read the file: %v", err)
			return out
		}
		if len(doc.Content) == 0 {
			continue
		}
		out = p.object(convert.Deref(doc.Content[0]), out)
	}
}

type parser struct {
	file   string
	rs     *reports
	budget int
}

func (p *parser) pos(n *yaml.Node) convert.Pos { return convert.Pos{File: p.file, Line: n.Line} }

// spend takes n items from the document budget; false when it is spent
// (reported once).
func (p *parser) spend(n *yaml.Node) bool {
	p.budget--
	if p.budget == 0 {
		p.rs.add(p.pos(n), convert.Error, "more than 100000 objects, rules and paths in this file (aliases expanded): the rest is not read")
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
		for item := range sequence(get(n, "items")) {
			out = p.object(item, out)
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
		p.rs.add(ing.pos, convert.Error, "an Ingress without metadata.name: skipped")
		return nil
	}
	if anns := get(meta, "annotations"); anns != nil && anns.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(anns.Content); i += 2 {
			k, v := anns.Content[i], convert.Deref(anns.Content[i+1])
			ing.annotations[k.Value] = annotation{
				value:     v.Value,
				pos:       p.pos(k),
				notString: v.Kind == yaml.ScalarNode && v.Tag != "!!str" && v.Tag != "!!null",
			}
		}
	}
	spec := get(n, "spec")
	ing.defaultBackend = get(spec, "defaultBackend") != nil || get(spec, "backend") != nil
	ing.rules = p.rules(get(spec, "rules"))
	return ing
}

// rules reads spec.rules, up to the rule during which the budget runs out.
func (p *parser) rules(n *yaml.Node) []rule {
	var rules []rule
	for rn := range sequence(n) {
		if !p.spend(rn) {
			return rules
		}
		r := rule{pos: p.pos(rn)}
		if h := get(rn, "host"); h != nil {
			r.host = scalar(h)
			r.pos = p.pos(h)
		}
		if http := get(rn, "http"); http != nil {
			r.http = true
			var complete bool
			if r.paths, complete = p.paths(get(http, "paths")); !complete {
				return rules
			}
		}
		rules = append(rules, r)
	}
	return rules
}

// paths reads a rule's http.paths; complete is false when the budget ran
// out.
func (p *parser) paths(n *yaml.Node) (paths []path, complete bool) {
	for pn := range sequence(n) {
		if !p.spend(pn) {
			return nil, false
		}
		pt := path{pos: p.pos(pn)}
		if v := get(pn, "path"); v != nil {
			pt.path = scalar(v)
			pt.pos = p.pos(v)
		}
		pt.pathType = scalar(get(pn, "pathType"))
		paths = append(paths, pt)
	}
	return paths, true
}

// sequence yields the items of a sequence node, aliases resolved; none
// for any other node.
func sequence(n *yaml.Node) iter.Seq[*yaml.Node] {
	return func(yield func(*yaml.Node) bool) {
		if n == nil || n.Kind != yaml.SequenceNode {
			return
		}
		for _, item := range n.Content {
			if !yield(convert.Deref(item)) {
				return
			}
		}
	}
}

// get is the value of key in mapping m; nil when m is not a mapping or
// has no such key (the last one wins, as with Kubernetes' decoder).
func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil {
		return nil
	}
	m = convert.Deref(m)
	if m.Kind != yaml.MappingNode {
		return nil
	}
	var v *yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			v = convert.Deref(m.Content[i+1])
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

package envoyratelimit

import (
	"bytes"
	"errors"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/internal/convert"
)

// config is one parsed file.
type config struct {
	file      string
	index     int // the file's place among the inputs
	domain    string
	domainPos convert.Pos
	nodes     []*node
}

// node is one descriptor of the configuration.
type node struct {
	pos       convert.Pos
	file      int // index of the file it came from (merged domains)
	key       string
	value     string // "" is no value, as for envoyproxy/ratelimit
	rateLimit *rateLimit
	children  []*node

	shadow, quota, detailed, valueToMetric, share setting
}

type setting struct {
	on  bool
	pos convert.Pos
}

// rateLimit is a node's rate_limit block.
type rateLimit struct {
	pos             convert.Pos
	unit            unit
	requestsPerUnit uint32
	rpuPos          convert.Pos
	unlimited       bool
	name            string
	replaces        []replace
	replacesPos     convert.Pos
}

type replace struct {
	name string
	pos  convert.Pos
}

// unit is a rate_limit unit with its window.
type unit struct {
	name    string // SECOND, ..., as the enum names it
	seconds int64
	window  string // the Sluice duration
}

// units are envoyproxy/ratelimit's (the RLS v3 enum) with the dividers of
// utils.UnitToDivider: a month is 30 days and a year 365.
var units = map[string]unit{
	"SECOND": {"SECOND", 1, "1s"},
	"MINUTE": {"MINUTE", 60, "1m"},
	"HOUR":   {"HOUR", 3600, "1h"},
	"DAY":    {"DAY", 86400, "24h"},
	"WEEK":   {"WEEK", 7 * 86400, "168h"},
	"MONTH":  {"MONTH", 30 * 86400, "720h"},
	"YEAR":   {"YEAR", 365 * 86400, "8760h"},
}

// validKeys is envoyproxy/ratelimit's one flat set of mapping keys allowed
// anywhere in a file (config_impl.go validKeys).
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true,
	"unit": true, "requests_per_unit": true, "unlimited": true, "shadow_mode": true,
	"quota_mode": true, "name": true, "replaces": true, "detailed_metric": true,
	"value_to_metric": true, "share_threshold": true,
}

// The fields each YAML struct of envoyproxy/ratelimit has; other valid keys
// in its place are ignored there.
var (
	rootFields       = map[string]bool{"domain": true, "descriptors": true}
	descriptorFields = map[string]bool{"key": true, "value": true, "rate_limit": true, "descriptors": true,
		"shadow_mode": true, "quota_mode": true, "detailed_metric": true, "value_to_metric": true, "share_threshold": true}
	rateLimitFields = map[string]bool{"requests_per_unit": true, "unit": true, "unlimited": true, "name": true, "replaces": true}
	replacesFields  = map[string]bool{"name": true}
)

// parser reads one file as envoyproxy/ratelimit does (gopkg.in/yaml.v2,
// YAML 1.1), keeping line numbers.
type parser struct {
	file   string
	index  int
	rs     *convert.Reports
	failed bool
	// keyLine is the line of the key of each value fields returned.
	keyLine map[*yaml.Node]int
	// budget is how many more nodes validate may visit, aliases expanded:
	// yaml.v2 refuses a document that aliasing makes much larger than
	// written, and so does the converter, before walking it.
	budget int
}

func (p *parser) pos(n *yaml.Node) convert.Pos { return convert.Pos{File: p.file, Line: n.Line} }

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	pos := convert.Pos{File: p.file}
	if n != nil {
		pos = p.pos(n)
	}
	p.rs.Add(pos, convert.Error, format, args...)
	p.failed = true
}

// parseFile parses f; nil when envoyproxy/ratelimit would refuse it (the
// reasons are in rs).
func parseFile(f convert.File, index int, rs *convert.Reports) *config {
	p := &parser{file: f.Name, index: index, rs: rs, keyLine: map[*yaml.Node]int{}}
	dec := yaml.NewDecoder(bytes.NewReader(f.Data))
	var doc yaml.Node
	err := dec.Decode(&doc)
	switch {
	case errors.Is(err, io.EOF):
		rs.Add(convert.Pos{File: f.Name, Line: 1}, convert.Error, "config file cannot have empty domain (the file is empty)")
		return nil
	case err != nil:
		rs.Add(convert.DecodeErrorPos(f.Name, err), convert.Error, "error loading config file: %v", err)
		return nil
	}
	// yaml.v2's Unmarshal reads the first document only.
	for {
		var more yaml.Node
		if dec.Decode(&more) != nil {
			break
		}
		rs.Add(p.pos(&more), convert.Note, "envoyproxy/ratelimit reads only a file's first YAML document; this one is ignored, here too")
	}

	root := convert.Deref(doc.Content[0])
	// envoyproxy/ratelimit validates the keys, then decodes, and stops at
	// the first problem; the converter goes on to report them all.
	p.budget = max(10*countNodes(root), 100_000)
	p.validate(root, true)
	if p.budget < 0 {
		return nil
	}
	c := &config{file: f.Name, index: index}
	if root.Kind == yaml.MappingNode {
		fields := p.fields(root, rootFields)
		if n := fields["domain"]; n != nil {
			c.domain = p.str(n)
			c.domainPos = p.pos(n)
		}
		if n := fields["descriptors"]; n != nil {
			c.nodes = p.descriptors(n)
		}
	}
	if c.domain == "" && !p.failed {
		p.errorf(root, "config file cannot have empty domain")
	}
	if p.failed {
		return nil
	}
	return c
}

// countNodes counts the nodes as written, aliases unexpanded.
func countNodes(n *yaml.Node) int {
	count := 1
	for _, c := range n.Content {
		count += countNodes(c)
	}
	return count
}

// validate is envoyproxy/ratelimit's validateYamlKeys: mapping keys are
// strings from validKeys, lists hold mappings only, and scalars are
// strings, integers, booleans or null.
func (p *parser) validate(n *yaml.Node, root bool) {
	n = convert.Deref(n)
	if p.budget--; p.budget < 0 {
		if p.budget == -1 {
			p.errorf(n, "error loading config file: yaml: document contains excessive aliasing")
		}
		return
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := convert.Deref(n.Content[i]), n.Content[i+1]
			if k.Kind != yaml.ScalarNode || resolve(k).kind != kindString {
				p.errorf(k, "config error, key is not of type string: %v", k.Value)
				continue
			}
			if k.Value == "<<" {
				p.errorf(k, "config error, merge keys (<<) are not supported by the converter")
				continue
			}
			if !validKeys[k.Value] {
				p.errorf(k, "config error, unknown key '%s'", k.Value)
				continue
			}
			p.validate(v, false)
		}
	case yaml.SequenceNode:
		if root {
			p.errorf(n, "error loading config file: the file must be a mapping of domain and descriptors, not a list")
			return
		}
		for _, e := range n.Content {
			e = convert.Deref(e)
			if e.Kind != yaml.MappingNode {
				p.errorf(e, "config error, yaml file contains list of type other than map: %v", e.Value)
				continue
			}
			p.validate(e, false)
		}
	case yaml.ScalarNode:
		r := resolve(n)
		if root && r.kind != kindNull {
			p.errorf(n, "error loading config file: the file must be a mapping of domain and descriptors")
			return
		}
		if r.kind == kindFloat || r.kind == kindBigInt {
			p.errorf(n, "error checking config: %s is not a string, integer or boolean", n.Value)
		}
	}
}

// fields returns a mapping's values by key (the last of a repeated key, as
// yaml.v2 decodes), noting repeated keys and keys the struct in this place
// does not have.
func (p *parser) fields(m *yaml.Node, known map[string]bool) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := convert.Deref(m.Content[i]), convert.Deref(m.Content[i+1])
		if line, dup := seen[k.Value]; dup {
			p.rs.Add(p.pos(k), convert.Note, "'%s' repeats line %d; envoyproxy/ratelimit (YAML 1.1) takes this last one, and so does the conversion", k.Value, line)
		}
		seen[k.Value] = k.Line
		if !known[k.Value] {
			if !validKeys[k.Value] {
				continue // validate reported it
			}
			p.rs.Add(p.pos(k), convert.Note, "'%s' means nothing here; envoyproxy/ratelimit ignores it", k.Value)
			continue
		}
		out[k.Value] = v
		p.keyLine[v] = k.Line
	}
	return out
}

// keyPos is the position of the key whose value is n.
func (p *parser) keyPos(n *yaml.Node) convert.Pos {
	if line, ok := p.keyLine[n]; ok {
		return convert.Pos{File: p.file, Line: line}
	}
	return p.pos(n)
}

func (p *parser) descriptors(n *yaml.Node) []*node {
	items, ok := p.list(n)
	if !ok {
		return nil
	}
	var out []*node
	for _, item := range items {
		if item = convert.Deref(item); item.Kind == yaml.MappingNode { // validate reported the rest
			out = append(out, p.descriptor(item))
		}
	}
	return out
}

func (p *parser) descriptor(m *yaml.Node) *node {
	d := &node{pos: p.pos(m), file: p.index}
	f := p.fields(m, descriptorFields)
	if n := f["key"]; n != nil {
		d.key = p.str(n)
	}
	if n := f["value"]; n != nil {
		d.value = p.str(n)
	}
	d.shadow = p.flag(f["shadow_mode"])
	d.quota = p.flag(f["quota_mode"])
	d.detailed = p.flag(f["detailed_metric"])
	d.valueToMetric = p.flag(f["value_to_metric"])
	d.share = p.flag(f["share_threshold"])
	if n := f["rate_limit"]; n != nil {
		d.rateLimit = p.rateLimit(n)
	}
	if n := f["descriptors"]; n != nil {
		d.children = p.descriptors(n)
	}

	// loadDescriptors' checks, in its order.
	if d.key == "" {
		p.errorf(m, "descriptor has empty key")
	}
	if rl := d.rateLimit; rl != nil {
		for _, r := range rl.replaces {
			switch r.name {
			case "":
				p.rs.Add(r.pos, convert.Error, "should not have an empty replaces entry")
				p.failed = true
			case rl.name:
				p.rs.Add(r.pos, convert.Error, "replaces should not contain name of same descriptor")
				p.failed = true
			}
		}
	}
	if d.share.on && !strings.HasSuffix(d.mapKey(), "*") {
		p.rs.Add(d.share.pos, convert.Error, "share_threshold can only be used with wildcard values (ending with '*'), but found key '%s'", d.mapKey())
		p.failed = true
	}
	return d
}

func (p *parser) rateLimit(n *yaml.Node) *rateLimit {
	m, ok := p.mapping(n)
	if !ok || m == nil {
		return nil // rate_limit: (null) is no rate limit, as in yaml.v2
	}
	rl := &rateLimit{pos: p.keyPos(n)}
	f := p.fields(m, rateLimitFields)
	var unitName string
	unitPos := rl.pos
	if v := f["unit"]; v != nil {
		unitName = p.str(v)
		unitPos = p.pos(v)
	}
	if v := f["requests_per_unit"]; v != nil {
		rl.requestsPerUnit = p.uint32(v)
		rl.rpuPos = p.pos(v)
	} else {
		rl.rpuPos = rl.pos
	}
	rl.unlimited = p.flag(f["unlimited"]).on
	if v := f["name"]; v != nil {
		rl.name = p.str(v)
	}
	if v := f["replaces"]; v != nil {
		rl.replacesPos = p.pos(v)
		items, _ := p.list(v)
		for _, item := range items {
			if item = convert.Deref(item); item.Kind != yaml.MappingNode {
				continue // validate reported it
			}
			r := replace{pos: p.pos(item)}
			if nv := p.fields(item, replacesFields)["name"]; nv != nil {
				r.name = p.str(nv)
			}
			rl.replaces = append(rl.replaces, r)
		}
	}
	u, valid := units[strings.ToUpper(unitName)]
	switch {
	case rl.unlimited && valid:
		p.rs.Add(unitPos, convert.Error, "should not specify rate limit unit when unlimited")
		p.failed = true
	case !rl.unlimited && !valid:
		p.rs.Add(unitPos, convert.Error, "invalid rate limit unit '%s' (SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR)", unitName)
		p.failed = true
	}
	rl.unit = u
	return rl
}

// mapKey is the node's key in its parent's map: "key_value", or "key".
func (d *node) mapKey() string {
	if d.value == "" {
		return d.key
	}
	return d.key + "_" + d.value
}

// The typed reads below follow yaml.v2's decoding into envoyproxy/
// ratelimit's structs: a scalar of any kind reads as a string, booleans
// and integers must be what they say, and null is the zero value.

func (p *parser) str(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		p.errorf(n, "error loading config file: cannot unmarshal %s into string", kindName(n))
		return ""
	}
	if resolve(n).kind == kindNull {
		return ""
	}
	return n.Value
}

func (p *parser) flag(n *yaml.Node) setting {
	if n == nil {
		return setting{}
	}
	r := resolve(n)
	switch {
	case n.Kind == yaml.ScalarNode && r.kind == kindBool:
		return setting{on: r.b, pos: p.pos(n)}
	case n.Kind == yaml.ScalarNode && r.kind == kindNull:
		return setting{pos: p.pos(n)}
	}
	p.errorf(n, "error loading config file: cannot unmarshal %s `%s` into bool", kindName(n), n.Value)
	return setting{}
}

func (p *parser) uint32(n *yaml.Node) uint32 {
	r := resolve(n)
	switch {
	case n.Kind == yaml.ScalarNode && r.kind == kindNull:
		return 0
	case n.Kind == yaml.ScalarNode && r.kind == kindInt && r.i >= 0 && r.i <= math.MaxUint32:
		return uint32(r.i)
	}
	p.errorf(n, "error loading config file: cannot unmarshal %s `%s` into uint32", kindName(n), n.Value)
	return 0
}

func (p *parser) list(n *yaml.Node) ([]*yaml.Node, bool) {
	switch {
	case n.Kind == yaml.SequenceNode:
		return n.Content, true
	case n.Kind == yaml.ScalarNode && resolve(n).kind == kindNull:
		return nil, true
	}
	p.errorf(n, "error loading config file: cannot unmarshal %s into a list", kindName(n))
	return nil, false
}

func (p *parser) mapping(n *yaml.Node) (*yaml.Node, bool) {
	switch {
	case n.Kind == yaml.MappingNode:
		return n, true
	case n.Kind == yaml.ScalarNode && resolve(n).kind == kindNull:
		return nil, true
	}
	p.errorf(n, "error loading config file: cannot unmarshal %s into a mapping", kindName(n))
	return nil, false
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "!!map"
	case yaml.SequenceNode:
		return "!!seq"
	}
	switch resolve(n).kind {
	case kindNull:
		return "!!null"
	case kindBool:
		return "!!bool"
	case kindInt, kindBigInt:
		return "!!int"
	case kindFloat:
		return "!!float"
	}
	return "!!str"
}

type scalarKind int

const (
	kindString scalarKind = iota
	kindNull
	kindBool
	kindInt
	kindBigInt // an integer beyond int64
	kindFloat
)

type resolved struct {
	kind scalarKind
	b    bool
	i    int64
}

// yaml11Bools are the plain scalars yaml.v2 reads as booleans.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"true": true, "True": true, "TRUE": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
	"false": false, "False": false, "FALSE": false,
}

var yaml11Float = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// resolve reads a scalar as yaml.v2 does (YAML 1.1 plain scalars).
func resolve(n *yaml.Node) resolved {
	if n.Kind != yaml.ScalarNode {
		return resolved{kind: kindString}
	}
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return resolved{kind: kindString}
	}
	if n.Style&yaml.TaggedStyle != 0 {
		switch n.ShortTag() {
		case "!!str", "!!binary", "!!timestamp":
			return resolved{kind: kindString}
		case "!!null":
			return resolved{kind: kindNull}
		}
	}
	v := n.Value
	switch v {
	case "", "~", "null", "Null", "NULL":
		return resolved{kind: kindNull}
	case ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", ".nan", ".NaN", ".NAN":
		return resolved{kind: kindFloat}
	}
	if b, ok := yaml11Bools[v]; ok {
		return resolved{kind: kindBool, b: b}
	}
	plain := strings.ReplaceAll(v, "_", "")
	if i, err := strconv.ParseInt(plain, 0, 64); err == nil {
		return resolved{kind: kindInt, i: i}
	}
	if _, err := strconv.ParseUint(plain, 0, 64); err == nil {
		return resolved{kind: kindBigInt}
	}
	if yaml11Float.MatchString(plain) {
		return resolved{kind: kindFloat}
	}
	return resolved{kind: kindString}
}

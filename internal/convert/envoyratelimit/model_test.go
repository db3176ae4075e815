package envoyratelimit

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/convert"
	"github.com/sluice-dev/sluice/internal/policy"
)

// envoyTree is envoyproxy/ratelimit's loaded configuration for one domain
// (config_impl.go rateLimitDescriptor): children by map key, and the
// wildcard map keys in load order.
type envoyTree struct {
	n            *node
	children     map[string]*envoyTree
	wildcardKeys []string
}

func loadEnvoyTree(nodes []*node) *envoyTree {
	t := &envoyTree{children: map[string]*envoyTree{}}
	for _, n := range nodes {
		k := n.mapKey()
		if strings.HasSuffix(k, "*") {
			t.wildcardKeys = append(t.wildcardKeys, k)
		}
		child := loadEnvoyTree(n.children)
		child.n = n
		t.children[k] = child
	}
	return t
}

// envoyLimit is GetLimit followed by GenerateCacheKey (without the prefix
// and the window): the node whose rate_limit applies to the descriptor,
// or nil, and the counter's key.
func envoyLimit(root *envoyTree, domain string, entries []policy.DescriptorEntry) (*node, string) {
	descriptors := root.children
	prev := root
	var found *node
	share := map[int]string{}
	for i, e := range entries {
		finalKey := e.Key + "_" + e.Value
		next := descriptors[finalKey]
		matchedWildcard := ""
		if next == nil && len(prev.wildcardKeys) > 0 {
			for _, w := range prev.wildcardKeys {
				if strings.HasPrefix(finalKey, strings.TrimSuffix(w, "*")) {
					next = descriptors[w]
					matchedWildcard = w
					break
				}
			}
		}
		if next == nil {
			next = descriptors[e.Key]
		}
		if matchedWildcard != "" && next != nil && next.n.share.on {
			share[i] = strings.TrimPrefix(next.n.mapKey(), e.Key+"_")
		}
		if next != nil && next.n.rateLimit != nil && i == len(entries)-1 {
			found = next.n
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		descriptors = next.children
		prev = next
	}
	if found == nil || found.rateLimit.unlimited {
		return nil, ""
	}
	var b strings.Builder
	b.WriteString(domain + "_")
	for i, e := range entries {
		v := e.Value
		if p, ok := share[i]; ok {
			v = p
		}
		b.WriteString(e.Key + "_" + v + "_")
	}
	return found, b.String()
}

// descriptorGen makes descriptors that exercise a domain's tree: its keys
// (and one it lacks), its values, and values around its wildcards.
type descriptorGen struct {
	rnd    *rand.Rand
	root   []*node
	keys   []string
	values map[string][]string
	depth  int
}

func newDescriptorGen(seed uint64, nodes []*node) *descriptorGen {
	g := &descriptorGen{rnd: rand.New(rand.NewPCG(seed, 1)), root: nodes, values: map[string][]string{}}
	var walk func([]*node, int)
	walk = func(ns []*node, depth int) {
		g.depth = max(g.depth, depth)
		for _, n := range ns {
			if !slices.Contains(g.keys, n.key) {
				g.keys = append(g.keys, n.key)
			}
			vs := []string{"v1", "other"}
			if n.value != "" {
				p := strings.TrimSuffix(n.value, "*")
				vs = append(vs, n.value, p, p+"x", p+"zz")
				if len(p) > 1 {
					vs = append(vs, p[:len(p)-1])
				}
			}
			for _, v := range vs {
				if v != "" && !slices.Contains(g.values[n.key], v) {
					g.values[n.key] = append(g.values[n.key], v)
				}
			}
			walk(n.children, depth+1)
		}
	}
	walk(nodes, 1)
	g.keys = append(g.keys, "unknown")
	g.values["unknown"] = []string{"v1"}
	return g
}

func (g *descriptorGen) next() []policy.DescriptorEntry {
	n := 1 + g.rnd.IntN(g.depth+1)
	var out []policy.DescriptorEntry
	level := g.root
	for range n {
		var key string
		if len(level) > 0 && g.rnd.IntN(5) > 0 {
			nd := level[g.rnd.IntN(len(level))]
			key = nd.key
			level = nd.children
		} else {
			key = g.keys[g.rnd.IntN(len(g.keys))]
			level = nil
		}
		vs := g.values[key]
		out = append(out, policy.DescriptorEntry{Key: key, Value: vs[g.rnd.IntN(len(vs))]})
	}
	return out
}

// TestDecidesAsEnvoyRatelimit checks every exact conversion against a
// port of envoyproxy/ratelimit's lookup: for each generated descriptor,
// the policies that match are exactly the one of the node
// envoyproxy/ratelimit picks (none where it finds no limit), with its
// limit and mode, and two descriptors share a Sluice bucket exactly when
// they share envoyproxy/ratelimit's counter.
func TestDecidesAsEnvoyRatelimit(t *testing.T) {
	for _, tc := range exactCases {
		t.Run(tc.name, func(t *testing.T) {
			files := readFiles(t, tc.files...)
			res := Convert(files, tc.opts)
			if w := res.Worst(); w != convert.Note {
				t.Fatalf("worst report %v, want notes only: %v", w, res.Reports)
			}
			var compiled []*policy.Policy
			bySource := map[string]*Policy{}
			for i := range res.Policies {
				p := &res.Policies[i]
				cp, err := policy.Compile(p.Object.Namespace, p.Object.Name, &p.Object.Spec)
				if err != nil {
					t.Fatalf("%s: %v", p.Object.Name, err)
				}
				compiled = append(compiled, cp)
				bySource[p.Object.Name] = p
			}
			var configs []*config
			var rs convert.Reports
			for i, f := range files {
				configs = append(configs, parseFile(f, i, &rs))
			}
			checked := 0
			for di, d := range mergeDomains(configs, tc.opts.MergeDomains, &rs) {
				tree := loadEnvoyTree(d.nodes)
				gen := newDescriptorGen(uint64(di)+7, d.nodes)
				envoyToSluice := map[string]string{}
				sluiceToEnvoy := map[string]string{}
				var ev policy.Eval
				for range 4000 {
					entries := gen.next()
					want, counter := envoyLimit(tree, d.name, entries)
					req := &policy.Request{Kind: policy.KindDescriptor, Domain: d.name, Descriptor: entries}
					ev.Reset(req)
					var matched []*policy.Policy
					for _, p := range compiled {
						ok, err := ev.Match(p)
						if ok || err != nil {
							matched = append(matched, p)
						}
					}
					desc := fmt.Sprint(entries)
					if want == nil {
						if len(matched) > 0 {
							t.Fatalf("%s %s: envoyproxy/ratelimit finds no limit, Sluice matches %s", d.name, desc, matched[0].Name)
						}
						continue
					}
					if len(matched) != 1 {
						t.Fatalf("%s %s: envoyproxy/ratelimit applies %s, Sluice matches %d policies %v", d.name, desc, want.pos, len(matched), names(matched))
					}
					got := bySource[matched[0].Name]
					if got.Source != want.pos {
						t.Fatalf("%s %s: envoyproxy/ratelimit applies %s, Sluice %s (%s)", d.name, desc, want.pos, matched[0].Name, got.Source)
					}
					checkLimit(t, got.Object, want)
					keyValue, ok := ev.KeyValue(matched[0])
					bucket := matched[0].Name + "|" + keyValue
					if !ok {
						if want.rateLimit.requestsPerUnit != 0 {
							t.Fatalf("%s %s: no key value", d.name, desc)
						}
						bucket = matched[0].Name + "|denied"
						counter = "denied|" + want.pos.String()
					}
					if prev, seen := envoyToSluice[counter]; seen && prev != bucket {
						t.Fatalf("%s %s: envoyproxy/ratelimit counter %q is Sluice buckets %q and %q", d.name, desc, counter, prev, bucket)
					}
					if prev, seen := sluiceToEnvoy[bucket]; seen && prev != counter {
						t.Fatalf("%s %s: Sluice bucket %q is envoyproxy/ratelimit counters %q and %q", d.name, desc, bucket, prev, counter)
					}
					envoyToSluice[counter], sluiceToEnvoy[bucket] = bucket, counter
					checked++
				}
			}
			if checked == 0 {
				t.Fatal("no generated descriptor found a limit")
			}
			t.Logf("%d limited descriptors checked", checked)
		})
	}
}

func checkLimit(t *testing.T, obj *ratelimitv1alpha1.RateLimitPolicy, want *node) {
	t.Helper()
	l := obj.Spec.Limits[0].FixedWindow
	rl := want.rateLimit
	if rl.requestsPerUnit != 0 && int64(l.Limit) != int64(rl.requestsPerUnit) || string(l.Window) != rl.unit.window || l.Alignment != ratelimitv1alpha1.WindowAlignmentClock {
		t.Fatalf("%s: limit %+v, want %d per %s", obj.Name, l, rl.requestsPerUnit, rl.unit.name)
	}
	quota := want.quota.on && rl.requestsPerUnit != 0
	if shadow := obj.Spec.Mode == ratelimitv1alpha1.ModeShadow; shadow != (want.shadow.on || want.quota.on) && !quota {
		t.Fatalf("%s: mode %q, shadow_mode %v, quota_mode %v", obj.Name, obj.Spec.Mode, want.shadow.on, want.quota.on)
	}
	if soft := obj.Spec.Limits[0].Mode == ratelimitv1alpha1.LimitModeSoft; soft != quota || quota && obj.Spec.Mode != "" {
		t.Fatalf("%s: limit mode %q, spec.mode %q; quota_mode %v: want Soft on the limit alone", obj.Name, obj.Spec.Limits[0].Mode, obj.Spec.Mode, want.quota.on)
	}
}

func names(ps []*policy.Policy) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func readFiles(t *testing.T, names ...string) []convert.File {
	t.Helper()
	var out []convert.File
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, convert.File{Name: n, Data: b})
	}
	return out
}

// TestReportedDivergences shows that what inexact.yaml's reports say is
// so: for each descriptor, envoyproxy/ratelimit (the port above) and the
// policies written anyway (--allow-partial) decide differently.
func TestReportedDivergences(t *testing.T) {
	files := readFiles(t, "inexact.yaml")
	res := Convert(files, Options{})
	var rs convert.Reports
	tree := loadEnvoyTree(parseFile(files[0], 0, &rs).nodes)
	var compiled []*policy.Policy
	for _, p := range res.Policies {
		cp, err := policy.Compile(p.Object.Namespace, p.Object.Name, &p.Object.Spec)
		if err != nil {
			t.Fatal(err)
		}
		compiled = append(compiled, cp)
	}
	for _, tc := range []struct {
		report  string // the line of the report that predicts it
		entries []policy.DescriptorEntry
	}{
		{"inexact.yaml:5", []policy.DescriptorEntry{{Key: "x-forwarded", Value: "1"}}},
		{"inexact.yaml:8", []policy.DescriptorEntry{{Key: "a_b", Value: "c"}}},
		{"inexact.yaml:11", []policy.DescriptorEntry{{Key: "a", Value: "b"}}},
		{"inexact.yaml:18", []policy.DescriptorEntry{{Key: "k", Value: "x"}, {Key: "k", Value: "special"}}},
	} {
		envoyNode, _ := envoyLimit(tree, "odd", tc.entries)
		var ev policy.Eval
		ev.Reset(&policy.Request{Kind: policy.KindDescriptor, Domain: "odd", Descriptor: tc.entries})
		var matched []string
		for i, p := range compiled {
			if ok, _ := ev.Match(p); ok {
				matched = append(matched, res.Policies[i].Source.String())
			}
		}
		envoy := "no limit"
		if envoyNode != nil {
			envoy = envoyNode.pos.String()
		}
		sluice := "no limit"
		if len(matched) > 0 {
			sluice = strings.Join(matched, ", ")
		}
		if envoy == sluice {
			t.Errorf("%v: both apply %s, but %s reports a difference", tc.entries, envoy, tc.report)
		}
		reported := false
		for _, r := range res.Reports {
			reported = reported || r.Pos.String() == tc.report && r.Severity == convert.Inexact
		}
		if !reported {
			t.Errorf("%v: envoyproxy/ratelimit applies %s, Sluice %s, and %s reports nothing inexact", tc.entries, envoy, sluice, tc.report)
		}
	}
}

package policy

import (
	"fmt"
	"strings"
	"testing"
)

// desc builds one descriptor of a rate limit service request from
// key, value pairs.
func desc(domain string, kv ...string) *Request {
	r := &Request{Kind: KindDescriptor, Domain: domain}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Descriptor = append(r.Descriptor, DescriptorEntry{Key: kv[i], Value: kv[i+1]})
	}
	return r
}

func TestDescriptorMatch(t *testing.T) {
	tests := []struct {
		name  string
		match string
		req   *Request
		want  bool
	}{
		{"domain only: any descriptor of the domain", "{domain: edge}", desc("edge", "a", "1", "b", "2"), true},
		{"domain only: another domain", "{domain: edge}", desc("internal", "a", "1"), false},
		{"any value", "{descriptor: [{key: remote_address}]}", desc("edge", "remote_address", "10.0.0.1"), true},
		{"key differs", "{descriptor: [{key: remote_address}]}", desc("edge", "generic_key", "x"), false},
		{"exact value", "{descriptor: [{key: generic_key, value: api}]}", desc("edge", "generic_key", "api"), true},
		{"exact value differs", "{descriptor: [{key: generic_key, value: api}]}", desc("edge", "generic_key", "apis"), false},
		{"prefix value", "{descriptor: [{key: path, value: '/api/*'}]}", desc("edge", "path", "/api/v1"), true},
		{"prefix value differs", "{descriptor: [{key: path, value: '/api/*'}]}", desc("edge", "path", "/apix"), false},
		{"entries in order", "{descriptor: [{key: a}, {key: b}]}", desc("edge", "a", "1", "b", "2"), true},
		{"entries out of order", "{descriptor: [{key: a}, {key: b}]}", desc("edge", "b", "2", "a", "1"), false},
		{"fewer entries than named", "{descriptor: [{key: a}, {key: b}]}", desc("edge", "a", "1"), false},
		{"more entries than named", "{descriptor: [{key: a}]}", desc("edge", "a", "1", "b", "2"), false},
		{"when reads the descriptor", "{descriptor: [{key: plan}], when: 'request.descriptor[\"plan\"] == \"free\"'}", desc("edge", "plan", "free"), true},
		{"when reads the descriptor, false", "{descriptor: [{key: plan}], when: 'request.descriptor[\"plan\"] == \"free\"'}", desc("edge", "plan", "pro"), false},
		{"when reads the domain", "{descriptor: [{key: plan}], when: 'request.domain.startsWith(\"ed\")'}", desc("edge", "plan", "pro"), true},
		{"a descriptor policy never matches an HTTP request", "{domain: edge}", req("GET", "h", "/"), false},
		{"an HTTP policy never matches a descriptor", "{}", desc("edge", "a", "1"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustCompile(t, "match: "+tt.match+"\n"+oneLimit)
			var e Eval
			e.Reset(tt.req)
			got, err := e.Match(p)
			if err != nil {
				t.Fatalf("match: %v", err)
			}
			if got != tt.want {
				t.Errorf("match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDescriptorKeys(t *testing.T) {
	tests := []struct {
		name, spec string
		req        *Request
		want       string
		ok         bool
	}{
		{"default key: the whole descriptor", "match: {descriptor: [{key: a}, {key: b}]}\n", desc("edge", "a", "1", "b", "2"), "a=1\x1fb=2", true},
		{"one entry's value", "match: {descriptor: [{key: a}, {key: b}]}\nkey: '{descriptor:b}'\n", desc("edge", "a", "1", "b", "2"), "2", true},
		{"a missing entry", "match: {domain: edge}\nkey: '{descriptor:b}'\n", desc("edge", "a", "1"), "", false},
		{"'=' in a value is escaped", "match: {domain: edge}\n", desc("edge", "a", "1=b"), "a=1%3Db", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustCompile(t, tt.spec+oneLimit)
			var e Eval
			e.Reset(tt.req)
			got, ok := e.KeyValue(p)
			if got != tt.want || ok != tt.ok {
				t.Errorf("key = %q, %v; want %q, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
	// The whole descriptor renders injectively: entries that differ only
	// in where '=' or the separator falls give different keys.
	p := mustCompile(t, "match: {domain: edge}\n"+oneLimit)
	seen := map[string]string{}
	for _, r := range []*Request{desc("e", "a", "b=c"), desc("e", "a=b", "c"), desc("e", "a", "b", "c", "d"), desc("e", "a", "b\x1fc=d"), desc("e", "a", "b%1Fc=d")} {
		var e Eval
		e.Reset(r)
		k, _ := e.KeyValue(p)
		if prev, dup := seen[k]; dup {
			t.Errorf("%v and %s render the same key %q", r.Descriptor, prev, k)
		}
		seen[k] = fmt.Sprint(r.Descriptor)
	}
}

func TestDescriptorPolicyErrors(t *testing.T) {
	tests := []struct{ name, spec, want string }{
		{"HTTP placeholder in a descriptor policy", "match: {domain: edge}\nkey: '{client_ip}'\n", "spec.key"},
		{"descriptor placeholder in an HTTP policy", "key: '{descriptor:a}'\n", "HTTP checks carry no descriptor"},
		{"hosts with a descriptor", "match: {domain: edge, hosts: [a.example.com]}\n", "spec.match: Invalid value"},
		{"empty entry key", "match: {descriptor: [{value: x}]}\n", "spec.match.descriptor[0].key: Required value"},
		{"empty descriptor placeholder", "match: {domain: edge}\nkey: '{descriptor:}'\n", "descriptor entry key is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := compileYAML(tt.spec + oneLimit)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to say %q", err, tt.want)
			}
		})
	}
}

// A bucket id of Envoy's rate limit quota service is a map: it matches a
// policy's descriptor entry by key, whatever the order, and counts in
// the same bucket as the rate limit service descriptor that lists its
// entries in the policy's order, so one policy serves both protocols.
func TestBucketMatchesAsDescriptor(t *testing.T) {
	named := mustCompile(t, "match: {domain: edge, descriptor: [{key: b}, {key: a, value: '1*'}]}\n"+oneLimit)
	anyEntries := mustCompile(t, "match: {domain: edge}\n"+oneLimit)
	tests := []struct {
		name    string
		p       *Policy
		id      map[string]string
		match   bool
		key     string
		rlsSame *Request // the RLS descriptor that shares its counter
	}{
		{"named entries, any order", named, map[string]string{"a": "12", "b": "x"}, true, "b=x\x1fa=12", desc("edge", "b", "x", "a", "12")},
		{"a value that fails", named, map[string]string{"a": "2", "b": "x"}, false, "", nil},
		{"an entry too many", named, map[string]string{"a": "1", "b": "x", "c": "y"}, false, "", nil},
		{"an entry missing", named, map[string]string{"b": "x"}, false, "", nil},
		{"a key the policy does not name", named, map[string]string{"a": "1", "c": "x"}, false, "", nil},
		{"any entries: sorted by key", anyEntries, map[string]string{"z": "1", "a": "2"}, true, "a=2\x1fz=1", desc("edge", "a", "2", "z", "1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewBucket("edge", tt.id)
			var e Eval
			e.Reset(r)
			got, err := e.Match(tt.p)
			if err != nil || got != tt.match {
				t.Fatalf("match = %v, %v; want %v", got, err, tt.match)
			}
			if !tt.match {
				return
			}
			key, ok := e.KeyValue(tt.p)
			if !ok || key != tt.key {
				t.Errorf("key = %q, %v; want %q", key, ok, tt.key)
			}
			var rls Eval
			rls.Reset(tt.rlsSame)
			if k, _ := rls.KeyValue(tt.p); k != key {
				t.Errorf("the bucket counts under %q, the RLS descriptor %v under %q", key, tt.rlsSame.Descriptor, k)
			}
		})
	}
	if r := NewBucket("other", map[string]string{"a": "1", "b": "x"}); func() bool { var e Eval; e.Reset(r); m, _ := e.Match(named); return m }() {
		t.Error("a bucket of another domain matched")
	}
	if m, _ := func() (bool, error) {
		var e Eval
		e.Reset(NewBucket("edge", map[string]string{"a": "1"}))
		return e.Match(mustCompile(t, oneLimit))
	}(); m {
		t.Error("an HTTP policy matched a bucket")
	}
}

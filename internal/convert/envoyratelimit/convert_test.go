package envoyratelimit

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/convert"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the converter's output")

type convertCase struct {
	name  string
	files []string
	opts  Options
}

// exactCases convert without an inexact report.
var exactCases = []convertCase{
	{name: "flat", files: []string{"flat.yaml"}},
	{name: "units", files: []string{"units.yaml"}},
	{name: "nested", files: []string{"nested.yaml"}},
	{name: "wildcard", files: []string{"wildcard.yaml"}},
	{name: "unlimited", files: []string{"unlimited.yaml"}},
	{name: "shadow", files: []string{"shadow.yaml"}},
	{name: "metrics", files: []string{"metrics.yaml"}},
	{name: "domains", files: []string{"domain-a.yaml", "domain-b.yaml", "flat.yaml"}, opts: Options{Namespace: "edge", FailureMode: ratelimitv1alpha1.FailureModeClosed}},
	{name: "yaml11", files: []string{"yaml11.yaml"}},
	{name: "zero", files: []string{"zero.yaml"}},
	{name: "unreachable", files: []string{"unreachable.yaml"}},
}

// otherCases have inexact reports or errors.
var otherCases = []convertCase{
	{name: "replaces", files: []string{"replaces.yaml"}},
	{name: "inexact", files: []string{"inexact.yaml"}},
	{name: "merged", files: []string{"merge-1.yaml", "merge-2.yaml"}, opts: Options{MergeDomains: true}},
	{name: "not-merged", files: []string{"merge-1.yaml", "merge-2.yaml"}},
	{name: "error-syntax", files: []string{"errors/syntax.yaml"}},
	{name: "error-unknown-key", files: []string{"errors/unknown-key.yaml"}},
	{name: "error-unknown-unit", files: []string{"errors/unknown-unit.yaml"}},
	{name: "error-duplicate", files: []string{"errors/duplicate.yaml"}},
	{name: "error-empty-domain", files: []string{"errors/empty-domain.yaml", "errors/empty.yaml"}},
	{name: "error-unlimited-unit", files: []string{"errors/unlimited-unit.yaml"}},
	{name: "error-types", files: []string{"errors/types.yaml"}},
	{name: "error-replaces", files: []string{"errors/replaces.yaml"}},
	{name: "error-share", files: []string{"errors/share.yaml"}},
	{name: "error-domain-twice", files: []string{"errors/dup-domain-1.yaml", "errors/dup-domain-2.yaml"}},
	{name: "error-list", files: []string{"errors/list.yaml"}},
	{name: "error-among-good", files: []string{"flat.yaml", "errors/unknown-key.yaml"}},
}

// TestGolden compares the reports and the YAML of every case with
// testdata/golden/<case>.txt (go test -run Golden -update rewrites them;
// read the diff).
func TestGolden(t *testing.T) {
	for _, tc := range append(append([]convertCase{}, exactCases...), otherCases...) {
		t.Run(tc.name, func(t *testing.T) {
			res := Convert(readFiles(t, tc.files...), tc.opts)
			var b bytes.Buffer
			fmt.Fprintf(&b, "worst: %v\n", res.Worst())
			for _, r := range res.Reports {
				fmt.Fprintln(&b, r)
			}
			b.WriteString("=== policies\n")
			if err := convert.WriteYAML(&b, res.Policies); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join("testdata", "golden", tc.name+".txt")
			if *update {
				if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run go test -run Golden -update)", err)
			}
			if got := b.String(); got != string(want) {
				t.Errorf("output differs from %s (go test -run Golden -update, then read the diff):\n%s", file, got)
			}
		})
	}
}

// TestSeverities pins what each case must report, independently of the
// golden files' wording.
func TestSeverities(t *testing.T) {
	for _, tc := range []struct {
		convertCase
		want     convert.Severity
		policies int
		// lines are "file:line: severity" prefixes that must be reported.
		lines []string
	}{
		{convertCase{name: "replaces", files: []string{"replaces.yaml"}}, convert.Inexact, 4, []string{"replaces.yaml:24: inexact", "replaces.yaml:31: note"}},
		{convertCase{name: "inexact", files: []string{"inexact.yaml"}}, convert.Inexact, 4, []string{"inexact.yaml:5: inexact", "inexact.yaml:8: inexact", "inexact.yaml:11: inexact", "inexact.yaml:18: inexact", "inexact.yaml:21: inexact"}},
		{convertCase{name: "merged", files: []string{"merge-1.yaml", "merge-2.yaml"}, opts: Options{MergeDomains: true}}, convert.Inexact, 4, []string{"merge-2.yaml:3: inexact"}},
		{convertCase{name: "not-merged", files: []string{"merge-1.yaml", "merge-2.yaml"}}, convert.Error, 0, []string{"merge-2.yaml:1: error"}},
		{convertCase{name: "metrics", files: []string{"metrics.yaml"}}, convert.Note, 2, []string{"metrics.yaml:5: note", "metrics.yaml:13: note", "metrics.yaml:18: note"}},
		{convertCase{name: "shadow", files: []string{"shadow.yaml"}}, convert.Note, 3, []string{"shadow.yaml:12: note", "shadow.yaml:17: note"}},
		{convertCase{name: "unlimited", files: []string{"unlimited.yaml"}}, convert.Note, 3, []string{"unlimited.yaml:7: note"}},
		{convertCase{name: "syntax", files: []string{"errors/syntax.yaml"}}, convert.Error, 0, []string{"errors/syntax.yaml:2: error"}},
		{convertCase{name: "unknown key", files: []string{"errors/unknown-key.yaml"}}, convert.Error, 0, []string{"errors/unknown-key.yaml:4: error: config error, unknown key 'ratelimit'"}},
		{convertCase{name: "unknown unit", files: []string{"errors/unknown-unit.yaml"}}, convert.Error, 0, []string{"errors/unknown-unit.yaml:5: error: invalid rate limit unit 'fortnight'", "errors/unknown-unit.yaml:8: error: invalid rate limit unit ''"}},
		{convertCase{name: "duplicate", files: []string{"errors/duplicate.yaml"}}, convert.Error, 0, []string{"errors/duplicate.yaml:9: error: duplicate descriptor composite key 'dups.a.b'", "errors/duplicate.yaml:10: error: duplicate descriptor composite key 'dups.a_x'"}},
		{convertCase{name: "empty domain", files: []string{"errors/empty-domain.yaml", "errors/empty.yaml"}}, convert.Error, 0, []string{"errors/empty-domain.yaml:1: error: config file cannot have empty domain", "errors/empty.yaml:1: error"}},
		{convertCase{name: "unlimited with unit", files: []string{"errors/unlimited-unit.yaml"}}, convert.Error, 0, []string{"errors/unlimited-unit.yaml:6: error: should not specify rate limit unit when unlimited"}},
		{convertCase{name: "types", files: []string{"errors/types.yaml"}}, convert.Error, 0, []string{"errors/types.yaml:4: error", "errors/types.yaml:7: error", "errors/types.yaml:9: error", "errors/types.yaml:12: error"}},
		{convertCase{name: "replaces errors", files: []string{"errors/replaces.yaml"}}, convert.Error, 0, []string{"errors/replaces.yaml:9: error: replaces should not contain name", "errors/replaces.yaml:10: error: should not have an empty replaces entry"}},
		{convertCase{name: "share", files: []string{"errors/share.yaml"}}, convert.Error, 0, []string{"errors/share.yaml:5: error: share_threshold can only be used with wildcard values"}},
		{convertCase{name: "list", files: []string{"errors/list.yaml"}}, convert.Error, 0, []string{"errors/list.yaml:1: error"}},
		{convertCase{name: "an error stops all files", files: []string{"flat.yaml", "errors/unknown-key.yaml"}}, convert.Error, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Convert(readFiles(t, tc.files...), tc.opts)
			var all []string
			for _, r := range res.Reports {
				all = append(all, r.String())
			}
			if got := res.Worst(); got != tc.want {
				t.Errorf("worst %v, want %v:\n%s", got, tc.want, strings.Join(all, "\n"))
			}
			if len(res.Policies) != tc.policies {
				t.Errorf("%d policies, want %d", len(res.Policies), tc.policies)
			}
			for _, prefix := range tc.lines {
				found := false
				for _, r := range all {
					found = found || strings.HasPrefix(r, prefix)
				}
				if !found {
					t.Errorf("no report starting %q in:\n%s", prefix, strings.Join(all, "\n"))
				}
			}
		})
	}
}

// TestNames: policy names are DNS labels, unique, and stable.
func TestNames(t *testing.T) {
	long := strings.Repeat("very-long-domain-name.", 8)
	files := []convert.File{{Name: "names.yaml", Data: []byte(`domain: "` + long + `"
descriptors:
  - key: a_b
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a-b
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: "/x*"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: "/x"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: "Ünïcode!!"
    rate_limit: {unit: second, requests_per_unit: 1}
`)}}
	res := Convert(files, Options{})
	seen := map[string]bool{}
	for _, p := range res.Policies {
		n := p.Object.Name
		if len(n) > 63 || dnsName([]string{n}) != n {
			t.Errorf("%q is not a DNS label", n)
		}
		if seen[n] {
			t.Errorf("%q twice", n)
		}
		seen[n] = true
	}
	if len(seen) != 5 {
		t.Errorf("%d names, want 5: %v (reports %v)", len(seen), seen, res.Reports)
	}
	again := Convert(files, Options{})
	for i := range res.Policies {
		if res.Policies[i].Object.Name != again.Policies[i].Object.Name {
			t.Errorf("names differ between runs: %s, %s", res.Policies[i].Object.Name, again.Policies[i].Object.Name)
		}
	}
}

// FuzzConvert: any input either converts to policies that compile (the
// converter checks each with policy.Compile and reports a failure as an
// error) or is refused with reports; it never panics.
func FuzzConvert(f *testing.F) {
	entries, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	errs, _ := filepath.Glob(filepath.Join("testdata", "errors", "*.yaml"))
	for _, e := range append(entries, errs...) {
		b, err := os.ReadFile(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		res := Convert([]convert.File{{Name: "fuzz.yaml", Data: data}}, Options{})
		for _, r := range res.Reports {
			if strings.Contains(r.Message, "converter bug") {
				t.Fatalf("%s\n%s", r, data)
			}
		}
		if res.Worst() == convert.Error && len(res.Policies) > 0 {
			t.Fatal("policies despite an error")
		}
		var b bytes.Buffer
		if err := convert.WriteYAML(&b, res.Policies); err != nil {
			t.Fatal(err)
		}
	})
}

package docs

import (
	"reflect"
	"testing"
)

// TestExamplesFound reads the examples of a page as the test does: the
// policy blocks, indented ones in lists too, with their markers, and
// nothing else.
func TestExamplesFound(t *testing.T) {
	md := "# Page\n\n" +
		"```yaml\napiVersion: ratelimit.sluice.dev/v1alpha1\nkind: RateLimitPolicy\nmetadata: {name: a}\n```\n\n" +
		"Not a policy:\n\n```yaml\ntracing:\n  endpoint: x\n```\n\n" +
		"<!-- refused: exactly one algorithm -->\n\n" +
		"```yaml\napiVersion: ratelimit.sluice.dev/v1alpha1\nkind: RateLimitPolicy\nmetadata: {name: b}\n```\n\n" +
		"1. A step:\n\n    <!-- refused -->\n    ```yml\n    kind: RateLimitOverrides\n    apiVersion: ratelimit.sluice.dev/v1alpha1\n    ```\n\n" +
		"```console\n$ kind: RateLimitPolicy\n```\n"
	got := examples("page.md", []byte(md))
	want := []example{
		{file: "page.md", line: 3, text: "apiVersion: ratelimit.sluice.dev/v1alpha1\nkind: RateLimitPolicy\nmetadata: {name: a}\n"},
		{file: "page.md", line: 18, text: "apiVersion: ratelimit.sluice.dev/v1alpha1\nkind: RateLimitPolicy\nmetadata: {name: b}\n",
			refused: true, message: "exactly one algorithm"},
		{file: "page.md", line: 27, text: "kind: RateLimitOverrides\napiVersion: ratelimit.sluice.dev/v1alpha1\n", refused: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("examples:\n got %+v\nwant %+v", got, want)
	}
}

// TestFragments makes a policy's fragment a whole policy, and leaves
// other documents alone.
func TestFragments(t *testing.T) {
	ex := example{file: "page.md", line: 7}
	limits := []any{map[string]any{"name": "a"}}
	for _, tc := range []struct {
		name string
		raw  map[string]any
		want map[string]any // nil: not applied
	}{
		{"spec's fields", map[string]any{"key": "k", "limits": limits}, map[string]any{
			"apiVersion": "ratelimit.sluice.dev/v1alpha1", "kind": "RateLimitPolicy",
			"metadata": map[string]any{"name": "example-line-7"}, "spec": map[string]any{"key": "k", "limits": limits}}},
		{"a spec", map[string]any{"metadata": map[string]any{"name": "p"}, "spec": map[string]any{"limits": limits}}, map[string]any{
			"apiVersion": "ratelimit.sluice.dev/v1alpha1", "kind": "RateLimitPolicy",
			"metadata": map[string]any{"name": "p"}, "spec": map[string]any{"limits": limits}}},
		{"another kind", map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "limits": limits}, nil},
		{"no limits", map[string]any{"tracing": map[string]any{"endpoint": "x"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := ex.object(tc.raw)
			switch {
			case tc.want == nil && u != nil:
				t.Errorf("applied %v", u.Object)
			case tc.want != nil && (u == nil || !reflect.DeepEqual(u.Object, tc.want)):
				t.Errorf("got %v, want %v", u, tc.want)
			}
		})
	}
}

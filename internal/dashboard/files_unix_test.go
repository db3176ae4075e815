//go:build unix

package dashboard

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestStateReportsFilesThatCannotBeRead: a symlink loop, a FIFO and an
// invalid name are each a problem naming the file, and the valid file's
// policy is in force.
func TestStateReportsFilesThatCannotBeRead(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"api.yaml": apiPolicy,
		"bad.yaml": strings.Replace(apiPolicy, "name: api", "name: shop/api", 1),
	})
	if err := os.Symlink("loop.yaml", filepath.Join(dir, "loop.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	ts, _ := serveDir(t, dir)
	st := getState(t, ts.URL)
	want := []string{
		"bad.yaml: document 1: metadata.name: Invalid value: \"shop/api\"",
		"loop.yaml: symlink to \"loop.yaml\" cannot be followed: too many levels of symbolic links",
		"pipe.yaml: skipped, never opened: a named pipe (FIFO), not a regular file",
	}
	if len(st.Problems) != len(want) {
		t.Fatalf("problems: %q", st.Problems)
	}
	for i, w := range want {
		if !strings.HasPrefix(st.Problems[i], w) {
			t.Errorf("problem %d: %q, want it to start with %q", i, st.Problems[i], w)
		}
	}
	var names []string
	for _, p := range st.Policies {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	if !slices.Equal(names, []string{"default/api"}) || !findPolicy(t, st, "default", "api").Ready {
		t.Errorf("policies: %+v", st.Policies)
	}
}

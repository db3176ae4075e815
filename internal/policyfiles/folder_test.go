//go:build unix

package policyfiles

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/syncbuf"
)

func policyDoc(namespace, name string, capacity int) string {
	return fmt.Sprintf(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata:
  name: %s
  namespace: %s
spec:
  key: "{client_ip}"
  limits:
  - name: burst
    tokenBucket: {capacity: %d, refillRate: 1, refillInterval: 10s}
`, name, namespace, capacity)
}

// inForce lists the policies in force as namespace/name, sorted.
func inForce(f *Folder) []string {
	var ids []string
	for _, p := range f.Policies().All() {
		ids = append(ids, p.Namespace+"/"+p.Name)
	}
	sort.Strings(ids)
	return ids
}

// fileErrors maps each file with an error (relative to dir) to its errors.
func fileErrors(f *Folder, dir string) map[string]string {
	errs := map[string]string{}
	for _, fe := range f.FileErrors() {
		rel, _ := filepath.Rel(dir, fe.File)
		errs[rel] = strings.TrimPrefix(errs[rel]+"\n"+fe.Err.Error(), "\n")
	}
	return errs
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mkfifo(t *testing.T, p string) {
	t.Helper()
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFolderLayouts: a file that cannot be read, is not a regular file,
// defines a policy another file defines, or names one invalidly is
// reported on its own, and the other files keep following their edits.
func TestFolderLayouts(t *testing.T) {
	tests := []struct {
		name   string
		layout func(t *testing.T, dir string)
		// more are the policies in force besides shop/api, which api.yaml
		// defines in every layout.
		more []string
		// errs: what the error of each file (relative to the folder) says;
		// no other file has one.
		errs map[string][]string
	}{{
		name:   "symlink loop",
		layout: func(t *testing.T, dir string) { symlink(t, "loop.yaml", filepath.Join(dir, "loop.yaml")) },
		errs:   map[string][]string{"loop.yaml": {`symlink to "loop.yaml" cannot be followed`, "too many levels of symbolic links"}},
	}, {
		name: "symlinks pointing at each other",
		layout: func(t *testing.T, dir string) {
			symlink(t, "b.yaml", filepath.Join(dir, "a.yaml"))
			symlink(t, "a.yaml", filepath.Join(dir, "b.yaml"))
		},
		errs: map[string][]string{"a.yaml": {"too many levels"}, "b.yaml": {"too many levels"}},
	}, {
		name:   "dangling symlink",
		layout: func(t *testing.T, dir string) { symlink(t, "missing.txt", filepath.Join(dir, "gone.yaml")) },
		errs:   map[string][]string{"gone.yaml": {`symlink to "missing.txt" cannot be followed`, "no such file"}},
	}, {
		name: "symlink to a policy file is followed",
		layout: func(t *testing.T, dir string) {
			other := t.TempDir()
			writeFile(t, other, "web.yaml", policyDoc("shop", "web", 3))
			symlink(t, filepath.Join(other, "web.yaml"), filepath.Join(dir, "web.yaml"))
		},
		more: []string{"shop/web"},
	}, {
		name:   "FIFO",
		layout: func(t *testing.T, dir string) { mkfifo(t, filepath.Join(dir, "pipe.yaml")) },
		errs:   map[string][]string{"pipe.yaml": {"skipped, never opened", "a named pipe (FIFO), not a regular file"}},
	}, {
		name: "symlink to a FIFO",
		layout: func(t *testing.T, dir string) {
			fifo := filepath.Join(t.TempDir(), "pipe")
			mkfifo(t, fifo)
			symlink(t, fifo, filepath.Join(dir, "pipe.yaml"))
		},
		errs: map[string][]string{"pipe.yaml": {"skipped, never opened", "symlink to", "a named pipe (FIFO)"}},
	}, {
		name: "socket",
		layout: func(t *testing.T, dir string) {
			ln, err := net.Listen("unix", filepath.Join(dir, "sock.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
		},
		errs: map[string][]string{"sock.yaml": {"skipped, never opened", "a socket"}},
	}, {
		name:   "symlink to a device",
		layout: func(t *testing.T, dir string) { symlink(t, "/dev/null", filepath.Join(dir, "null.yaml")) },
		errs:   map[string][]string{"null.yaml": {"skipped, never opened", "a character device"}},
	}, {
		name:   "symlink to a folder",
		layout: func(t *testing.T, dir string) { symlink(t, t.TempDir(), filepath.Join(dir, "folder.yaml")) },
		errs:   map[string][]string{"folder.yaml": {"skipped, never opened", "a folder"}},
	}, {
		name: "a file too large",
		layout: func(t *testing.T, dir string) {
			writeFile(t, dir, "big.yaml", strings.Repeat("# padding\n", 500_000))
		},
		errs: map[string][]string{"big.yaml": {"larger than 4 MiB"}},
	}, {
		name:   "the same policy in two files",
		layout: func(t *testing.T, dir string) { writeFile(t, dir, "more.yaml", policyDoc("shop", "api", 9)) },
		errs: map[string][]string{"more.yaml": {"policy shop/api is also defined in api.yaml",
			"whose definition is in force; this one is not applied"}},
	}, {
		name: "the same policy twice in one file",
		layout: func(t *testing.T, dir string) {
			writeFile(t, dir, "web.yaml", policyDoc("shop", "web", 3)+"---\n"+policyDoc("shop", "web", 4))
		},
		more: []string{"shop/web"},
		errs: map[string][]string{"web.yaml": {"policy shop/web is defined twice in this file (documents 1 and 2)"}},
	}, {
		name:   "name with a slash",
		layout: func(t *testing.T, dir string) { writeFile(t, dir, "bad.yaml", policyDoc("shop", "a/b", 3)) },
		errs:   map[string][]string{"bad.yaml": {`document 1: metadata.name: Invalid value: "a/b"`, "RFC 1123 subdomain"}},
	}, {
		name:   "namespace with a slash",
		layout: func(t *testing.T, dir string) { writeFile(t, dir, "bad.yaml", policyDoc("shop/x", "web", 3)) },
		errs:   map[string][]string{"bad.yaml": {`metadata.namespace: Invalid value: "shop/x"`, "RFC 1123 label"}},
	}, {
		name: "names that would read as the same namespace/name",
		layout: func(t *testing.T, dir string) {
			writeFile(t, dir, "x.yaml", policyDoc("a", "b/c", 3))
			writeFile(t, dir, "y.yaml", policyDoc("a/b", "c", 3))
		},
		errs: map[string][]string{"x.yaml": {"metadata.name"}, "y.yaml": {"metadata.namespace"}},
	}, {
		name: "name in capitals, namespace longer than a label",
		layout: func(t *testing.T, dir string) {
			writeFile(t, dir, "upper.yaml", policyDoc("shop", "Web", 3))
			writeFile(t, dir, "long.yaml", policyDoc(strings.Repeat("n", 64), "web", 3))
		},
		errs: map[string][]string{"upper.yaml": {`metadata.name: Invalid value: "Web"`},
			"long.yaml": {"metadata.namespace", "must be no more than 63 characters"}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "api.yaml", bucketPolicy)
			tc.layout(t, dir)
			f, err := NewFolder(dir, 0, quiet)
			if err != nil {
				t.Fatalf("one file must not stop the folder from being read: %v", err)
			}
			want := append([]string{"shop/api"}, tc.more...)
			sort.Strings(want)
			check := func(wantCapacity int64) {
				t.Helper()
				if got := inForce(f); !slices.Equal(got, want) {
					t.Errorf("in force: %v, want %v", got, want)
				}
				if got := capacity(t, f); got != wantCapacity {
					t.Errorf("capacity of shop/api: %d, want api.yaml's %d", got, wantCapacity)
				}
				errs := fileErrors(f, dir)
				for file, wants := range tc.errs {
					for _, w := range wants {
						if !strings.Contains(errs[file], w) {
							t.Errorf("error of %s: %q, want it to say %q", file, errs[file], w)
						}
					}
				}
				for file, err := range errs {
					if _, ok := tc.errs[file]; !ok {
						t.Errorf("unexpected error for %s: %s", file, err)
					}
				}
			}
			check(5)

			// The other files keep following their edits.
			writeFile(t, dir, "api.yaml", strings.Replace(bucketPolicy, "capacity: 5", "capacity: 7", 1))
			if err := f.Reload(); err != nil {
				t.Fatalf("reload: %v", err)
			}
			check(7)
		})
	}
}

// TestUnreadableFileKeepsItsPolicies: a file that becomes unreadable keeps
// the last good versions of its policies, with a status that says why.
func TestUnreadableFileKeepsItsPolicies(t *testing.T) {
	f, dir := newFiles(t, map[string]string{"api.yaml": bucketPolicy, "web.yaml": policyDoc("shop", "web", 3)})
	p := filepath.Join(dir, "web.yaml")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	symlink(t, "web.yaml", p)
	writeFile(t, dir, "api.yaml", strings.Replace(bucketPolicy, "capacity: 5", "capacity: 7", 1))
	if err := f.Reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if got := inForce(f); !slices.Equal(got, []string{"shop/api", "shop/web"}) {
		t.Fatalf("in force: %v", got)
	}
	if got := capacity(t, f); got != 7 {
		t.Fatalf("api.yaml's edit must apply: capacity %d", got)
	}
	for _, st := range f.Statuses() {
		if st.Name == "web" && (st.Ready || !strings.Contains(st.Message, "its file cannot be read") ||
			!strings.Contains(st.Message, "last good version stays in force")) {
			t.Fatalf("status of a policy kept from an unreadable file: %+v", st)
		}
	}
	if errs := fileErrors(f, dir); len(errs) != 1 || !strings.Contains(errs["web.yaml"], "too many levels") {
		t.Fatalf("file errors: %v", errs)
	}
}

// TestSecondDefinitionNeverReplacesTheOneInForce: a policy defined in a
// second file stays as it was enforced, and both files say so.
func TestSecondDefinitionNeverReplacesTheOneInForce(t *testing.T) {
	f, dir := newFiles(t, map[string]string{"b.yaml": policyDoc("shop", "api", 7)})
	// a.yaml comes first in the folder, yet b.yaml's definition is in force.
	writeFile(t, dir, "a.yaml", policyDoc("shop", "api", 5))
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := capacity(t, f); got != 7 {
		t.Fatalf("capacity %d: a second definition must not replace the one in force (7)", got)
	}
	errs := fileErrors(f, dir)
	if len(errs) != 1 || !strings.Contains(errs["a.yaml"], "policy shop/api is also defined in b.yaml") ||
		!strings.Contains(errs["a.yaml"], "this one is not applied") {
		t.Fatalf("file errors: %v", errs)
	}
	st := status(t, f)
	if st.Ready || filepath.Base(st.File) != "b.yaml" || !strings.Contains(st.Message, "also defined in a.yaml") {
		t.Fatalf("status of the definition in force: %+v", st)
	}
	dups := 0
	for _, s := range f.Statuses() {
		if s.Duplicate {
			dups++
			if filepath.Base(s.File) != "a.yaml" || s.Ready {
				t.Errorf("status of the duplicate: %+v", s)
			}
		}
	}
	if dups != 1 {
		t.Errorf("%d duplicate statuses, want 1", dups)
	}

	// The definition in force follows its own file.
	writeFile(t, dir, "b.yaml", policyDoc("shop", "api", 8))
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := capacity(t, f); got != 8 {
		t.Fatalf("capacity %d after b.yaml changed, want 8", got)
	}

	// b.yaml cannot be read: its last good version stays, not a.yaml's.
	b := filepath.Join(dir, "b.yaml")
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	symlink(t, "b.yaml", b)
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := capacity(t, f); got != 8 {
		t.Fatalf("capacity %d with b.yaml unreadable, want its last good 8", got)
	}
	errs = fileErrors(f, dir)
	if !strings.Contains(errs["a.yaml"], "whose last good version stays in force") || !strings.Contains(errs["b.yaml"], "too many levels") {
		t.Fatalf("file errors: %v", errs)
	}

	// Once b.yaml is gone, a.yaml's is the only definition.
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := capacity(t, f); got != 5 {
		t.Fatalf("capacity %d with b.yaml removed, want a.yaml's 5", got)
	}
	if st := status(t, f); !st.Ready || len(f.FileErrors()) != 0 {
		t.Fatalf("status %+v, file errors %v", st, f.FileErrors())
	}
}

// TestHalfWrittenFileIsNotApplied: a file rewritten in place, caught
// truncated or after its first document, is not applied until it has
// stayed unchanged for the settle time; the version in force stays.
func TestHalfWrittenFileIsNotApplied(t *testing.T) {
	f, dir := newFiles(t, map[string]string{"api.yaml": policyDoc("shop", "api", 5) + "---\n" + policyDoc("shop", "web", 3)})
	now := time.Now()
	f.now = func() time.Time { return now }
	both := []string{"shop/api", "shop/web"}
	step := func(body string, advance time.Duration) {
		t.Helper()
		now = now.Add(advance)
		if body != "" {
			writeFileAt(t, dir, "api.yaml", body, now)
		}
		if err := f.Reload(); err != nil {
			t.Fatal(err)
		}
	}

	step(" ", time.Millisecond) // truncated, nothing written yet
	if got := inForce(f); !slices.Equal(got, both) {
		t.Fatalf("after the truncation: %v in force, want %v", got, both)
	}
	step(policyDoc("shop", "api", 6), time.Millisecond) // the first document written
	if got := inForce(f); !slices.Equal(got, both) || capacity(t, f) != 5 {
		t.Fatalf("after the first document: %v in force (capacity %d), want %v (5)", got, capacity(t, f), both)
	}
	full := policyDoc("shop", "api", 6) + "---\n" + policyDoc("shop", "web", 4)
	step(full, time.Millisecond) // finished, just now
	if got := capacity(t, f); got != 5 {
		t.Fatalf("a version written just now applied at once: capacity %d", got)
	}
	if len(f.FileErrors()) != 0 {
		t.Fatalf("a file being written is not an error: %v", f.FileErrors())
	}
	step("", time.Second) // unchanged since
	if got := inForce(f); !slices.Equal(got, both) || capacity(t, f) != 6 {
		t.Fatalf("the finished file: %v in force (capacity %d), want %v (6)", got, capacity(t, f), both)
	}
}

// TestVersionFromAnotherClockAppliesOnceUnchanged: a modification time in
// the future (a network filesystem's clock) cannot show the file settled;
// reading it unchanged for the settle time does.
func TestVersionFromAnotherClockAppliesOnceUnchanged(t *testing.T) {
	f, dir := newFiles(t, map[string]string{"api.yaml": bucketPolicy})
	now := time.Now()
	f.now = func() time.Time { return now }
	writeFileAt(t, dir, "api.yaml", strings.Replace(bucketPolicy, "capacity: 5", "capacity: 7", 1), now.Add(time.Hour))
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := capacity(t, f); got != 5 {
		t.Fatalf("capacity %d at the first read, want 5 until the file is seen unchanged", got)
	}
	now = now.Add(time.Second)
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := capacity(t, f); got != 7 {
		t.Fatalf("capacity %d once read unchanged a second later, want 7", got)
	}
}

// TestFileRewrittenDuringTheReadIsReadAgain: a writer that changes the
// file between the reader's stat and the end of its read (a different
// size, or the same size through a rename) makes the reader read it again.
func TestFileRewrittenDuringTheReadIsReadAgain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rewrite func(t *testing.T, dir string)
		want    []string
		cap     int64
	}{{
		name: "written in place",
		rewrite: func(t *testing.T, dir string) {
			writeFileAt(t, dir, "api.yaml", policyDoc("shop", "api", 9)+"---\n"+policyDoc("shop", "web", 3), written.Add(2*time.Minute))
		},
		want: []string{"shop/api", "shop/web"},
		cap:  9,
	}, {
		name: "replaced by a file of the same size and time",
		rewrite: func(t *testing.T, dir string) {
			writeFileAt(t, dir, ".tmp", policyDoc("shop", "api", 8), written.Add(time.Minute))
			if err := os.Rename(filepath.Join(dir, ".tmp"), filepath.Join(dir, "api.yaml")); err != nil {
				t.Fatal(err)
			}
		},
		want: []string{"shop/api"},
		cap:  8,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f, dir := newFiles(t, map[string]string{"api.yaml": bucketPolicy})
			writeFileAt(t, dir, "api.yaml", policyDoc("shop", "api", 6), written.Add(time.Minute))
			reads := 0
			f.afterRead = func(string) {
				if reads++; reads == 1 {
					tc.rewrite(t, dir)
				}
			}
			if err := f.Reload(); err != nil {
				t.Fatal(err)
			}
			if reads != 2 {
				t.Fatalf("%d reads, want 2: a file changed during the read is read again", reads)
			}
			if got := inForce(f); !slices.Equal(got, tc.want) || capacity(t, f) != tc.cap {
				t.Fatalf("in force: %v (capacity %d), want %v (%d)", got, capacity(t, f), tc.want, tc.cap)
			}
		})
	}
}

// TestFileThatKeepsChangingKeepsItsLastGoodVersion: a file that changes
// during every read keeps the version in force and, after a while, is
// reported.
func TestFileThatKeepsChangingKeepsItsLastGoodVersion(t *testing.T) {
	f, dir := newFiles(t, map[string]string{"api.yaml": bucketPolicy})
	now := time.Now()
	f.now = func() time.Time { return now }
	writes := 0
	f.afterRead = func(string) {
		writes++
		writeFileAt(t, dir, "api.yaml", policyDoc("shop", "api", 6+writes%2), written.Add(time.Duration(writes)*time.Second))
	}
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := capacity(t, f); got != 5 || len(f.FileErrors()) != 0 {
		t.Fatalf("capacity %d, file errors %v: want the last good 5, no error yet", got, f.FileErrors())
	}
	now = now.Add(time.Minute)
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	errs := fileErrors(f, dir)
	if got := capacity(t, f); got != 5 || !strings.Contains(errs["api.yaml"], "has kept changing since") ||
		!strings.Contains(errs["api.yaml"], "the last version read whole stays in force") {
		t.Fatalf("capacity %d, file errors %v: want the last good 5 and the file reported", got, errs)
	}

	f.afterRead = nil // the writer stops
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, want := capacity(t, f), int64(6+writes%2); got != want || len(f.FileErrors()) != 0 {
		t.Fatalf("capacity %d, file errors %v: want the last written %d, no error", got, f.FileErrors(), want)
	}
}

// TestStartWaitsForAFileJustWritten: a file written just before the start
// is in force when NewFiles returns.
func TestStartWaitsForAFileJustWritten(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(bucketPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := NewFolder(dir, 10*time.Millisecond, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if got := capacity(t, f); got != 5 {
		t.Fatalf("capacity %d", got)
	}
}

// TestFileErrorsAreLoggedOncePerChange: an error is logged when it
// appears, not at every poll, nor when another file changes.
func TestFileErrorsAreLoggedOncePerChange(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "api.yaml", bucketPolicy)
	symlink(t, "loop.yaml", filepath.Join(dir, "loop.yaml"))
	mkfifo(t, filepath.Join(dir, "pipe.yaml"))
	writeFile(t, dir, "bad.yaml", policyDoc("shop", "a/b", 3))
	var out syncbuf.Buffer
	f, err := NewFolder(dir, 0, slog.New(slog.NewTextHandler(&out, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if i == 2 {
			writeFile(t, dir, "api.yaml", strings.Replace(bucketPolicy, "capacity: 5", "capacity: 7", 1))
		}
		if err := f.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	if got := capacity(t, f); got != 7 {
		t.Fatalf("capacity %d", got)
	}
	for _, file := range []string{"loop.yaml", "pipe.yaml", "bad.yaml"} {
		if n := out.Count("level=ERROR msg=\"policy file not applied in full; the last good versions of its policies stay in force\" file=" + filepath.Join(dir, file)); n != 1 {
			t.Errorf("%s logged %d times, want once", file, n)
		}
	}

	// A different error for the same file is logged.
	writeFile(t, dir, "bad.yaml", policyDoc("shop", "Bad", 3))
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := out.Count("file=" + filepath.Join(dir, "bad.yaml")); n != 2 {
		t.Errorf("bad.yaml logged %d times after its error changed, want 2", n)
	}
}

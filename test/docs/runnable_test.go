// Package docs tests the docs site: it builds strictly (a broken link or
// anchor fails), and every console example a page marks runnable is run
// against local mode, started as the page says, with its output compared
// to the page's.
package docs

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/docsite"
	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

var manager systest.Manager

func TestMain(m *testing.M) { manager.RunTests(m, "docs") }

// TestSiteBuilds builds the site as `make docs` does: strictly, so a broken
// link or anchor, or a page the nav names that is not there, fails.
func TestSiteBuilds(t *testing.T) {
	site := docsite.Build(t)
	for _, page := range []string{"index.html", "getting-started/local/index.html", "reference/policy/index.html"} {
		if _, err := os.Stat(filepath.Join(site, page)); err != nil {
			t.Errorf("the built site has no %s: %v", page, err)
		}
	}
}

// TestRunnableExamples runs every page's runnable examples, a subtest per
// page, each against a local mode of its own.
func TestRunnableExamples(t *testing.T) {
	root := kubetest.RepoRoot(t)
	pages := runnablePages(t, filepath.Join(root, "docs"))
	if len(pages) == 0 {
		t.Fatal("no page of docs/ marks a runnable example (<!-- runnable -->)")
	}
	systest.RequireCommand(t, "curl", "curl")
	for _, p := range pages {
		t.Run(p.rel, func(t *testing.T) { runPage(t, p) })
	}
}

// runPage writes the page's files, starts its server and runs its console
// blocks in order, in one folder.
func runPage(t *testing.T, p page) {
	dir := t.TempDir()
	for _, f := range p.files {
		path := filepath.Join(dir, filepath.FromSlash(f.arg))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(f.body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addrs := addressMap(t, p)
	path := toolPath(t)
	env := []string{"PATH=" + path}
	requireKubectl(t, p, path)
	if p.server != nil {
		startServer(t, dir, *p.server, addrs)
	}
	for _, b := range p.consoles {
		for _, c := range parseConsole(b.body) {
			cmd := addrs.Replace(c.command)
			out, err := runCommand(dir, env, cmd)
			if err != nil {
				t.Logf("%s: `%s`: %v", p.rel, c.command, err)
			}
			if msg := compare(c.output, out); msg != "" {
				t.Errorf("%s, line %d: `%s`:\n%s\n--- the page shows ---\n%s\n--- the command printed ---\n%s",
					p.rel, b.line, c.command, msg, strings.Join(c.output, "\n"), out)
			}
		}
	}
}

// addressMap gives every loopback address a page names (127.0.0.1:8080) a
// free port of this test, so pages may name the ports a reader would use.
func addressMap(t *testing.T, p page) *strings.Replacer {
	t.Helper()
	re := regexp.MustCompile(`(?:127\.0\.0\.1|localhost):\d+`)
	var text strings.Builder
	if p.server != nil {
		text.WriteString(p.server.body)
	}
	for _, b := range p.consoles {
		text.WriteString(b.body)
	}
	seen := map[string]bool{}
	var pairs []string
	for _, a := range re.FindAllString(text.String(), -1) {
		if !seen[a] {
			seen[a] = true
			pairs = append(pairs, a, fmt.Sprintf("127.0.0.1:%d", systest.FreePort(t)))
		}
	}
	return strings.NewReplacer(pairs...)
}

// toolPath is PATH with the built manager and kubectl-sluice first, and
// the envtest binaries (kubectl, which runs the plugin) after them.
func toolPath(t *testing.T) string {
	t.Helper()
	dirs := []string{filepath.Dir(manager.Path(t)), filepath.Dir(manager.Plugin(t))}
	if assets := os.Getenv("KUBEBUILDER_ASSETS"); assets != "" {
		dirs = append(dirs, assets)
	}
	return strings.Join(append(dirs, os.Getenv("PATH")), string(os.PathListSeparator))
}

// requireKubectl fails, saying how to get it, when a page runs `kubectl
// sluice` and no kubectl is on path (`make test` sets KUBEBUILDER_ASSETS,
// whose kubectl runs the plugin).
func requireKubectl(t *testing.T, p page, path string) {
	t.Helper()
	for _, b := range p.consoles {
		if !strings.Contains(b.body, "kubectl ") {
			continue
		}
		for _, dir := range filepath.SplitList(path) {
			if fi, err := os.Stat(filepath.Join(dir, "kubectl")); err == nil && !fi.IsDir() {
				return
			}
		}
		t.Fatalf("%s runs kubectl, which is not on PATH: run `make test`, or set KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.2 after `make envtest`", p.rel)
	}
}

// startServer runs the page's one server command (bin/manager ...) with its
// addresses mapped, and waits until each address it listens on accepts.
func startServer(t *testing.T, dir string, b block, addrs *strings.Replacer) {
	t.Helper()
	args := strings.Fields(addrs.Replace(strings.TrimSpace(b.body)))
	if len(args) == 0 || args[0] != "bin/manager" {
		t.Fatalf("runnable-server at line %d: want one `bin/manager ...` command, got %q", b.line, b.body)
	}
	proc := systest.Start(t, dir, "manager", nil, manager.Path(t), args[1:]...)
	for i, a := range args {
		if (a == "--listen" || a == "--admin-listen") && i+1 < len(args) {
			proc.WaitTCP(t, args[i+1], 60*time.Second)
		}
	}
	for i, a := range args {
		if a == "--listen" && i+1 < len(args) {
			proc.WaitHTTP(t, "http://"+args[i+1]+"/readyz", 30*time.Second)
		}
	}
}

// runCommand runs one console command with bash, stdout and stderr as one.
func runCommand(dir string, env []string, command string) (string, error) {
	cmd := exec.Command("bash", "-o", "pipefail", "-c", command)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// scanLines splits text into lines.
func scanLines(text string) []string {
	var lines []string
	s := bufio.NewScanner(strings.NewReader(text))
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	return lines
}

// TestReadmeLinks holds every relative link of README.md to a file of the
// repository, as the site's strict build holds the pages' links.
func TestReadmeLinks(t *testing.T) {
	root := kubetest.RepoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	links := regexp.MustCompile(`\]\(([^)\s]+)\)`).FindAllStringSubmatch(string(readme), -1)
	checked := 0
	for _, m := range links {
		target := m[1]
		if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") {
			continue
		}
		path, _, _ := strings.Cut(target, "#")
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(path))); err != nil {
			t.Errorf("README.md links to %s, which is not in the repository", target)
		}
		checked++
	}
	if checked < 10 {
		t.Fatalf("README.md has %d relative links; the test reads it wrongly", checked)
	}
	if n := len(scanLines(string(readme))); n > 250 {
		t.Errorf("README.md has %d lines: the docs site is where the rest goes (about 200 at most)", n)
	}
}

// TestPagesAreShort holds every written page to a few screens: a longer
// one is split. The reference is generated and the layout is one table.
func TestPagesAreShort(t *testing.T) {
	root := filepath.Join(kubetest.RepoRoot(t), "docs")
	const most = 150
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if strings.HasPrefix(rel, "reference"+string(filepath.Separator)) || rel == "performance.md" || rel == filepath.Join("development", "layout.md") {
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if n := len(scanLines(string(text))); n > most {
			t.Errorf("docs/%s has %d lines, more than a few screens (%d): split it", rel, n, most)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

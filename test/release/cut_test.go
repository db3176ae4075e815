package release

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
)

// The release the tests cut, in a copy of this work tree.
const (
	testVersion = "v0.0.1-rc.1"
	testChart   = "0.0.1-rc.1"
	imageRepo   = "ghcr.io/sluice-dev/sluice"
)

// gitEnv gives git an identity wherever the tests run.
var gitEnv = []string{
	"GIT_AUTHOR_NAME=Sluice release test", "GIT_AUTHOR_EMAIL=release-test@sluice.invalid",
	"GIT_COMMITTER_NAME=Sluice release test", "GIT_COMMITTER_EMAIL=release-test@sluice.invalid",
}

var (
	repoOnce sync.Once
	repoDir  string
	repoErr  error

	cutOnce sync.Once
	cut     *release
	cutErr  error
)

// release is what `make release VERSION=testVersion` left behind.
type release struct {
	Repo     string // the repository it was cut in
	Revision string // the commit tagged
	Layout   string // the image's OCI layout (bin/image)
	Digest   string // the image index's digest
	Dist     string // dist/
	Log      string // make's output
}

// releaseRepo is a git repository holding this work tree (tracked and
// untracked files, not ignored ones) in one commit, whose CHANGELOG.md has
// the Unreleased entries under testVersion's heading, as a maintainer
// writes it before `make release`. Its bin/ links to this tree's tools and
// envtest binaries, so nothing is built twice.
func releaseRepo(t testing.TB) string {
	t.Helper()
	root := kubetest.RepoRoot(t)
	assets := kubetest.Assets(t)
	crane, helm := tool(t, "crane"), tool(t, "helm")
	repoOnce.Do(func() { repoDir, repoErr = makeReleaseRepo(root, assets, crane, helm) })
	if repoErr != nil {
		t.Fatal(repoErr)
	}
	return repoDir
}

func makeReleaseRepo(root, assets string, tools ...string) (string, error) {
	dir := filepath.Join(scratch, "repo")
	stdout, stderr, err := runErr(root, nil, time.Minute, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return "", fmt.Errorf("git ls-files: %v\n%s", err, stderr)
	}
	seen := map[string]bool{}
	for _, name := range strings.Split(stdout, "\x00") {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		if err := copyEntry(filepath.Join(root, name), filepath.Join(dir, name)); err != nil {
			return "", err
		}
	}
	for _, p := range tools {
		if err := link(p, filepath.Join(dir, "bin", filepath.Base(p))); err != nil {
			return "", err
		}
	}
	if err := link(assets, filepath.Join(dir, "bin", "k8s", "1.37.2")); err != nil {
		return "", err
	}
	changelog := filepath.Join(dir, "CHANGELOG.md")
	b, err := os.ReadFile(changelog)
	if err != nil {
		return "", err
	}
	const unreleased = "## [Unreleased]\n"
	if !strings.Contains(string(b), unreleased) {
		return "", errors.New("CHANGELOG.md has no '## [Unreleased]' heading")
	}
	b = []byte(strings.Replace(string(b), unreleased, unreleased+"\n## ["+testChart+"] - 2026-12-01\n", 1))
	if err := os.WriteFile(changelog, b, 0o644); err != nil {
		return "", err
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "-m", "release test"}} {
		if _, stderr, err := runErr(dir, gitEnv, time.Minute, "git", args...); err != nil {
			return "", fmt.Errorf("git %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
	}
	return dir, nil
}

func link(target, name string) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	return os.Symlink(target, name)
}

// copyEntry copies a file or a symbolic link (as a link).
func copyEntry(from, to string) error {
	fi, err := os.Lstat(from)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // deleted in the work tree
	} else if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(from)
		if err != nil {
			return err
		}
		return os.Symlink(target, to)
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// makeRelease runs `make release` in the release repository.
func makeRelease(repo string, timeout time.Duration, args ...string) (string, error) {
	stdout, stderr, err := runErr(repo, gitEnv, timeout, "make", append([]string{"--no-print-directory", "release"}, args...)...)
	return stdout + stderr, err
}

// cutRelease runs `make release VERSION=testVersion` once, in
// releaseRepo: the image for linux/amd64 and linux/arm64, dist/install.yaml,
// the packaged chart and the tag.
func cutRelease(t testing.TB) *release {
	t.Helper()
	repo := releaseRepo(t)
	cutOnce.Do(func() {
		log, err := makeRelease(repo, 45*time.Minute, "VERSION="+testVersion)
		if err != nil {
			cutErr = fmt.Errorf("make release VERSION=%s: %v\n%s", testVersion, err, log)
			return
		}
		rev, stderr, err := runErr(repo, nil, time.Minute, "git", "rev-parse", "HEAD")
		if err != nil {
			cutErr = fmt.Errorf("git rev-parse: %v\n%s", err, stderr)
			return
		}
		r := &release{Repo: repo, Revision: strings.TrimSpace(rev), Layout: filepath.Join(repo, "bin", "image"),
			Dist: filepath.Join(repo, "dist"), Log: log}
		var index struct {
			Manifests []struct{ Digest string } `json:"manifests"`
		}
		if err := readJSON(filepath.Join(r.Layout, "index.json"), &index); err != nil {
			cutErr = err
			return
		}
		if len(index.Manifests) != 1 {
			cutErr = fmt.Errorf("%s/index.json: %d entries, want 1 (the multi-platform index)", r.Layout, len(index.Manifests))
			return
		}
		r.Digest = index.Manifests[0].Digest
		cut = r
	})
	if cutErr != nil {
		t.Fatal(cutErr)
	}
	return cut
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// `make release` refuses, before building anything, what would make a
// release that is not what its tag says.
func TestReleaseRefuses(t *testing.T) {
	repo := releaseRepo(t)
	for _, tc := range []struct {
		name, version, dirty, want string
	}{
		{"not a version", "0.1", "", "VERSION 0.1: want vMAJOR.MINOR.PATCH[-PRERELEASE]"},
		{"a changed work tree", testVersion, "stray.txt", "the work tree has changes"},
		{"no changelog section", "v9.9.9", "", "CHANGELOG.md has no '## [9.9.9] - YYYY-MM-DD' section"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.dirty != "" {
				p := filepath.Join(repo, tc.dirty)
				if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				defer os.Remove(p)
			}
			out, err := makeRelease(repo, 5*time.Minute, "VERSION="+tc.version)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Fatalf("make release VERSION=%s: err %v, want a refusal saying %q:\n%s", tc.version, err, tc.want, out)
			}
			if _, _, err := runErr(repo, nil, time.Minute, "git", "rev-parse", "-q", "--verify", "refs/tags/"+tc.version); err == nil {
				t.Errorf("the refused release left a tag %s", tc.version)
			}
		})
	}
}

// `make release` writes the installer, the chart and their checksums, and
// tags the commit with the changelog's section.
func TestReleaseCut(t *testing.T) {
	r := cutRelease(t)
	t.Logf("make release VERSION=%s:\n%s", testVersion, r.Log)

	tag := run(t, r.Repo, nil, time.Minute, "git", "for-each-ref", "--format=%(objecttype) %(*objectname)", "refs/tags/"+testVersion)
	if want := "tag " + r.Revision; strings.TrimSpace(tag) != want {
		t.Errorf("tag %s: %q, want an annotated tag of HEAD (%q)", testVersion, strings.TrimSpace(tag), want)
	}
	msg := run(t, r.Repo, nil, time.Minute, "git", "tag", "-l", "--format=%(contents)", testVersion)
	for _, want := range []string{"Sluice " + testVersion, "## [" + testChart + "] - 2026-12-01", "Envoy"} {
		if !strings.Contains(msg, want) {
			t.Errorf("tag message lacks %q:\n%s", want, msg)
		}
	}

	files, err := os.ReadDir(r.Dist)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name())
	}
	dist := append([]string{"SHA256SUMS", "install.yaml", "sluice-" + testChart + ".tgz"}, pluginFiles(testVersion)...)
	sort.Strings(dist)
	if strings.Join(names, " ") != strings.Join(dist, " ") {
		t.Errorf("dist/ holds %v, want %v", names, dist)
	}
	sums, err := os.ReadFile(filepath.Join(r.Dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(sums)), "\n")
	if len(lines) != len(dist)-1 {
		t.Errorf("SHA256SUMS has %d lines, want %d (every file of dist/ but itself):\n%s", len(lines), len(dist)-1, sums)
	}
	for _, line := range lines {
		sum, name, _ := strings.Cut(line, "  ")
		b, err := os.ReadFile(filepath.Join(r.Dist, name))
		if err != nil {
			t.Errorf("SHA256SUMS: %v", err)
			continue
		}
		if got := sha256.Sum256(b); hex.EncodeToString(got[:]) != sum {
			t.Errorf("SHA256SUMS: %s does not match", name)
		}
	}

	// The kubectl plugin, for the release's download URL.
	verifyPlugin(t, r.Repo, r.Dist, testVersion, "https://github.com/sluice-dev/sluice/releases/download/"+testVersion)

	// The installer pins the image just built.
	installer, err := os.ReadFile(filepath.Join(r.Dist, "install.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := imageRepo + "@" + r.Digest
	workloads := 0
	for _, u := range decode(t, installer) {
		for _, img := range images(t, u) {
			workloads++
			if img != want {
				t.Errorf("install.yaml: %s runs %s, want %s", key(u), img, want)
			}
		}
	}
	if workloads != 2 {
		t.Errorf("install.yaml: %d containers, want 2", workloads)
	}

	// The chart: the release's version, and the same image.
	helm := tool(t, "helm")
	pkg := filepath.Join(r.Dist, "sluice-"+testChart+".tgz")
	chart := run(t, r.Repo, nil, time.Minute, helm, "show", "chart", pkg)
	for _, want := range []string{"version: " + testChart + "\n", "appVersion: " + testVersion + "\n"} {
		if !strings.Contains(chart, want) {
			t.Errorf("helm show chart: lacks %q:\n%s", want, chart)
		}
	}
	rendered := run(t, r.Repo, nil, time.Minute, helm, "template", "sluice", pkg, "--namespace", "sluice-system")
	workloads = 0
	for _, u := range decode(t, []byte(rendered)) {
		for _, img := range images(t, u) {
			workloads++
			if img != want {
				t.Errorf("the packaged chart: %s runs %s, want %s", key(u), img, want)
			}
		}
	}
	if workloads != 2 {
		t.Errorf("the packaged chart: %d containers, want 2", workloads)
	}

	// The same version again is refused: the tag exists.
	out, err := makeRelease(r.Repo, 5*time.Minute, "VERSION="+testVersion)
	if err == nil || !strings.Contains(out, "tag "+testVersion+" exists already") {
		t.Errorf("make release of an existing tag: err %v, want a refusal:\n%s", err, out)
	}
}

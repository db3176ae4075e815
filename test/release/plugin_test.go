package release

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
)

// The kubectl plugin's platforms, as the krew manifest's selectors name them.
var pluginPlatforms = []struct{ os, arch string }{
	{"darwin", "amd64"}, {"darwin", "arm64"}, {"linux", "amd64"}, {"linux", "arm64"},
}

// pluginFiles are the names hack/package-plugin.sh writes into dist/ for
// version.
func pluginFiles(version string) []string {
	names := []string{"sluice.yaml"}
	for _, p := range pluginPlatforms {
		names = append(names, pluginArchive(version, p.os, p.arch))
	}
	return names
}

func pluginArchive(version, goos, arch string) string {
	return "kubectl-sluice_" + version + "_" + goos + "_" + arch + ".tar.gz"
}

// krewManifest is the part of a krew plugin manifest the tests read.
type krewManifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		ShortDescription string `json:"shortDescription"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Bin    string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

// verifyPlugin checks the kubectl plugin's files in dist: each archive
// holds the plugin built for its platform (and LICENSE when the tree has
// one), and the krew manifest names every archive at downloadURL with its
// sha256.
func verifyPlugin(t *testing.T, root, dist, version, downloadURL string) {
	t.Helper()
	want := []string{"kubectl-sluice"}
	if _, err := os.Stat(filepath.Join(root, "LICENSE")); err == nil {
		want = append(want, "LICENSE")
	}
	sort.Strings(want)
	for _, p := range pluginPlatforms {
		name := pluginArchive(version, p.os, p.arch)
		files := untar(t, filepath.Join(dist, name))
		var got []string
		for f := range files {
			got = append(got, f)
		}
		sort.Strings(got)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s holds %v, want %v", name, got, want)
		}
		if bin := files["kubectl-sluice"]; bin != "" {
			checkExecutable(t, name, bin, p.os, p.arch)
		}
		if p.os == runtime.GOOS && p.arch == runtime.GOARCH {
			out, err := exec.Command(files["kubectl-sluice"], "--help").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "kubectl sluice explain NAMESPACE --url URL") {
				t.Errorf("%s: kubectl-sluice --help: %v\n%s", name, err, out)
			}
		}
	}

	b, err := os.ReadFile(filepath.Join(dist, "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m krewManifest
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("sluice.yaml: %v", err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "sluice" ||
		m.Spec.Version != version || m.Spec.ShortDescription == "" {
		t.Errorf("sluice.yaml: %s %s %q version %q, want a krew Plugin \"sluice\" version %q with a short description",
			m.APIVersion, m.Kind, m.Metadata.Name, m.Spec.Version, version)
	}
	if len(m.Spec.Platforms) != len(pluginPlatforms) {
		t.Errorf("sluice.yaml: %d platforms, want %d", len(m.Spec.Platforms), len(pluginPlatforms))
	}
	seen := map[string]bool{}
	for _, p := range m.Spec.Platforms {
		goos, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		name := pluginArchive(version, goos, arch)
		seen[goos+"/"+arch] = true
		if p.URI != downloadURL+"/"+name {
			t.Errorf("sluice.yaml: %s/%s uri %s, want %s/%s", goos, arch, p.URI, downloadURL, name)
		}
		if p.Bin != "kubectl-sluice" {
			t.Errorf("sluice.yaml: %s/%s bin %q, want kubectl-sluice", goos, arch, p.Bin)
		}
		archive, err := os.ReadFile(filepath.Join(dist, name))
		if err != nil {
			t.Errorf("sluice.yaml: %s/%s: %v", goos, arch, err)
			continue
		}
		if sum := sha256.Sum256(archive); p.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("sluice.yaml: %s/%s sha256 %s, but %s's is %x", goos, arch, p.SHA256, name, sum)
		}
	}
	for _, p := range pluginPlatforms {
		if !seen[p.os+"/"+p.arch] {
			t.Errorf("sluice.yaml: no platform %s/%s", p.os, p.arch)
		}
	}
}

// untar extracts a .tar.gz into a temporary folder and returns its
// regular files by name; an entry owned by anyone but 0:0 or not a
// regular file fails t.
func untar(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	dir := t.TempDir()
	files := map[string]string{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag != tar.TypeReg || h.Uid != 0 || h.Gid != 0 || strings.Contains(h.Name, "/") {
			t.Errorf("%s: entry %s (type %c, owner %d:%d), want regular files at the top owned by 0:0", path, h.Name, h.Typeflag, h.Uid, h.Gid)
			continue
		}
		out := filepath.Join(dir, h.Name)
		w, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY, os.FileMode(h.Mode).Perm())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(w, tr); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		files[h.Name] = out
	}
	return files
}

// checkExecutable checks that bin is an executable for goos/arch.
func checkExecutable(t *testing.T, archive, bin, goos, arch string) {
	t.Helper()
	if fi, err := os.Stat(bin); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("%s: kubectl-sluice is not executable (%v)", archive, err)
	}
	var machine string
	switch goos {
	case "linux":
		f, err := elf.Open(bin)
		if err != nil {
			t.Errorf("%s: kubectl-sluice is not ELF: %v", archive, err)
			return
		}
		defer f.Close()
		machine = map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}[f.Machine]
	case "darwin":
		f, err := macho.Open(bin)
		if err != nil {
			t.Errorf("%s: kubectl-sluice is not Mach-O: %v", archive, err)
			return
		}
		defer f.Close()
		machine = map[macho.Cpu]string{macho.CpuAmd64: "amd64", macho.CpuArm64: "arm64"}[f.Cpu]
	}
	if machine != arch {
		t.Errorf("%s: kubectl-sluice is built for %q, want %s", archive, machine, arch)
	}
}

// `make plugin-dist` (a part of `make release`) builds the plugin's
// archives and a krew manifest that matches them.
func TestPluginDist(t *testing.T) {
	root := kubetest.RepoRoot(t)
	dist := t.TempDir()
	const downloadURL = "https://downloads.example.com/sluice/" + testVersion
	run(t, root, []string{"DOWNLOAD_URL=" + downloadURL}, 20*time.Minute, "make", "--no-print-directory", "plugin-dist",
		"VERSION="+testVersion, "DIST="+dist)
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := pluginFiles(testVersion)
	sort.Strings(want)
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("dist holds %v, want %v", names, want)
	}
	verifyPlugin(t, root, dist, testVersion, downloadURL)

	// krew's version is semantic: a bare commit is refused.
	_, stderr, err := runErr(root, nil, time.Minute, "make", "--no-print-directory", "plugin-dist", "VERSION=d6689e7-dirty", "DIST="+t.TempDir())
	if err == nil || !strings.Contains(stderr, "VERSION d6689e7-dirty: want vMAJOR.MINOR.PATCH") {
		t.Errorf("make plugin-dist VERSION=d6689e7-dirty: %v, want a refusal naming VERSION\n%s", err, stderr)
	}
}

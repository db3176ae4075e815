package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
	"github.com/sluice-dev/sluice/internal/testutil/syncbuf"
)

// The image `make image` builds (here through `make release`): an OCI
// layout whose one entry is an index of linux/amd64 and linux/arm64 images.
// These tests read the layout with nothing but the OCI image spec, run the
// binary from the unpacked layers, and push and pull it through a real
// registry; no Docker daemon anywhere.

type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
	Platform  *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform,omitempty"`
}

type manifest struct {
	MediaType string       `json:"mediaType"`
	Config    descriptor   `json:"config"`
	Layers    []descriptor `json:"layers"`
	Manifests []descriptor `json:"manifests"`
}

type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		User       string            `json:"User"`
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd"`
		Env        []string          `json:"Env"`
		WorkingDir string            `json:"WorkingDir"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// platformImage is one platform's image in the layout.
type platformImage struct {
	arch   string
	config imageConfig
	layers []descriptor
}

// blob reads a blob of the layout and checks it against its digest.
func blob(t testing.TB, layout, digest string) []byte {
	t.Helper()
	algo, hexsum, ok := strings.Cut(digest, ":")
	if !ok || algo != "sha256" {
		t.Fatalf("digest %q: want sha256:<hex>", digest)
	}
	b, err := os.ReadFile(filepath.Join(layout, "blobs", "sha256", hexsum))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hexsum {
		t.Fatalf("blob %s does not match its digest", digest)
	}
	return b
}

func unmarshal(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// platformImages reads the index the layout names and each image in it.
func platformImages(t testing.TB, layout, digest string) []platformImage {
	t.Helper()
	var index manifest
	unmarshal(t, blob(t, layout, digest), &index)
	if index.MediaType != "application/vnd.oci.image.index.v1+json" {
		t.Errorf("index media type %q, want an OCI image index", index.MediaType)
	}
	var out []platformImage
	for _, d := range index.Manifests {
		if d.Platform == nil {
			t.Fatalf("index entry %s has no platform", d.Digest)
		}
		var m manifest
		unmarshal(t, blob(t, layout, d.Digest), &m)
		var c imageConfig
		unmarshal(t, blob(t, layout, m.Config.Digest), &c)
		if c.OS != d.Platform.OS || c.Architecture != d.Platform.Architecture {
			t.Errorf("index entry %s/%s: its config says %s/%s", d.Platform.OS, d.Platform.Architecture, c.OS, c.Architecture)
		}
		out = append(out, platformImage{arch: d.Platform.OS + "/" + d.Platform.Architecture, config: c, layers: m.Layers})
	}
	return out
}

func TestImageConfig(t *testing.T) {
	r := cutRelease(t)
	imgs := platformImages(t, r.Layout, r.Digest)
	var platforms []string
	for _, img := range imgs {
		platforms = append(platforms, img.arch)
		c := img.config.Config
		if c.User != "65532:65532" {
			t.Errorf("%s: User %q, want 65532:65532 (nonroot)", img.arch, c.User)
		}
		if !slices.Equal(c.Entrypoint, []string{"/manager"}) || len(c.Cmd) != 0 {
			t.Errorf("%s: Entrypoint %q Cmd %q, want [/manager] and none", img.arch, c.Entrypoint, c.Cmd)
		}
		wantLabels := map[string]string{
			"org.opencontainers.image.source":   "https://github.com/sluice-dev/sluice",
			"org.opencontainers.image.title":    "sluice",
			"org.opencontainers.image.version":  testVersion,
			"org.opencontainers.image.revision": r.Revision,
		}
		for k, v := range wantLabels {
			if c.Labels[k] != v {
				t.Errorf("%s: label %s = %q, want %q", img.arch, k, c.Labels[k], v)
			}
		}
		if !slices.Contains(c.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt") {
			t.Errorf("%s: Env %q lacks SSL_CERT_FILE", img.arch, c.Env)
		}
		if len(img.layers) != 2 || len(img.config.RootFS.DiffIDs) != 2 {
			t.Errorf("%s: %d layers, want 2 (the base of hack/image-rootfs.sh, the binary)", img.arch, len(img.layers))
		}
		b, _ := json.Marshal(img.config)
		t.Logf("%s config: %s", img.arch, b)
	}
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Errorf("platforms %v, want %v", platforms, want)
	}
}

// entry is one file of a layer.
type entry struct {
	name     string
	typeflag byte
	mode     int64
	uid, gid int
	data     []byte
}

// layerEntries reads a gzip-compressed tar layer and checks its
// uncompressed digest against the config's diff_id.
func layerEntries(t testing.TB, layout string, d descriptor, diffID string) []entry {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, layout, d.Digest)))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(sum[:]) != diffID {
		t.Errorf("layer %s: uncompressed digest differs from diff_id %s", d.Digest, diffID)
	}
	var out []entry
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, entry{name: h.Name, typeflag: h.Typeflag, mode: h.Mode, uid: h.Uid, gid: h.Gid, data: data})
	}
}

// The image holds exactly the files it needs: no shell, no other program.
func TestImageFiles(t *testing.T) {
	r := cutRelease(t)
	root := kubetest.RepoRoot(t)
	kubetest.TrackFiles(t, filepath.Join(root, "hack", "image-rootfs.sh"))
	// The base layer is what hack/image-rootfs.sh writes today, byte for
	// byte: the build is reproducible.
	rootfs := filepath.Join(t.TempDir(), "rootfs.tar")
	run(t, root, nil, time.Minute, filepath.Join(root, "hack", "image-rootfs.sh"), rootfs)
	b, err := os.ReadFile(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	baseDiffID := "sha256:" + hex.EncodeToString(sum[:])

	want := map[string]string{ // name: type and mode
		"etc/":                              "dir 0755",
		"etc/group":                         "file 0644",
		"etc/nsswitch.conf":                 "file 0644",
		"etc/passwd":                        "file 0644",
		"etc/ssl/":                          "dir 0755",
		"etc/ssl/certs/":                    "dir 0755",
		"etc/ssl/certs/ca-certificates.crt": "file 0644",
		"tmp/":                              "dir 1777",
		"usr/":                              "dir 0755",
		"usr/share/":                        "dir 0755",
		"usr/share/doc/":                    "dir 0755",
		"usr/share/doc/ca-certificates/":    "dir 0755",
		"usr/share/doc/ca-certificates/copyright": "file 0644",
		"manager": "file 0755",
	}
	machines := map[string]elf.Machine{"linux/amd64": elf.EM_X86_64, "linux/arm64": elf.EM_AARCH64}
	for _, img := range platformImages(t, r.Layout, r.Digest) {
		t.Run(img.arch, func(t *testing.T) {
			if len(img.layers) != 2 {
				t.Fatalf("%d layers, want 2", len(img.layers))
			}
			if got := img.config.RootFS.DiffIDs[0]; got != baseDiffID {
				t.Errorf("base layer %s, but hack/image-rootfs.sh writes %s now: the base is not reproducible", got, baseDiffID)
			}
			files := map[string]entry{}
			for i, l := range img.layers {
				for _, e := range layerEntries(t, r.Layout, l, img.config.RootFS.DiffIDs[i]) {
					files[e.name] = e
				}
			}
			for name, e := range files {
				kind := map[byte]string{tar.TypeDir: "dir", tar.TypeReg: "file"}[e.typeflag]
				if kind == "" {
					kind = fmt.Sprintf("type %q", e.typeflag)
				}
				got := fmt.Sprintf("%s %04o", kind, e.mode&0o7777)
				if want[name] == "" {
					t.Errorf("unexpected %s (%s) in the image", name, got)
				} else if got != want[name] {
					t.Errorf("%s: %s, want %s", name, got, want[name])
				}
				if e.uid != 0 || e.gid != 0 {
					t.Errorf("%s: owned by %d:%d, want 0:0", name, e.uid, e.gid)
				}
				if base := filepath.Base(strings.TrimSuffix(name, "/")); slices.Contains([]string{"sh", "bash", "ash", "dash", "busybox"}, base) {
					t.Errorf("a shell in the image: %s", name)
				}
			}
			for name := range want {
				if _, ok := files[name]; !ok {
					t.Errorf("the image lacks %s", name)
				}
			}

			if passwd := string(files["etc/passwd"].data); !strings.Contains(passwd, "\nnonroot:x:65532:65532:") {
				t.Errorf("/etc/passwd has no nonroot user 65532:\n%s", passwd)
			}
			if group := string(files["etc/group"].data); !strings.Contains(group, "\nnonroot:x:65532:") {
				t.Errorf("/etc/group has no nonroot group 65532:\n%s", group)
			}
			certs, rest := 0, files["etc/ssl/certs/ca-certificates.crt"].data
			for {
				var block *pem.Block
				if block, rest = pem.Decode(rest); block == nil {
					break
				}
				if _, err := x509.ParseCertificate(block.Bytes); err != nil {
					t.Errorf("ca-certificates.crt: certificate %d: %v", certs+1, err)
				}
				certs++
			}
			if certs < 100 || len(bytes.TrimSpace(rest)) != 0 {
				t.Errorf("ca-certificates.crt: %d certificates and %d bytes of something else, want Mozilla's bundle (over 100)", certs, len(rest))
			}
			t.Logf("%d files, %d CA certificates", len(files), certs)

			// A static binary for the platform: no program interpreter, no
			// shared libraries.
			bin, err := elf.NewFile(bytes.NewReader(files["manager"].data))
			if err != nil {
				t.Fatalf("manager: %v", err)
			}
			if bin.Machine != machines[img.arch] {
				t.Errorf("manager is for %s, want %s", bin.Machine, machines[img.arch])
			}
			for _, p := range bin.Progs {
				if p.Type == elf.PT_INTERP {
					t.Errorf("manager has a program interpreter: not static")
				}
			}
			if libs, _ := bin.ImportedLibraries(); len(libs) != 0 {
				t.Errorf("manager needs shared libraries %v", libs)
			}
		})
	}
}

// unpack writes the image's layers, in order, into dir.
func unpack(t testing.TB, layout string, img platformImage, dir string) {
	t.Helper()
	for i, l := range img.layers {
		for _, e := range layerEntries(t, layout, l, img.config.RootFS.DiffIDs[i]) {
			path := filepath.Join(dir, filepath.FromSlash(e.name))
			switch e.typeflag {
			case tar.TypeDir:
				if err := os.MkdirAll(path, 0o755); err != nil {
					t.Fatal(err)
				}
			case tar.TypeReg:
				if err := os.WriteFile(path, e.data, 0o600); err != nil {
					t.Fatal(err)
				}
			default:
				t.Fatalf("%s: type %q", e.name, e.typeflag)
			}
			// After writing: the sticky bit of /tmp needs chmod, not umask.
			if err := os.Chmod(path, fs.FileMode(e.mode&0o777)|modeBits(e.mode)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func modeBits(m int64) fs.FileMode {
	var out fs.FileMode
	if m&0o1000 != 0 {
		out |= fs.ModeSticky
	}
	return out
}

// inImage runs the image's entrypoint with args from the unpacked
// filesystem rootfs, as a container runtime would: as root (the test's
// case in CI) it is chrooted into rootfs as the image's user 65532:65532
// with only the image's environment; otherwise rootfs/manager runs as the
// test's user.
func inImage(t testing.TB, rootfs string, img platformImage, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(filepath.Join(rootfs, "manager"), args...)
	cmd.Env = img.config.Config.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 {
		cmd.Path = img.config.Config.Entrypoint[0]
		cmd.Dir = "/"
		cmd.SysProcAttr.Chroot = rootfs
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 65532, Gid: 65532}
	} else {
		t.Logf("not root: running %s as uid %d, outside a chroot", cmd.Path, os.Geteuid())
	}
	return cmd
}

// The binary runs from the image's files, as the image's user: it prints
// the release's version and answers checks.
func TestImageRuns(t *testing.T) {
	r := cutRelease(t)
	root := kubetest.RepoRoot(t)
	var img *platformImage
	for _, i := range platformImages(t, r.Layout, r.Digest) {
		if i.arch == "linux/"+runtime.GOARCH {
			img = &i
		}
	}
	if img == nil {
		t.Fatalf("the image has no linux/%s variant to run here", runtime.GOARCH)
	}
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	unpack(t, r.Layout, *img, rootfs)
	// The policies, where a volume would be mounted, readable by 65532.
	samples, err := filepath.Glob(filepath.Join(root, "config", "samples", "*.yaml"))
	if err != nil || len(samples) == 0 {
		t.Fatalf("config/samples: %v", err)
	}
	policies := filepath.Join(rootfs, "policies")
	if err := os.Mkdir(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range samples {
		if filepath.Base(s) == "kustomization.yaml" {
			continue
		}
		if err := copyEntry(s, filepath.Join(policies, filepath.Base(s))); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(policies, filepath.Base(s)), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	out, err := inImage(t, rootfs, *img, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("manager version: %v\n%s", err, out)
	}
	t.Logf("manager version:\n%s", out)
	if want := fmt.Sprintf("sluice %s\ncommit %s\n", testVersion, r.Revision); !strings.HasPrefix(string(out), want) {
		t.Errorf("manager version printed\n%s\nwant it to start with\n%s", out, want)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	policyDir := "/policies"
	if os.Geteuid() != 0 {
		policyDir = policies
	}
	local := inImage(t, rootfs, *img, "local", "--policies", policyDir, "--listen", addr)
	var logs syncbuf.Buffer
	local.Stdout, local.Stderr = &logs, &logs
	if err := local.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-local.Process.Pid, syscall.SIGTERM)
		_ = local.Wait()
		if t.Failed() {
			t.Logf("manager local's log:\n%s", logs.String())
		}
	})
	client := &http.Client{Timeout: 5 * time.Second}
	ready := false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !ready; time.Sleep(100 * time.Millisecond) {
		if resp, err := client.Get("http://" + addr + "/readyz"); err == nil {
			_ = resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
		}
	}
	if !ready {
		t.Fatalf("manager local did not get ready:\n%s", logs.String())
	}

	// config/samples/tokenbucket-per-ip.yaml: bursts of 10, then one a
	// second. Checks as ingress-nginx's auth-url sends them.
	start := time.Now()
	var statuses []int
	var denial http.Header
	for i := 0; i < 30 && denial == nil; i++ {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/check/default", nil)
		req.Header.Set("X-Original-URL", "http://localhost/api/items")
		req.Header.Set("X-Original-Method", "GET")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
		if resp.StatusCode != http.StatusOK {
			denial = resp.Header
		}
	}
	elapsed := time.Since(start)
	t.Logf("checks of /api/items: %v in %s", statuses, elapsed)
	allowed := len(statuses) - 1
	if denial == nil || statuses[len(statuses)-1] != http.StatusForbidden {
		t.Fatalf("no 403 in %d checks: %v", len(statuses), statuses)
	}
	if allowed < 10 || allowed > 10+int(elapsed/time.Second)+1 {
		t.Errorf("%d checks allowed before the first denial in %s, want the burst of 10 (plus one a second)", allowed, elapsed)
	}
	if denial.Get("Retry-After") == "" || denial.Get("RateLimit-Policy") == "" {
		t.Errorf("the denial lacks Retry-After or RateLimit-Policy: %v", denial)
	}

	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	build := regexp.MustCompile(`(?m)^sluice_build_info\{.*\} 1$`).Find(metrics)
	if !bytes.Contains(build, []byte(`version="`+testVersion+`"`)) || !bytes.Contains(build, []byte(`revision="`+r.Revision+`"`)) {
		t.Errorf("sluice_build_info: %q, want version %s and revision %s", build, testVersion, r.Revision)
	}
}

// startRegistry serves an OCI registry (go-containerregistry's, `crane
// registry serve`) on a loopback port until the test ends and returns its
// host:port.
func startRegistry(t testing.TB, crane string) string {
	t.Helper()
	cmd := exec.Command(crane, "registry", "serve", "--address", "127.0.0.1:0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	ports := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`serving on port (\d+)`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				ports <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case p := <-ports:
		return "127.0.0.1:" + p
	case <-time.After(30 * time.Second):
		t.Fatal("crane registry serve did not say its port")
		return ""
	}
}

// `make image-push` pushes the very image that was built and tested (the
// same digest), and a registry serves it back by digest.
func TestImagePushPull(t *testing.T) {
	r := cutRelease(t)
	crane := tool(t, "crane")
	registry := startRegistry(t, crane)
	tag := registry + "/sluice:" + testVersion
	ref := registry + "/sluice@" + r.Digest

	out := run(t, r.Repo, nil, 5*time.Minute, "make", "--no-print-directory", "-s", "image-push", "IMG="+tag)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); lines[len(lines)-1] != ref {
		t.Errorf("make image-push printed\n%s\nwant its last line %s (the built image's digest)", out, ref)
	}
	if got := strings.TrimSpace(run(t, "", nil, time.Minute, crane, "digest", tag)); got != r.Digest {
		t.Errorf("crane digest %s = %s, want %s", tag, got, r.Digest)
	}
	run(t, "", nil, 2*time.Minute, crane, "validate", "--remote", ref)

	// The index by digest: both platforms.
	var index manifest
	unmarshal(t, []byte(run(t, "", nil, time.Minute, crane, "manifest", ref)), &index)
	var platforms []string
	for _, m := range index.Manifests {
		platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
	}
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Errorf("crane manifest %s: platforms %v, want %v", ref, platforms, want)
	}
	for _, p := range platforms {
		cfg := run(t, "", nil, time.Minute, crane, "config", "--platform", p, ref)
		t.Logf("crane config --platform %s %s:\n%s", p, ref, cfg)
		var c imageConfig
		unmarshal(t, []byte(cfg), &c)
		if c.Config.User != "65532:65532" || !slices.Equal(c.Config.Entrypoint, []string{"/manager"}) ||
			c.Config.Labels["org.opencontainers.image.version"] != testVersion || c.OS+"/"+c.Architecture != p {
			t.Errorf("crane config --platform %s: %s", p, cfg)
		}
	}

	// Pulled by digest into a fresh layout: the same index and blobs.
	pulled := filepath.Join(t.TempDir(), "pulled")
	run(t, "", nil, 5*time.Minute, crane, "pull", "--format=oci", ref, pulled)
	var pulledIndex struct{ Manifests []descriptor }
	if err := readJSON(filepath.Join(pulled, "index.json"), &pulledIndex); err != nil {
		t.Fatal(err)
	}
	if len(pulledIndex.Manifests) != 1 || pulledIndex.Manifests[0].Digest != r.Digest {
		t.Fatalf("pulled layout names %v, want %s", pulledIndex.Manifests, r.Digest)
	}
	for _, img := range platformImages(t, pulled, r.Digest) {
		for _, l := range img.layers {
			if !bytes.Equal(blob(t, pulled, l.Digest), blob(t, r.Layout, l.Digest)) {
				t.Errorf("%s: layer %s differs after the round trip", img.arch, l.Digest)
			}
		}
	}

	// A pull of a digest the registry does not hold fails.
	missing := registry + "/sluice@sha256:" + strings.Repeat("0", 64)
	if _, stderr, err := runErr("", nil, time.Minute, crane, "manifest", missing); err == nil {
		t.Errorf("crane manifest %s succeeded", missing)
	} else if !strings.Contains(stderr, "MANIFEST_UNKNOWN") && !strings.Contains(stderr, "NOT_FOUND") && !strings.Contains(stderr, "404") {
		t.Logf("crane manifest %s: %s", missing, stderr)
	}
}

// The Dockerfile builds what `make image` builds: the same base layer
// script, binary path, user, environment and labels.
func TestDockerfileMatchesImage(t *testing.T) {
	root := kubetest.RepoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	docker := string(b)
	script, err := os.ReadFile(filepath.Join(root, "hack", "build-image.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"hack/image-rootfs.sh",
		"FROM scratch",
		"COPY --from=build /out/manager /manager",
		"USER 65532:65532",
		`ENTRYPOINT ["/manager"]`,
		"-trimpath -buildvcs=false",
		`-ldflags "-s -w -X github.com/sluice-dev/sluice/internal/buildinfo.Version=${VERSION} -X github.com/sluice-dev/sluice/internal/buildinfo.Revision=${REVISION}"`,
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
		`org.opencontainers.image.source="https://github.com/sluice-dev/sluice"`,
		`org.opencontainers.image.title="sluice"`,
		`org.opencontainers.image.version="${VERSION}"`,
		`org.opencontainers.image.revision="${REVISION}"`,
	} {
		if !strings.Contains(docker, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	// And build-image.sh sets the same values.
	for _, want := range []string{
		"--entrypoint /manager", "--user 65532:65532", "-trimpath -buildvcs=false",
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
		"org.opencontainers.image.source=https://github.com/sluice-dev/sluice", "org.opencontainers.image.title=sluice",
	} {
		if !strings.Contains(string(script), want) {
			t.Errorf("hack/build-image.sh lacks %q", want)
		}
	}
	if strings.Contains(docker, "distroless") {
		t.Errorf("the Dockerfile still names a distroless base")
	}
}

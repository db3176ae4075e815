package browser

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/sluice-dev/sluice/internal/testutil/kubetest"
)

// The pictures of the local-mode dashboard that the docs show. Each is
// taken here, of local mode serving the policy the getting-started page
// gives, after the requests that page sends; `make docs-screenshots`
// (SLUICE_UPDATE_SCREENSHOTS=1) writes them into docs/img, and otherwise
// the picture taken must match the committed one.
const (
	screenshotPage = "docs/getting-started/local.md"
	screenshotFile = "docs/img/dashboard-local.png"
	// maxDiffer is the share of pixels allowed to differ: the page has no
	// clock or chart drawn here, so only anti-aliasing may move.
	maxDiffer = 0.01
)

func TestDocsScreenshots(t *testing.T) {
	chromium := findChromium(t)
	root := kubetest.RepoRoot(t)
	policy := pagePolicy(t, filepath.Join(root, screenshotPage), "policies/per-tenant.yaml")
	base := startLocal(t, map[string]string{"per-tenant.yaml": policy})

	// The page's requests: three allowed for acme, the fourth denied.
	for i := range 4 {
		req, _ := http.NewRequest(http.MethodGet, base+"/check/shop", nil)
		req.Header.Set("X-Tenant", "acme")
		req.Header.Set("X-Original-URL", "http://shop.example.com/api/cart")
		req.Header.Set("X-Original-Method", "GET")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 200, false: 403}[i < 3]; resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i+1, resp.StatusCode, want)
		}
	}

	pg := startBrowser(t, chromium)
	const row = `tbody[data-policy="shop/per-tenant"]`
	pg.step("load the dashboard", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(row)))
	pg.waitFor("the counts show the requests", `(() => {
		const cells = document.querySelectorAll('tbody[data-policy="shop/per-tenant"] tr:first-child td.num');
		return cells.length >= 2 && cells[0].textContent === '3' && cells[1].textContent === '1';
	})()`)
	// The folder is this test's temporary one; the picture names it as the
	// page's reader does.
	rename := `(() => {
		const re = new RegExp(` + jsString(regexp.QuoteMeta(os.TempDir())) + ` + '/\\S*?/\\d{3}(?=[.\\s]|$)', 'g');
		const w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
		for (let n; (n = w.nextNode()); ) n.nodeValue = n.nodeValue.replace(re, 'policies');
		return !document.body.textContent.includes(` + jsString(os.TempDir()+"/") + `);
	})()`
	if renamed, err := chromedp.Run(pg.ctx, chromedp.Evaluate[bool](rename)); err != nil || !renamed {
		t.Fatalf("naming the folder as the page does: %v (renamed %v)", err, renamed)
	}
	shot, err := chromedp.Run(pg.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if errs := pg.jsErrors(); len(errs) > 0 {
		t.Fatalf("JavaScript errors on the page: %q", errs)
	}
	keep(t, filepath.Join(root, screenshotFile), shot)
}

// keep writes the picture when asked to refresh, and otherwise compares it
// with the committed one.
func keep(t *testing.T, path string, shot []byte) {
	t.Helper()
	if os.Getenv("SLUICE_UPDATE_SCREENSHOTS") == "1" {
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", path, len(shot))
		return
	}
	committed, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: run `make docs-screenshots` and commit the picture", err)
	}
	share, err := differ(committed, shot)
	if err != nil || share > maxDiffer {
		dir := t.TempDir()
		_ = os.WriteFile(filepath.Join(dir, filepath.Base(path)), shot, 0o644)
		t.Fatalf("%s no longer shows the dashboard (%.1f%% of pixels differ, err %v); the new picture is in %s: if the change is meant, run `make docs-screenshots` and commit it",
			path, 100*share, err, dir)
	}
	t.Logf("%s: %.2f%% of pixels differ", path, 100*share)
}

// differ is the share of pixels that differ between two PNG pictures of
// the same size.
func differ(a, b []byte) (float64, error) {
	ia, err := png.Decode(bytes.NewReader(a))
	if err != nil {
		return 1, fmt.Errorf("the committed picture: %w", err)
	}
	ib, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		return 1, fmt.Errorf("the picture taken: %w", err)
	}
	if ia.Bounds() != ib.Bounds() {
		return 1, fmt.Errorf("sizes differ: %v committed, %v taken", ia.Bounds(), ib.Bounds())
	}
	r := ia.Bounds()
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if !samePixel(ia, ib, x, y) {
				n++
			}
		}
	}
	return float64(n) / float64(r.Dx()*r.Dy()), nil
}

func samePixel(a, b image.Image, x, y int) bool {
	r1, g1, b1, a1 := a.At(x, y).RGBA()
	r2, g2, b2, a2 := b.At(x, y).RGBA()
	return r1 == r2 && g1 == g2 && b1 == b2 && a1 == a2
}

// pagePolicy is the YAML block a page marks <!-- runnable-file: name -->,
// so the picture shows what the page's reader runs.
func pagePolicy(t *testing.T, page, name string) string {
	t.Helper()
	text, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- runnable-file: " + regexp.QuoteMeta(name) + " -->\\s*```yaml\\n(.*?)```")
	m := re.FindSubmatch(text)
	if m == nil {
		t.Fatalf("%s marks no runnable-file %s", page, name)
	}
	return strings.TrimSpace(string(m[1])) + "\n"
}

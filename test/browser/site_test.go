package browser

import (
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/sluice-dev/sluice/internal/testutil/docsite"
)

// TestDocsSite opens the built docs site, served over loopback HTTP, in
// headless Chromium: the front page, a guide and a reference page render
// with no console error, the search finds what a newcomer types, and no
// request the pages make leaves the machine (fonts, scripts, styles and
// the search index are all the site's own).
func TestDocsSite(t *testing.T) {
	chromium := findChromium(t)
	site := docsite.Build(t)
	base := serveDir(t, site)
	pg := startBrowser(t, chromium)
	requests := recordRequests(t, pg)

	for _, p := range []struct{ path, heading string }{
		{"/", "Sluice"},
		{"/guides/envoy-ext-authz/", "Envoy ext_authz, HTTP and gRPC"},
		{"/reference/policy/", ""},
	} {
		pg.step("open "+p.path, chromedp.Navigate(base+p.path), chromedp.WaitVisible(chromedp.CSS(`article h1`)))
		if got := strings.TrimSuffix(pg.text(`article h1`), "¶"); p.heading != "" && got != p.heading {
			t.Errorf("%s: heading %q, want %q", p.path, got, p.heading)
		}
		if got := pg.text(`nav.md-nav--primary`); !strings.Contains(got, "Getting started") || !strings.Contains(got, "Reference") {
			t.Errorf("%s: the navigation lacks its sections: %q", p.path, got)
		}
	}
	pg.step("open the front page", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`article h1`)))
	pg.waitFor("the architecture picture loads", `(() => { const i = document.querySelector('article img[src$="architecture.svg"]'); return i && i.complete && i.naturalWidth > 0; })()`)

	for _, q := range []struct{ query, want string }{{"token bucket", "token bucket"}, {"penalty", "penalty"}} {
		// ?q= opens the search with the query typed, as a shared search link does.
		pg.step("search "+q.query, chromedp.Navigate(base+"/?q="+url.QueryEscape(q.query)))
		pg.waitFor("search results for "+q.query, `[...document.querySelectorAll('.md-search-result__item')].some(r => r.textContent.toLowerCase().includes(`+jsString(q.want)+`))`)
	}
	if errs := pg.jsErrors(); len(errs) > 0 {
		t.Fatalf("console errors on the site: %q", errs)
	}
	reqs, failed := requests()
	if len(reqs) == 0 {
		t.Fatal("no request was recorded: the recorder sees nothing")
	}
	host := strings.TrimPrefix(base, "http://")
	for _, r := range reqs {
		u, err := url.Parse(r)
		if err != nil {
			t.Errorf("request to %q: %v", r, err)
			continue
		}
		if u.Scheme == "data" || u.Scheme == "blob" {
			continue
		}
		if u.Host != host {
			t.Errorf("a request left the site's loopback server: %s", r)
		}
	}
	for _, f := range failed {
		t.Errorf("a request of the site failed: %s", f)
	}
	t.Logf("%d requests recorded; the site is served at %s", len(reqs), host)
}

// serveDir serves dir over HTTP on a loopback port until the test ends.
func serveDir(t *testing.T, dir string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(dir))}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// recordRequests records the URL of every request the tab makes, and the
// ones answered 400 or above or failing, until the test reads them.
func recordRequests(t *testing.T, pg *tab) func() (requests, failed []string) {
	t.Helper()
	var (
		mu           sync.Mutex
		reqs, failed []string
	)
	err := chromedp.Listen(pg.ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			reqs = append(reqs, e.Request.URL)
		case *network.EventResponseReceived:
			if e.Response.Status >= 400 {
				failed = append(failed, e.Response.URL+": "+e.Response.StatusText)
			}
		case *network.EventLoadingFailed:
			if !e.Canceled {
				failed = append(failed, e.ErrorText)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return func() ([]string, []string) {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), reqs...), append([]string(nil), failed...)
	}
}

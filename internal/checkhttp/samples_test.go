package checkhttp_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/manifest"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
)

var update = flag.Bool("update", false, "write testdata/samples.golden from this build")

// TestSamplesDecideAsBefore is the differential test of the policies a
// user copies (config/samples, the proxies' example policies): each is
// checked alone by a fixed sequence of requests on a simulated clock, and
// every answer (decision, reason, the rate-limit headers, X-Sluice-Policy,
// X-Sluice-Over-Limit, the problem body) is held to the transcript that
// the build before per-limit modes wrote (testdata/samples.golden): the
// policies written before limits had modes decide exactly as before.
// Descriptor policies (Envoy's rate limit service) are left to the gRPC
// tests.
func TestSamplesDecideAsBefore(t *testing.T) {
	files, err := filepath.Glob("../../config/samples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	examples, _ := filepath.Glob("../../config/examples/*/*policies*.yaml")
	files = append(files, examples...)
	var b strings.Builder
	n := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := manifest.Read(context.Background(), raw, nil)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, d := range docs {
			if d.Policy == nil || d.Policy.Spec.Match.Domain != "" || len(d.Policy.Spec.Match.Descriptor) > 0 || len(d.Policy.Spec.TargetRefs) > 0 {
				continue
			}
			p, err := policy.Compile("ns", d.Name(), &d.Policy.Spec)
			if err != nil {
				t.Fatalf("%s %s: %v", f, d.Name(), err)
			}
			fmt.Fprintf(&b, "## %s %s\n", filepath.Base(f), d.Name())
			transcript(t, &b, p, &d.Policy.Spec)
			n++
		}
	}
	if n < 10 {
		t.Fatalf("%d sample policies read; the globs miss the samples", n)
	}
	golden := filepath.Join("testdata", "samples.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("line %d differs from the transcript before:\n got: %s\nwant: %s", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("%d lines, the transcript before has %d", len(gl), len(wl))
	}
}

// transcript checks p alone with 14 requests (that its match selects),
// 7 at one instant and 7 spread over a minute, and writes every answer.
func transcript(t *testing.T, b *strings.Builder, p *policy.Policy, spec *ratelimitv1alpha1.RateLimitPolicySpec) {
	now := time.Date(2027, time.January, 15, 9, 30, 0, 0, time.UTC) // fixed: the golden holds reset times
	clock := func() time.Time { return now }
	c := checktest.New(t, check.Options{Now: clock}, p)
	for i := range 14 {
		if i >= 7 {
			now = now.Add(10 * time.Second)
		}
		req := sampleRequest(spec)
		out, err := c.Check(context.Background(), check.Input{Namespace: "ns", Request: req, Holder: fmt.Sprintf("h%d", i)})
		if err != nil {
			fmt.Fprintf(b, "%d error %v\n", i, err)
			continue
		}
		h := http.Header{}
		checkhttp.SetHeaders(h, out, now)
		fmt.Fprintf(b, "%d allowed=%v reason=%s", i, out.Allowed, out.Reason)
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range h {
				if !yield(k) {
					return
				}
			}
		}) {
			fmt.Fprintf(b, " %s=%q", k, h[k])
		}
		if r, ok := checkhttp.RuleOf(out); ok {
			fmt.Fprintf(b, " rule=%q", r.String())
		}
		if v := overLimit(out); v != "" {
			fmt.Fprintf(b, " over=%q", v)
		}
		if !out.Allowed {
			body, _ := checkhttp.DenialBody(out, 429, nil)
			fmt.Fprintf(b, " body=%q", body)
		}
		b.WriteString("\n")
	}
}

// sampleRequest is a request the policy's match selects: its first host,
// path and method, every header it names, and the headers keys read.
func sampleRequest(spec *ratelimitv1alpha1.RateLimitPolicySpec) *policy.Request {
	m := &spec.Match
	r := &policy.Request{Method: "GET", Host: "shop.example.com", Path: "/", Header: http.Header{},
		ClientIP: netip.MustParseAddr("192.0.2.1")}
	if len(m.Hosts) > 0 {
		r.Host = strings.Replace(string(m.Hosts[0]), "*", "a", 1)
	}
	if len(m.Paths) > 0 {
		r.Path = string(m.Paths[0])
		if prefix, ok := strings.CutSuffix(r.Path, "*"); ok {
			r.Path = prefix + "x"
		}
	}
	if len(m.Methods) > 0 {
		r.Method = string(m.Methods[0])
	}
	for _, h := range []string{"X-Api-Key", "X-User-Id", "X-Tenant", "Authorization", "X-Plan"} {
		r.Header.Set(h, "k1")
	}
	for _, h := range m.Headers {
		v := "present"
		if h.Value != nil {
			v = *h.Value
		}
		r.Header.Set(string(h.Name), v)
	}
	return r
}

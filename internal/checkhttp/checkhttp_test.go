package checkhttp

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

func testPolicy(t *testing.T, style ratelimitv1alpha1.HeaderStyle) *policy.Policy {
	t.Helper()
	spec := ratelimitv1alpha1.RateLimitPolicySpec{
		Key:      "global",
		Response: ratelimitv1alpha1.Response{Headers: style},
		Limits: []ratelimitv1alpha1.Limit{{Name: "burst",
			TokenBucket: &ratelimitv1alpha1.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: "1s"}}},
	}
	p, err := policy.Compile("shop", "api", &spec)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func denied(p *policy.Policy, retry time.Duration) *check.Outcome {
	return &check.Outcome{Allowed: false, Reason: check.ReasonLimited, Decider: p, Tightest: 0, RetryAfter: retry,
		Limits: []check.LimitResult{{Policy: p, Limit: &p.Limits[0], Result: ratelimit.Result{Remaining: 0, Reset: 9500 * time.Millisecond, RetryAfter: retry}}}}
}

// encoded is what encoding/json makes of p: the bytes every problem body
// must be.
func encoded(t testing.TB, p Problem) string {
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(p); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The denial fast path writes exactly what encoding DenialProblem with
// encoding/json gives, for every reason.
func TestAppendDenialMatchesTheEncoder(t *testing.T) {
	p := testPolicy(t, ratelimitv1alpha1.HeaderStyleBoth)
	missing := denied(p, 0)
	missing.Reason, missing.Tightest, missing.Limits = check.ReasonMissingKey, -1, nil
	unavailable := denied(p, 0)
	unavailable.Reason, unavailable.Tightest, unavailable.Limits = check.ReasonStoreUnavailable, -1, nil
	banned := denied(p, 90*time.Second)
	banned.Reason, banned.Limits[0].Banned = check.ReasonBanned, true
	for _, out := range []*check.Outcome{denied(p, 1500*time.Millisecond), denied(p, ratelimit.Never), denied(p, 0), missing, unavailable, banned} {
		fast := httptest.NewRecorder()
		AppendDenial(fast, out, 429, []byte("left over"))
		want := encoded(t, DenialProblem(out, 429))
		if fast.Body.String() != want {
			t.Errorf("fast path %s\nencoder   %s", fast.Body, want)
		}
		var pr Problem
		if err := json.Unmarshal(fast.Body.Bytes(), &pr); err != nil || fast.Code != 429 || fast.Header().Get("Content-Type") != ProblemContentType {
			t.Errorf("body %s: %v, status %d", fast.Body, err, fast.Code)
		}
	}
	if d := DenialProblem(denied(p, 1500*time.Millisecond), 429); d.Detail != `limit "burst" of policy shop/api is exhausted; retry in 2s` {
		t.Errorf("detail %q", d.Detail)
	}
	// A ban is the bucket's: the detail says so and names no limit.
	if d := DenialProblem(banned, 429); d.Detail != `policy shop/api has banned this key after repeated denials (its penalty box); retry in 90s` ||
		d.Limit != "" || d.Type != ProblemRateLimited || *d.RetryAfter != 90 {
		t.Errorf("banned: %+v", d)
	}
}

// WriteProblem renders any problem exactly as encoding/json does, whatever
// the text (escapes, HTML characters, invalid UTF-8, U+2028).
func FuzzWriteProblemMatchesTheEncoder(f *testing.F) {
	f.Add("about:blank", "Edit rejected", 422, `spec.limits[0]: "ten" <b>&</b>`, "ns/p", "", int64(-1))
	f.Add(ProblemRateLimited, "Rate limit exceeded", 429, "tab\there\nnew line \x00 \xff \u2028", "", "l\\x", int64(3))
	f.Fuzz(func(t *testing.T, typ, title string, status int, detail, policy, limit string, retry int64) {
		p := Problem{Type: typ, Title: title, Status: status, Detail: detail, Policy: policy, Limit: limit}
		if retry >= 0 {
			p.RetryAfter = &retry
		}
		rec := httptest.NewRecorder()
		if status < 100 || status > 999 {
			p.Status = 400
		}
		WriteProblem(rec, p)
		if want := encoded(t, p); rec.Body.String() != want {
			t.Fatalf("WriteProblem %q\nencoder      %q", rec.Body, want)
		}
	})
}

func TestHeaders(t *testing.T) {
	now := time.Unix(1_800_000_000, 250_000_000)
	for _, tt := range []struct {
		style ratelimitv1alpha1.HeaderStyle
		want  map[string]string
	}{
		{ratelimitv1alpha1.HeaderStyleBoth, map[string]string{"Retry-After": "2", "RateLimit": `"api/burst";r=0;t=10`, "RateLimit-Policy": `"api/burst";q=10;w=10`,
			"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1800000010"}},
		{ratelimitv1alpha1.HeaderStyleIETF, map[string]string{"Retry-After": "2", "RateLimit": `"api/burst";r=0;t=10`, "RateLimit-Policy": `"api/burst";q=10;w=10`}},
		{ratelimitv1alpha1.HeaderStyleLegacy, map[string]string{"Retry-After": "2", "X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1800000010"}},
		{ratelimitv1alpha1.HeaderStyleNone, map[string]string{"Retry-After": "2"}},
	} {
		h := http.Header{}
		AppendHeaders(h, denied(testPolicy(t, tt.style), 1500*time.Millisecond), now, new(HeaderScratch))
		if len(h) != len(tt.want) {
			t.Errorf("%s: headers %v, want %v", tt.style, h, tt.want)
		}
		for k, v := range tt.want {
			if got := h[k]; len(got) != 1 || got[0] != v {
				t.Errorf("%s: %s = %q, want %q", tt.style, k, got, v)
			}
		}
		// A handler appending to one header must not change another.
		h["RateLimit"] = append(h["RateLimit"], "x")
		if tt.style == ratelimitv1alpha1.HeaderStyleBoth && h["X-RateLimit-Remaining"][0] != "0" {
			t.Error("appending to RateLimit changed X-RateLimit-Remaining")
		}
	}
}

// headerOnly is a ResponseWriter that keeps nothing but its header map.
type headerOnly http.Header

func (h headerOnly) Header() http.Header         { return http.Header(h) }
func (h headerOnly) Write(b []byte) (int, error) { return len(b), nil }
func (h headerOnly) WriteHeader(int)             {}

// A denial's body costs no allocation once its buffer has grown.
func TestAppendDenialAllocations(t *testing.T) {
	out := denied(testPolicy(t, ratelimitv1alpha1.HeaderStyleBoth), 1500*time.Millisecond)
	w := headerOnly{}
	buf := AppendDenial(w, out, 429, nil)
	if n := testing.AllocsPerRun(100, func() { buf = AppendDenial(w, out, 429, buf) }); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}

// The IETF headers name a limit as strconv.Quote("<policy>/<limit>") does,
// whatever the names hold.
func FuzzQuotaID(f *testing.F) {
	for _, names := range [][2]string{{"api", "burst"}, {`a"b`, `\`}, {"\xff", "\x80x"}, {"é\xc3", "\xa9"}, {"", ""}, {"\u2028", "\x00"}} {
		f.Add(names[0], names[1])
	}
	f.Fuzz(func(t *testing.T, policyName, limitName string) {
		lr := &check.LimitResult{Policy: &policy.Policy{Name: policyName}, Limit: &policy.Limit{Name: limitName}}
		got := string(appendQuotaID([]byte("x"), lr))
		if want := "x" + strconv.Quote(policyName+"/"+limitName); got != want {
			t.Fatalf("appendQuotaID(%q, %q) = %s, want %s", policyName, limitName, got, want)
		}
	})
}

// Every header value of an answer comes from one allocation.
func TestAppendHeadersAllocations(t *testing.T) {
	out := denied(testPolicy(t, ratelimitv1alpha1.HeaderStyleBoth), 1500*time.Millisecond)
	h, sc, now := http.Header{}, new(HeaderScratch), time.Now()
	AppendHeaders(h, out, now, sc)
	if n := testing.AllocsPerRun(100, func() { AppendHeaders(h, out, now, sc) }); n != 1 {
		t.Errorf("%v allocations, want 1", n)
	}
}

// Render renders the values AppendHeaders sets, for every style and for
// allowed and denied answers, and nothing for an answer without headers.
func TestRenderMatchesAppendHeaders(t *testing.T) {
	now := time.Unix(1_800_000_000, 250_000_000)
	sc := new(HeaderScratch)
	for _, style := range []ratelimitv1alpha1.HeaderStyle{ratelimitv1alpha1.HeaderStyleBoth, ratelimitv1alpha1.HeaderStyleIETF, ratelimitv1alpha1.HeaderStyleLegacy, ratelimitv1alpha1.HeaderStyleNone} {
		allowed := denied(testPolicy(t, style), 0)
		allowed.Allowed, allowed.Reason, allowed.Limits[0].Remaining = true, check.ReasonAllowed, 3
		for _, out := range []*check.Outcome{denied(testPolicy(t, style), 1500*time.Millisecond), allowed, {Allowed: true, Tightest: -1}} {
			h := http.Header{}
			AppendHeaders(h, out, now, new(HeaderScratch))
			sc.Render(out, now)
			for i, name := range HeaderNames {
				want, got := h[name], sc.Value(i)
				if len(want) == 0 && got != nil || len(want) == 1 && string(got) != want[0] {
					t.Errorf("%s: %s = %q, AppendHeaders %q", style, name, got, want)
				}
			}
		}
	}
	out := denied(testPolicy(t, ratelimitv1alpha1.HeaderStyleBoth), 1500*time.Millisecond)
	if n := testing.AllocsPerRun(100, func() { sc.Render(out, now) }); n != 0 {
		t.Errorf("Render: %v allocations, want 0", n)
	}
}

package policy

import (
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/cel-go/cel"

	"github.com/sluice-dev/sluice/internal/httpserve"
)

// The bounds the cost estimate assumes are the check endpoint's.
func TestWhenBoundsAreTheEndpoints(t *testing.T) {
	if maxHeaderBytes != httpserve.MaxHeaderBytes {
		t.Fatalf("maxHeaderBytes = %d, the endpoint accepts %d", maxHeaderBytes, httpserve.MaxHeaderBytes)
	}
}

// filler repeats unit up to n bytes.
func filler(unit string, n int) string {
	return strings.Repeat(unit, n/len(unit)+1)[:n]
}

// namedHeaders are the headers the expressions below read.
var namedHeaders = []string{"X-A", "X-B", "X-C", "X-Re", "User-Agent", "X-Plan", "Authorization"}

// worstRequests are the largest requests the check endpoint accepts, in
// the shapes that cost the most: every named header at 64 KiB, a 16 KiB
// path, host and query, the most header and query entries that fit, and
// header values of exactly the longest input a regex runs on. Text that
// almost matches the patterns keeps RE2 busy.
func worstRequests() map[string]*Request {
	big := func(unit string, valueLen int) *Request {
		r := &Request{
			Method:   filler("GET", maxHeaderBytes),
			Host:     filler("a.", maxURLBytes-1) + "a",
			Path:     "/" + filler("api/", maxURLBytes-1),
			RawQuery: "q=" + filler("a", maxURLBytes-2),
			Header:   http.Header{},
			ClientIP: netip.MustParseAddr("2001:db8:1:2:3:4:5:6"),
		}
		for _, h := range namedHeaders {
			r.Header.Set(h, filler(unit, valueLen))
		}
		return r
	}
	many := big("a", 16)
	many.Method = "GET"
	for i := len(many.Header); i < maxHeaderEntries; i++ {
		many.Header.Set(fmt.Sprintf("X-%d", i), "v")
	}
	var q strings.Builder
	for i := 0; q.Len() < maxURLBytes-8; i++ {
		fmt.Fprintf(&q, "%x&", i)
	}
	many.RawQuery = q.String()
	const ua = "Mozilla/5.0 crawle spide bingbo googlebo "
	return map[string]*Request{
		"64 KiB values of a":            big("a", maxHeaderBytes),
		"64 KiB values like user agent": big(ua, maxHeaderBytes),
		"regex-sized values of a":       big("a", regexInputMax),
		"regex-sized values like agent": big(ua, regexInputMax),
		"most entries":                  many,
		"descriptor, one 64 KiB value":  bigDescriptor("a", MaxDescriptorBytes-len("x-a"), 1),
		"descriptor, regex-sized agent": bigDescriptor(ua, regexInputMax, len(namedHeaders)),
		"descriptor, most entries":      bigDescriptor("a", MaxDescriptorBytes/MaxDescriptorEntries-8, MaxDescriptorEntries),
	}
}

// bigDescriptor is a rate limit service descriptor at the bounds: n
// entries (the named headers' lower-case names first) with values of
// valueLen bytes, and the longest domain.
func bigDescriptor(unit string, valueLen, n int) *Request {
	r := &Request{Kind: KindDescriptor, Domain: filler("d.", maxDomainBytes)}
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		if i < len(namedHeaders) {
			key = strings.ToLower(namedHeaders[i])
		}
		r.Descriptor = append(r.Descriptor, DescriptorEntry{Key: key, Value: filler(unit, valueLen)})
	}
	return r
}

// meteredWhen compiles expr as compileWhen does, into a program that
// meters its cost with the prices the estimate uses.
func meteredWhen(expr string) (prg cel.Program, estimate uint64, err error) {
	ast, costs, err := checkWhen(expr)
	if err != nil {
		return nil, 0, err
	}
	est, err := whenEnv.EstimateCost(ast, costs)
	if err != nil {
		return nil, 0, err
	}
	prg, err = whenProgram(ast, cel.CostTracking(costs), cel.EvalOptions(cel.OptTrackCost))
	return prg, est.Max, err
}

func orChain(term string, n int) string {
	terms := make([]string, n)
	for i := range terms {
		terms[i] = fmt.Sprintf(term, i)
	}
	return strings.Join(terms, " || ")
}

func literalList(n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf("%q", fmt.Sprint(i))
	}
	return "[" + strings.Join(items, ",") + "]"
}

// hostileWhens are expressions a tenant could write to slow the check
// endpoint down: regexes from the request, regexes and traversals over
// the largest headers, long chains, conversions and loops.
var hostileWhens = []string{
	`request.headers["x-a"].matches(request.headers["x-re"])`,
	`matches(request.path, request.query["re"])`,
	`request.headers["user-agent"].matches("(?i)" + request.headers["x-a"])`,
	`request.headers["user-agent"].matches("(?i)(bot|crawler|spider|curl)")`,
	`request.headers["user-agent"].matches("(?i)^.*(googlebot|bingbot|yandex|baiduspider|duckduckbot).*$")`,
	`request.headers["x-a"].matches("a{1000}")`,
	`request.headers["x-a"].matches("(a*)*b") || request.path.matches("(a|b|c|d|e|f|g)+z")`,
	`request.method.matches("^(GET|POST)$")`,
	`request.headers["x-a"].contains(request.headers["x-b"])`,
	`request.headers["x-a"].contains(request.headers["x-b"]) && request.headers["x-b"].contains(request.headers["x-c"])`,
	orChain(`request.headers["x-a"].contains("%d")`, 4),
	orChain(`request.headers["x-a"] == "%d"`, 300),
	orChain(`request.path.startsWith("/%d")`, 300),
	`(request.headers["x-a"] + request.headers["x-b"] + request.headers["x-c"]).contains("b")`,
	`size(request.headers["x-a"]) + size(request.path) + size(request.host) > 1`,
	`int(request.headers["x-a"]) > 0 || double(request.path) > 0.0`,
	`timestamp(request.headers["x-a"]) > timestamp("2020-01-01T00:00:00Z")`,
	`duration(request.query["q"]) > duration("1s")`,
	`string(bytes(request.headers["x-a"])) == "a"`,
	`request.headers.exists(k, k.startsWith("x-debug"))`,
	`request.headers.exists(k, request.headers[k].matches("bot"))`,
	`request.query.exists(k, k == "zz")`,
	`request.headers.all(a, request.headers.all(b, a == b))`,
	`size(request.headers.filter(k, k.contains("a"))) > 0`,
	literalList(60) + `.exists(a, ` + literalList(50) + `.exists(b, a + b == request.path))`,
	literalList(1000) + `.exists(p, request.headers["x-a"].startsWith(p))`,
	`"x-a" in request.headers && request.headers == request.query`,
	`request.descriptor["x-a"].matches(request.descriptor["x-re"])`,
	`request.descriptor["x-a"].contains(request.descriptor["x-b"])`,
	`request.descriptor["user-agent"].matches("(?i)(bot|crawler|spider|curl)")`,
	`request.descriptor.exists(k, request.descriptor[k].matches("bot"))`,
	`request.descriptor.all(a, request.descriptor.all(b, a == b))`,
	`request.domain.matches("(a*)*b") || request.domain.contains(request.descriptor["x-a"])`,
	orChain(`request.descriptor["x-a"] == "%d"`, 300),
}

// No expression a tenant can write costs more than the budget per check:
// either it does not compile, or it costs at most its estimate, and so at
// most the budget, on the largest requests the endpoint accepts.
func TestWhenHostileExpressionsStayWithinBudget(t *testing.T) {
	reqs := worstRequests()
	names := make([]string, 0, len(reqs))
	for name := range reqs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, expr := range hostileWhens {
		t.Run(truncate(expr), func(t *testing.T) {
			prg, estimate, err := meteredWhen(expr)
			if err != nil {
				if !strings.Contains(err.Error(), "over the budget") && !strings.Contains(err.Error(), "must be a string literal") {
					t.Fatalf("rejected for another reason: %v", err)
				}
				return
			}
			if estimate > whenCostBudget {
				t.Fatalf("compiled with an estimated cost of %d, over the budget of %d", estimate, whenCostBudget)
			}
			for _, name := range names {
				var vars requestVars
				vars.reset(reqs[name])
				_, det, err := prg.Eval(&vars)
				if det.ActualCost() == nil {
					t.Fatalf("%s: no cost was metered (error %v)", name, err)
				}
				cost := *det.ActualCost()
				if cost > estimate || cost > whenCostBudget {
					t.Errorf("%s: cost %d, over the estimate %d or the budget %d (error %v)", name, cost, estimate, whenCostBudget, err)
				}
			}
		})
	}
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80]
	}
	return s
}

// The expressions people write compile; the expensive ones are refused
// with a message that names the field, the cost, the budget and the fix.
func TestWhenCostAtCompile(t *testing.T) {
	accepted := []string{
		`"x-api-key" in request.headers`,
		`request.headers["x-plan"] == "free"`,
		`request.headers["x-plan"] in ["free", "trial"]`,
		`request.method in ["POST", "PUT", "PATCH", "DELETE"]`,
		`request.path.startsWith("/api/") && !request.path.endsWith(".png")`,
		`request.host.endsWith(".example.com") || request.host == "example.com"`,
		`request.client_ip.startsWith("10.")`,
		`request.query["debug"] == "1"`,
		`"authorization" in request.headers && !request.headers["authorization"].startsWith("Bearer ")`,
		`request.headers["user-agent"].contains("bot")`,
		orChain(`request.headers["user-agent"].contains("bot%d")`, 3),
		`request.headers["user-agent"].matches("(?i)(bot|crawler|spider|curl)")`,
		`request.headers["user-agent"].matches("(?i)(googlebot|bingbot|yandex|baiduspider|duckduckbot)")`,
		`request.headers["user-agent"].matches("^curl/")`,
		`request.path.matches("^/api/v[0-9]+/users/[^/]+$")`,
		`matches(request.path, "\\.(png|jpg|gif|css|js)$")`,
		`request.headers["x-request-id"].matches("^[0-9a-f]{32}$")`,
		`["/api/", "/v2/"].exists(p, request.path.startsWith(p))`,
		`size(request.headers) > 50 || size(request.path) > 2048`,
		`int(request.query["page"]) > 100`,
	}
	for _, expr := range accepted {
		if _, err := compileWhen(expr); err != nil {
			t.Errorf("%s: %v", expr, err)
		}
	}

	rejected := []struct{ expr, want string }{
		{`request.headers["x-a"].matches(request.headers["x-re"])`, "the pattern of matches must be a string literal (line 1, column 31)"},
		{`matches(request.path, request.query["re"])`, "the pattern of matches must be a string literal"},
		{`request.headers["user-agent"].matches("(?i)" + "bot")`, "the pattern of matches must be a string literal"},
		{`request.headers.exists(k, k.startsWith("x-debug"))`, "estimated cost 98306 is over the budget of 20000 per check"},
		{`request.headers["x-a"].matches("^[a-z]{100}$")`, "is over the budget of 20000"},
		{orChain(`request.headers["user-agent"].contains("bot%d")`, 4), "is over the budget of 20000"},
		{`request.headers.all(a, request.headers.all(b, a == b))`, "is over the budget"},
		{`request.path.matches("(")`, "invalid regex"},
	}
	for _, tt := range rejected {
		_, err := compileYAML("match: {when: '" + strings.ReplaceAll(tt.expr, "'", "''") + "'}\n" + oneLimit)
		if err == nil {
			t.Errorf("%s: compiled", tt.expr)
			continue
		}
		for _, want := range []string{"spec.match.when", tt.want} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not contain %q", tt.expr, err, want)
			}
		}
	}
	_, err := compileWhen(`request.headers.exists(k, k.startsWith("x-debug"))`)
	for _, want := range []string{"64 KiB of headers", "16 KiB URL", "do not iterate over request.headers"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
}

// A request larger than the bounds the estimate assumed (a programmatic
// caller is not held to the endpoint's limits) makes what the expression
// reads an evaluation error, and the caller applies the policy.
func TestWhenOverTheBoundsIsAnError(t *testing.T) {
	long := func(n int) string { return filler("a", n) }
	manyHeaders := req("GET", "h", "/")
	for i := 0; i <= maxHeaderEntries; i++ {
		manyHeaders.Header.Set(fmt.Sprintf("X-%d", i), "v")
	}
	tests := []struct {
		name    string
		expr    string
		req     *Request
		wantErr bool
	}{
		{"header at the bound", `request.headers["x-a"] == "b"`, req("GET", "h", "/", "X-A", long(maxHeaderBytes)), false},
		{"header over the bound", `request.headers["x-a"] == "b"`, req("GET", "h", "/", "X-A", long(maxHeaderBytes+1)), true},
		{"another header over the bound", `request.path == "/"`, req("GET", "h", "/", "X-A", long(maxHeaderBytes+1)), false},
		{"too many headers", `"x-a" in request.headers`, manyHeaders, true},
		{"path over the bound", `request.path.startsWith("/a")`, req("GET", "h", "/"+long(maxURLBytes)), true},
		{"host over the bound", `request.host.endsWith(".a")`, req("GET", long(maxURLBytes+1), "/"), true},
		{"query over the bound", `"q" in request.query`, req("GET", "h", "/?q="+long(maxURLBytes)), true},
		{"method over the bound", `request.method == "GET"`, req(long(maxHeaderBytes+1), "h", "/"), true},
		{"regex input at the bound", `request.headers["user-agent"].matches("bot")`, req("GET", "h", "/", "User-Agent", long(regexInputMax)), false},
		{"regex input over the bound", `request.headers["user-agent"].matches("bot")`, req("GET", "h", "/", "User-Agent", long(regexInputMax+1)), true},
		{"regex input over the bound, negated", `!request.headers["user-agent"].matches("bot")`, req("GET", "h", "/", "User-Agent", long(regexInputMax+1)), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustCompile(t, "match: {when: '"+tt.expr+"'}\n"+oneLimit)
			var e Eval
			e.Reset(tt.req)
			_, err := e.Match(p)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, want an error: %v", err, tt.wantErr)
			}
		})
	}
}

// A loop that outlasts the deadline is interrupted: an evaluation error.
func TestWhenDeadlineInterruptsLoops(t *testing.T) {
	w, err := compileWhen(literalList(200) + `.exists(x, x == request.path)`)
	if err != nil {
		t.Fatal(err)
	}
	var vars requestVars
	vars.reset(req("GET", "h", "/"))
	if _, err := w.evalWithin(&vars, time.Hour); err != nil {
		t.Fatalf("with time to spare: %v", err)
	}
	_, err = w.evalWithin(&vars, -time.Second)
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("past the deadline: error %v, want an interruption", err)
	}
}

// BenchmarkWhenWorstCase measures a check's `when` at the budget's edge on
// the largest requests, as a multiple of a trivial expression's time in
// the same run (the machine's speed cancels out), and per unit of cost.
func BenchmarkWhenWorstCase(b *testing.B) {
	reqs := worstRequests()
	cases := []struct{ name, expr, req string }{
		{"regex on a user agent", `request.headers["user-agent"].matches("(?i)(bot|crawler|spider|curl)")`, "regex-sized values like agent"},
		{"regex, large program", `request.headers["user-agent"].matches("(?i)(googlebot|bingbot|yandex|baiduspider|duckduckbot|slurp|crawler|spider)")`, "regex-sized values like agent"},
		{"regex, large program on a", `request.headers["user-agent"].matches("(?i)(googlebot|bingbot|yandex|baiduspider|duckduckbot|slurp|crawler|spider)")`, "regex-sized values of a"},
		{"three contains on 64 KiB", orChain(`request.headers["x-a"].contains("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa%d")`, 3), "64 KiB values of a"},
		{"300 comparisons of a 64 KiB header", orChain(`request.headers["x-a"] == "%d"`, 300), "64 KiB values of a"},
		{"nested loops", literalList(40) + `.exists(a, ` + literalList(40) + `.exists(b, a + b == request.path))`, "64 KiB values of a"},
	}
	trivial, err := compileWhen(`request.method == "GET"`)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			w, err := compileWhen(c.expr)
			if err != nil {
				b.Fatal(err)
			}
			_, estimate, _ := meteredWhen(c.expr)
			r := reqs[c.req]
			var vars requestVars
			vars.reset(r)
			// The request's maps are built once per request, whatever the
			// number of policies: not part of one expression's time.
			vars.ResolveName("request.headers")
			vars.ResolveName("request.query")
			var worst, base time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				_, _ = w.eval(&vars)
				mid := time.Now()
				_, _ = trivial.eval(&vars)
				worst += mid.Sub(start)
				base += time.Since(mid)
			}
			b.ReportMetric(float64(worst.Nanoseconds())/float64(b.N), "ns/check")
			b.ReportMetric(float64(worst)/float64(base), "x-trivial")
			b.ReportMetric(float64(estimate), "cost")
			b.ReportMetric(float64(worst.Nanoseconds())/float64(b.N)/float64(estimate), "ns/unit")
		})
	}
}

// A descriptor over the bounds the estimate assumed makes request.descriptor
// an evaluation error, and the caller applies the policy.
func TestWhenOverTheDescriptorBoundsIsAnError(t *testing.T) {
	p := mustCompile(t, "match: {domain: edge, when: '\"x-a\" in request.descriptor'}\n"+oneLimit)
	for _, tt := range []struct {
		name    string
		req     *Request
		wantErr bool
	}{
		{"at the bounds", bigDescriptor("a", MaxDescriptorBytes-len("x-a"), 1), false},
		{"over the bytes", bigDescriptor("a", MaxDescriptorBytes, 1), true},
		{"over the entries", bigDescriptor("a", 1, MaxDescriptorEntries+1), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Domain = "edge"
			var e Eval
			e.Reset(tt.req)
			_, err := e.Match(p)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, want an error: %v", err, tt.wantErr)
			}
		})
	}
}

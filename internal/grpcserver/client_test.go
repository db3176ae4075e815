package grpcserver

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/decisionlog"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/testutil/syncbuf"
)

// clients are the client fields of the decision log's lines in buf.
func clients(t *testing.T, buf *syncbuf.Buffer) []any {
	t.Helper()
	var out []any
	sc := bufio.NewScanner(strings.NewReader(buf.String()))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("decision log line %q: %v", sc.Text(), err)
		}
		out = append(out, line["client"])
	}
	return out
}

// TestClientAddressIsPlain: an IPv4 client that Envoy names in IPv6's
// mapped form (::ffff:192.0.2.1, from a dual-stack listener) is
// 192.0.2.1 wherever Sluice reports it: the decision log of a rate limit
// service denial (its remote_address entry) and of an ext_authz one (its
// source address).
func TestClientAddressIsPlain(t *testing.T) {
	var buf syncbuf.Buffer
	log := decisionlog.New(&buf, 100, nil)
	e := startWith(t, check.Options{Backend: memstore.New().Backend(), Observer: check.LogDenials(log)}, Options{Domains: DomainBindings{"edge": "shop"}}, nil,
		compile(t, "shop", "per-address", "match: {domain: edge, descriptor: [{key: remote_address}]}\nkey: '{descriptor:remote_address}'\nlimits: [{name: minute, fixedWindow: {limit: 1, window: 1m}}]"),
		compile(t, "shop", "per-client", "match: {paths: ['/api']}\nlimits: [{name: minute, fixedWindow: {limit: 1, window: 1m}}]"))
	rls := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlsDescriptor("remote_address", "::ffff:192.0.2.1")}}
	for i, want := range []ratelimitv3.RateLimitResponse_Code{rlsOK, rlsOver} {
		if got := e.shouldRateLimit(t, rls).GetOverallCode(); got != want {
			t.Fatalf("rate limit service request %d: %v, want %v", i, got, want)
		}
	}
	authz := req{host: "shop.example.com", path: "/api", source: "::ffff:192.0.2.2", extensions: shop}
	for i, want := range []int{200, 429} {
		if got := e.check(t, authz).httpStatus; got != want {
			t.Fatalf("ext_authz check %d: HTTP %d, want %d", i, got, want)
		}
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	if got := clients(t, &buf); len(got) != 2 || got[0] != "192.0.2.1" || got[1] != "192.0.2.2" {
		t.Errorf("the decision log's clients: %v, want 192.0.2.1 (rate limit service) and 192.0.2.2 (ext_authz)", got)
	}
}

package grpcserver

import (
	"strings"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"

	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// With redis-server killed, each policy's failureMode answers, as on the
// HTTP endpoint: Open allows, Closed denies with the limiter-unavailable
// problem; decisions resume once Redis is back.
func TestRedisDownFailureMode(t *testing.T) {
	if testing.Short() {
		t.Skip("kills redis-server")
	}
	srv := redistest.Start(t)
	store := storetest.Redis(t, srv.Addr())
	e := start(t, store.Backend(), Options{}, nil,
		compile(t, "open", "p", "failureMode: Open\nkey: '{header:X-Client}'\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"),
		compile(t, "closed", "p", "failureMode: Closed\nkey: global\nlimits: [{name: l, fixedWindow: {limit: 1000, window: 1h}}]"))
	client := "a"
	check := func(ns string) answer {
		return e.check(t, req{host: "h", path: "/", headers: map[string]string{"x-client": client}, extensions: map[string]string{"namespace": ns}})
	}
	if a, b, c := check("open"), check("open"), check("open"); a.code != codes.OK || b.code != codes.OK || c.httpStatus != 429 {
		t.Fatalf("before the fault: %v %v %d, want OK OK 429", a.code, b.code, c.httpStatus)
	}
	if a := check("closed"); a.code != codes.OK {
		t.Fatalf("closed before the fault: %v", a.code)
	}

	client = "b" // a fresh client: a's denial is cached, rightly, without Redis
	srv.Kill()
	for i := range 5 {
		if a := check("open"); a.code != codes.OK {
			t.Errorf("fail open, check %d: %v %d, want OK", i, a.code, a.httpStatus)
		}
		a := check("closed")
		if a.code != codes.PermissionDenied || a.httpStatus != 429 || !strings.Contains(a.body, "limiter-unavailable") || a.client["Retry-After"] == "" {
			t.Errorf("fail closed, check %d: %v %d %s %v", i, a.code, a.httpStatus, a.body, a.client)
		}
	}

	srv.Restart()
	deadline := time.Now().Add(5 * time.Second)
	for check("closed").code != codes.OK {
		if time.Now().After(deadline) {
			t.Fatal("decisions did not resume within 5s of the restart")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// With redis-server killed, a rate limit service request is answered by
// the failureMode of the policies its descriptors match: Closed makes its
// descriptor and the request OVER_LIMIT, Open leaves them OK.
func TestRLSRedisDownFailureMode(t *testing.T) {
	if testing.Short() {
		t.Skip("kills redis-server")
	}
	srv := redistest.Start(t)
	store := storetest.Redis(t, srv.Addr())
	e := start(t, store.Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "open", "failureMode: Open\nmatch: {descriptor: [{key: open}]}\nlimits: [{name: l, fixedWindow: {limit: 100, window: 1h}}]"),
		compile(t, "ns", "closed", "failureMode: Closed\nmatch: {descriptor: [{key: closed}]}\nlimits: [{name: l, fixedWindow: {limit: 100, window: 1h}}]"))
	open := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlsDescriptor("open", "a")}}
	both := &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlsDescriptor("open", "a"), rlsDescriptor("closed", "a")}}
	if got := codesOf(e.shouldRateLimit(t, both)); got[0] != rlsOK {
		t.Fatalf("before the fault: %v", got)
	}
	srv.Kill()
	for i := range 3 {
		if got := codesOf(e.shouldRateLimit(t, open)); got[0] != rlsOK || got[1] != rlsOK {
			t.Errorf("fail open, request %d: %v, want OK", i, got)
		}
		if got := codesOf(e.shouldRateLimit(t, both)); got[0] != rlsOver || got[1] != rlsOK || got[2] != rlsOver {
			t.Errorf("fail closed, request %d: (overall, open, closed) %v, want OVER_LIMIT OK OVER_LIMIT", i, got)
		}
	}
}

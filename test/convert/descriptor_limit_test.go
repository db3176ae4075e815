package convert

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

// peerConfig limits descriptors {configured: *} to 2 a minute.
const peerConfig = `domain: edge
descriptors:
- key: configured
  rate_limit: {unit: minute, requests_per_unit: 2}
`

// sluicePolicy is peerConfig as a policy of the namespace edge is bound to.
const sluicePolicy = `apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: configured, namespace: edge-ns}
spec:
  match: {descriptor: [{key: configured}]}
  limits: [{name: minute, fixedWindow: {limit: 2, window: 1m, alignment: Clock}}]
`

// limited is one descriptor of key and value carrying its own limit of
// perUnit per unit (unit UNKNOWN: none); checkOnly sends it with
// hits_addend 0, a check that counts nothing.
type limited struct {
	key, value string
	perUnit    uint32
	unit       typev3.RateLimitUnit
	checkOnly  bool
}

// TestDescriptorLimitsAsEnvoyRatelimit sends envoyproxy/ratelimit's
// service_cmd and `manager local`, each on a redis-server of its own, the
// same requests whose descriptors carry their own limit
// (RateLimitDescriptor.limit), 0 among them, and one sent with hits_addend
// 0 (a check that counts nothing): every answer's codes must agree, and so
// must every descriptor's limit (requests per unit, unit), its remaining
// units and its time until reset (to the second), except the remaining of
// a descriptor that did not deny in a denied request (the peer reports
// its count, Sluice charged nothing and reports no figures when the cache
// of denials answered).
func TestDescriptorLimitsAsEnvoyRatelimit(t *testing.T) {
	peerBin := serviceCmd(t)
	dir := t.TempDir()
	runtime := filepath.Join(dir, "runtime")
	cfgDir := filepath.Join(runtime, "ratelimit", "config")
	policies := filepath.Join(dir, "policies")
	for _, d := range []string{cfgDir, policies} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "edge.yaml"), []byte(peerConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(policies, "configured.yaml"), []byte(sluicePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	peerAddr := startPeer(t, peerBin, dir, runtime, redistest.Start(t).Addr())
	sluiceAddr, httpAddr := freeAddr(t), freeAddr(t)
	sluice := systest.Start(t, dir, "manager", nil, manager.Path(t), "local", "--policies", policies,
		"--listen", httpAddr, "--grpc-listen", sluiceAddr, "--rls-domain", "edge=edge-ns",
		"--redis-url", "redis://"+redistest.Start(t).Addr())
	sluice.WaitHTTP(t, "http://"+httpAddr+"/healthz", 60*time.Second)
	peer, sl := dial(t, peerAddr), dial(t, sluiceAddr)
	for _, c := range []ratelimitv3.RateLimitServiceClient{peer, sl} {
		waitServing(t, c, request("edge", [][]string{{"probe", "x"}}))
	}

	steps := []struct {
		name        string
		descriptors []limited
		want        string
	}{
		{"2 a minute on a descriptor the configuration lacks", []limited{{"generic_key", "unconfigured", 2, typev3.RateLimitUnit_MINUTE, false}}, "oox"},
		{"4 a minute in place of the configured 2", []limited{{"configured", "a", 4, typev3.RateLimitUnit_MINUTE, false}}, "oooox"},
		{"the configured 2 without a limit of its own", []limited{{"configured", "b", 0, 0, false}}, "oox"},
		{"1 a minute for one descriptor of two", []limited{{"generic_key", "pair", 1, typev3.RateLimitUnit_MINUTE, false}, {"configured", "c", 0, 0, false}}, "oxx"},
		{"the other one alone", []limited{{"configured", "c", 0, 0, false}}, "ox"},
		{"5 an hour", []limited{{"generic_key", "hourly", 5, typev3.RateLimitUnit_HOUR, false}}, "ooooox"},
		{"0 a minute", []limited{{"generic_key", "blocked", 0, typev3.RateLimitUnit_MINUTE, false}}, "xx"},
		{"0 a minute beside the configured 2", []limited{{"configured", "d", 0, 0, false}, {"generic_key", "blocked", 0, typev3.RateLimitUnit_MINUTE, false}}, "xx"},
		{"the configured one alone, charged nothing", []limited{{"configured", "d", 0, 0, false}}, "oox"},
		{"a check of nothing against 0 a minute", []limited{{"generic_key", "unused", 0, typev3.RateLimitUnit_MINUTE, true}}, "oo"},
	}
	// Minute windows start on the minute for both: keep the steps in one.
	systest.InOneWindow(t, time.Minute, 20*time.Second)
	start := time.Now()
	for i, st := range steps {
		req := &ratelimitv3.RateLimitRequest{Domain: "edge"}
		for _, d := range st.descriptors {
			rd := &commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: d.key, Value: d.value}}}
			if d.unit != typev3.RateLimitUnit_UNKNOWN {
				rd.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: d.perUnit, Unit: d.unit}
			}
			if d.checkOnly {
				rd.HitsAddend = wrapperspb.UInt64(0)
			}
			req.Descriptors = append(req.Descriptors, rd)
		}
		var gotPeer, gotSluice strings.Builder
		for n := range len(st.want) {
			a, b := ask(t, peer, req), ask(t, sl, req)
			gotPeer.WriteByte(letter(a.GetOverallCode()))
			gotSluice.WriteByte(letter(b.GetOverallCode()))
			if fa, fb := figures(a), figures(b); fa != fb {
				t.Errorf("step %d (%s), send %d:\n envoyproxy/ratelimit %s\n Sluice                %s", i+1, st.name, n+1, fa, fb)
			}
			// The peer counts whole seconds down from the unit's end by
			// its clock, Sluice the exact time by Redis's, a moment later.
			for j, sa := range a.GetStatuses() {
				ra, rb := sa.GetDurationUntilReset().AsDuration(), b.GetStatuses()[j].GetDurationUntilReset().AsDuration()
				if sa.GetCurrentLimit() != nil && b.GetStatuses()[j].GetCurrentLimit() != nil && (rb > ra+time.Second || rb < ra-2*time.Second) {
					t.Errorf("step %d (%s), send %d, descriptor %d: resets in %s by envoyproxy/ratelimit, %s by Sluice", i+1, st.name, n+1, j, ra, rb)
				}
			}
		}
		if gotPeer.String() != st.want {
			t.Errorf("step %d (%s): envoyproxy/ratelimit answered %s, the test expects %s", i+1, st.name, gotPeer.String(), st.want)
		}
		if gotSluice.String() != gotPeer.String() {
			t.Errorf("step %d (%s): Sluice answered %s, envoyproxy/ratelimit %s", i+1, st.name, gotSluice.String(), gotPeer.String())
		}
	}
	if time.Since(start) > 19*time.Second {
		t.Errorf("the steps took %s: they may have crossed a minute's window", time.Since(start))
	}
}

// figures is an answer's codes and, per descriptor, its limit and
// remaining units. A descriptor that did not deny in a denied answer is
// only OK: the peer reports its count, where Sluice charged it nothing
// and, when the cache of denials answered, read nothing to report.
func figures(r *ratelimitv3.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(codes(r))
	denied := r.GetOverallCode() == ratelimitv3.RateLimitResponse_OVER_LIMIT
	for _, s := range r.GetStatuses() {
		cl := s.GetCurrentLimit()
		switch {
		case denied && s.GetCode() == ratelimitv3.RateLimitResponse_OK:
			b.WriteString(" {not denying}")
		case cl == nil:
			b.WriteString(" {}")
		default:
			fmt.Fprintf(&b, " {%d/%s, %d left}", cl.GetRequestsPerUnit(), cl.GetUnit(), s.GetLimitRemaining())
		}
	}
	return b.String()
}

package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The RLS part's requests in flight: what a concurrency limit's allowing
// check, and a token budget's reservation and settlement, cost beside a
// token bucket's. Each simulated request is what
// Envoy sends with a concurrency setup (config/examples/envoy/
// envoy-concurrency.yaml): on the request, a descriptor of the tenant and
// its x-request-id (the policy's holder); when the stream is done, the same
// descriptor with hits_addend 1 and is_negative_hits. A token bucket on the
// same descriptors driven the same way takes a token and refunds it; its
// one-call row is the admission alone. A token budget (charge Reserve) on
// the same bucket reserves on the request and settles when it is done. Only Sluice answers them, loaded by
// the lean generator, whose workers send an admission and its release one
// after the other (ghz would send them on different workers, a release
// before its admission).

const (
	// holdTenants is how many tenants (buckets) the requests cycle
	// through; each request has a request id of its own.
	holdTenants = 1_000
	// holdLimit is the concurrency limit per tenant: the 50 calls in
	// flight never come near it, so every admission is allowed.
	holdLimit = 1_000_000
)

// holdScenario is one way of driving a policy: one call per request, or
// an admission and its release (group 2).
type holdScenario struct {
	name, domain string
	group        int
	data         string // the lean generator's data file
	c            *config
}

var holdScenarios = []*holdScenario{
	{name: "token bucket, admission only", domain: "bench-bucket", group: 1},
	{name: "token bucket, admission + refund", domain: "bench-bucket", group: 2},
	{name: "concurrency, admission + release", domain: "bench-hold", group: 2},
	{name: "reserve + settle", domain: "bench-reserve", group: 2},
}

// holdPolicies are the policies of the two domains (each bound to the
// namespace of the same name): a bucket per tenant, the request id listed
// so that it is matched and, for the concurrency limit, the holder.
var holdPolicies = map[string]string{
	"hold-bucket.yaml": holdPolicy("bench-bucket", "tokenBucket: {capacity: 1000000000, refillRate: 1000000, refillInterval: 1s}"),
	"hold-concurrency.yaml": holdPolicy("bench-hold",
		fmt.Sprintf("concurrency: {limit: %d, leaseTimeout: 1m, holder: request_id}", holdLimit)),
	// A token budget (config/examples/envoy/llm-policies.yaml) on the
	// token bucket: the admission reserves the cost (2, the estimate), the
	// release settles the actual (1), giving the rest back.
	"hold-reserve.yaml": strings.Replace(holdPolicy("bench-reserve", "tokenBucket: {capacity: 1000000000, refillRate: 1000000, refillInterval: 1s}"),
		"  limits:", "  charge: Reserve\n  reserve: {holder: request_id, ttl: 1m}\n  cost: 2\n  limits:", 1),
}

func holdPolicy(domain, limit string) string {
	return fmt.Sprintf(`apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: per-tenant, namespace: %s}
spec:
  match:
    domain: %s
    descriptor:
    - {key: tenant}
    - {key: request_id}
  key: "{descriptor:tenant}"
  limits:
  - name: limit
    %s
`, domain, domain, limit)
}

// holdDescriptor is request k's descriptor: its tenant and a request id
// shaped as Envoy's x-request-id (a UUID).
func holdDescriptor(k int) rlsJSONDescriptor {
	return jsonDescriptor([]string{"tenant", fmt.Sprintf("tenant-%d", k%holdTenants),
		"request_id", fmt.Sprintf("%08x-0000-4000-8000-%012x", k, k)})
}

// writeData writes rlsClients requests: the admissions alone, or each
// admission followed by its release.
func (s *holdScenario) writeData(dir string) error {
	one := uint64(1)
	var reqs []rlsJSONRequest
	for k := range rlsClients {
		d := holdDescriptor(k)
		reqs = append(reqs, rlsJSONRequest{Domain: s.domain, Descriptors: []rlsJSONDescriptor{d}})
		if s.group == 2 {
			d.HitsAddend, d.IsNegativeHits = &one, true
			reqs = append(reqs, rlsJSONRequest{Domain: s.domain, Descriptors: []rlsJSONDescriptor{d}})
		}
	}
	s.data = dataFile(dir, s.name)
	return writeRequests(s.data, reqs)
}

func (s *holdScenario) load(sluice *rlsServer, d time.Duration) (wrkResult, error) {
	return grpcLoad(sluice.addr, s.data, rlsConcurrency, rlsConns, s.group, d)
}

// holdWarmUp loads each scenario for a while, so Sluice has compiled the
// policies and Redis holds the tenants' buckets, then checks that the
// concurrency and reserve policies answer: a holder admitted twice without
// a release is denied the second time, and the duplicate's release frees
// nothing (the holder's last one does).
func holdWarmUp(dir string, sluice *rlsServer) error {
	for _, s := range holdScenarios {
		if err := s.writeData(dir); err != nil {
			return err
		}
		s.c = &config{name: s.name + " — Sluice (lean)", pid: sluice.pid}
		if _, err := s.load(sluice, 2*time.Second); err != nil {
			return fmt.Errorf("warm-up %s: %w", s.name, err)
		}
	}
	probe := []string{"tenant", "probe", "request_id", "probe"}
	admit := rlsRequest("bench-hold", probe)
	release := rlsRequest("bench-hold", probe)
	release.Descriptors[0].HitsAddend, release.Descriptors[0].IsNegativeHits = wrapperspb.UInt64(1), true
	reserve, settle := rlsRequest("bench-reserve", probe), rlsRequest("bench-reserve", probe)
	settle.Descriptors[0].HitsAddend, settle.Descriptors[0].IsNegativeHits = wrapperspb.UInt64(1), true
	return mustAnswer(sluice.addr,
		rlsExchange{"the reserve policy, an admission", reserve, rlsv3.RateLimitResponse_OK},
		rlsExchange{"the reserve policy, the same holder again", reserve, rlsv3.RateLimitResponse_OVER_LIMIT},
		// The duplicate's settlement changes nothing; the holder's last
		// one settles.
		rlsExchange{"the reserve policy, the duplicate's settlement", settle, rlsv3.RateLimitResponse_OK},
		rlsExchange{"the reserve policy, the duplicate's settlement did not settle", reserve, rlsv3.RateLimitResponse_OVER_LIMIT},
		rlsExchange{"the reserve policy, the settlements", settle, rlsv3.RateLimitResponse_OK},
		rlsExchange{"the reserve policy, the settlements", settle, rlsv3.RateLimitResponse_OK},
		rlsExchange{"the reserve policy, an admission after the settlement", reserve, rlsv3.RateLimitResponse_OK},
		rlsExchange{"the reserve policy, its settlement", settle, rlsv3.RateLimitResponse_OK},
		rlsExchange{"the concurrency policy, an admission", admit, rlsv3.RateLimitResponse_OK},
		rlsExchange{"the concurrency policy, the same holder again", admit, rlsv3.RateLimitResponse_OVER_LIMIT},
		rlsExchange{"the concurrency policy, the duplicate's release", release, rlsv3.RateLimitResponse_OK},
		rlsExchange{"the concurrency policy, the duplicate's release did not free it", admit, rlsv3.RateLimitResponse_OVER_LIMIT},
		rlsExchange{"the concurrency policy, the releases", release, rlsv3.RateLimitResponse_OK},
		rlsExchange{"the concurrency policy, the releases", release, rlsv3.RateLimitResponse_OK},
		rlsExchange{"the concurrency policy, an admission after the release", admit, rlsv3.RateLimitResponse_OK},
		rlsExchange{"the concurrency policy, its release", release, rlsv3.RateLimitResponse_OK},
	)
}

// holdRound measures each scenario once, after a round of the others.
func holdRound(r int, o options, sluice *rlsServer, redisPid int, rdb *redis.Client) error {
	for _, s := range holdScenarios {
		smp, err := measure(s.c, redisPid, rdb, func() (wrkResult, error) { return s.load(sluice, o.duration) })
		if err != nil {
			return fmt.Errorf("%s: %w", s.c.name, err)
		}
		s.c.rounds = append(s.c.rounds, smp)
		fmt.Fprintf(os.Stderr, "  round %d  %-68s %9.0f calls/s  p99 %s\n", r, s.c.name, smp.rps, round(smp.p99))
	}
	return nil
}

// renderHolds is the section of the requests in flight.
func renderHolds(b *strings.Builder) {
	fmt.Fprintf(b, "\n### Requests in flight and token budgets: a concurrency limit and a reservation beside a token bucket (Sluice, lean generator)\n\n"+
		"Each request is what Envoy sends for a concurrency limit: an admission (a descriptor of the tenant and a request id, the limit's holder), "+
		"and when the stream is done a release (the same descriptor, hits_addend 1, is_negative_hits), sent one after the other by the same worker. "+
		"Policies keyed by tenant (%d tenants, a request id per request): a concurrency limit of %d per tenant (lease timeout 1m), a token bucket "+
		"(capacity 10⁹) driven the same way (its release a refund) and by its admission alone, and a token budget on that bucket (charge Reserve, "+
		"holder the request id): the admission reserves its cost (2), the release settles the actual (1). Figures per call unless said per request.\n\n",
		holdTenants, holdLimit)
	fmt.Fprintln(b, "| scenario | calls/s | requests/s | p50 | p99 | server CPU µs/call | Redis CPU µs/call | Redis CPU µs/request | Redis cmds/call (incl. in scripts) | generator CPU µs/call | failed calls |")
	fmt.Fprintln(b, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, s := range holdScenarios {
		c := s.c
		var failed int64
		for _, smp := range c.rounds {
			failed += smp.non2xx
		}
		fmt.Fprintf(b, "| %s | %.0f | %.0f | %s | %s | %.1f | %.1f | %.1f | %.3f | %.1f | %d |\n",
			s.name, medianRPS(c), medianRPS(c)/float64(s.group), round(medianP50(c)), round(medianP99(c)),
			serverCPUPerRequest(c), redisCPUPerRequest(c), redisCPUPerRequest(c)*float64(s.group), redisCmdsPerRequest(c),
			perRequest(c, func(s sample) float64 { return micros(s.clientCPU) }), failed)
	}
	one, pair, hold, reserve := holdScenarios[0].c, holdScenarios[1].c, holdScenarios[2].c, holdScenarios[3].c
	r := medianRPS(hold) / medianRPS(pair)
	fmt.Fprintf(b, "\n- Concurrency admission + release ≥ 0.9 × the token bucket's admission + refund (per call and per request alike): %.2f × — %s (Redis CPU per call %.1f µs vs %.1f µs)\n",
		r, verdict(r >= 0.9), redisCPUPerRequest(hold), redisCPUPerRequest(pair))
	r = medianRPS(reserve) / medianRPS(pair)
	fmt.Fprintf(b, "- Reserve + settle (a token budget on the same bucket, estimate 2, actual 1) ≥ 0.9 × the token bucket's admission + refund: %.2f × — %s (Redis CPU per call %.1f µs vs %.1f µs)\n",
		r, verdict(r >= 0.9), redisCPUPerRequest(reserve), redisCPUPerRequest(pair))
	fmt.Fprintf(b, "- Beside the token bucket's admission alone: per call %.2f ×, per request %.2f × (Redis CPU per request %.1f µs vs %.1f µs)\n",
		medianRPS(hold)/medianRPS(one), medianRPS(hold)/2/medianRPS(one), 2*redisCPUPerRequest(hold), redisCPUPerRequest(one))
}

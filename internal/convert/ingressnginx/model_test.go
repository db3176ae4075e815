package ingressnginx

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/convert"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

// ngxZone is one limit_req zone's node for one key, as
// ngx_http_limit_req_module keeps it: excess and burst in thousandths of
// a request, rate in thousandths of a request per second, time in
// milliseconds.
type ngxZone struct {
	rate, burst  int64
	excess, last int64
	exists       bool
}

// newNgxZone is limit_req_zone rate=N r/s (period 1) or r/m (period 60)
// with limit_req burst=B nodelay.
func newNgxZone(n, period, burst int64) *ngxZone {
	return &ngxZone{rate: n * 1000 / period, burst: burst * 1000}
}

// ngxRequest is ngx_http_limit_req_handler for one request at now (ms)
// over the location's zones: every zone looks the key up (a new key is
// admitted with excess 0); the first whose excess would exceed its burst
// rejects the request and nothing is stored; otherwise every zone stores
// its excess (and the time, when it moved).
func ngxRequest(zones []*ngxZone, now int64) bool {
	excess := make([]int64, len(zones))
	for i, z := range zones {
		if !z.exists {
			continue
		}
		ms := max(now-z.last, 0)
		e := max(z.excess-z.rate*ms/1000+1000, 0)
		if e > z.burst {
			return false
		}
		excess[i] = e
	}
	for i, z := range zones {
		if !z.exists || now != z.last {
			z.last = now
		}
		z.exists = true
		z.excess = excess[i]
	}
	return true
}

// sluiceBucket is a converted policy's limits for one key on the Go model
// of the engine (the same decisions as the Lua library, which the engine's
// own tests hold equal).
type sluiceBucket struct {
	params []model.Params
	states []model.State
}

func newSluiceBucket(t *testing.T, p Policy) *sluiceBucket {
	t.Helper()
	cp, err := policy.Compile(p.Object.Namespace, p.Object.Name, &p.Object.Spec)
	if err != nil {
		t.Fatal(err)
	}
	var entries []ratelimit.Entry
	entries = cp.AppendEntries(entries, "127.0.0.1", 1)
	b := &sluiceBucket{states: make([]model.State, len(entries))}
	for _, e := range entries {
		mp, err := model.Compile(e.Limit)
		if err != nil {
			t.Fatal(err)
		}
		b.params = append(b.params, mp)
	}
	return b
}

// request decides one request at now (µs): all limits allow it and all
// are consumed, or none is.
func (b *sluiceBucket) request(now int64) bool {
	next := make([]model.State, len(b.params))
	for i, p := range b.params {
		v, n := model.Check(p, &b.states[i], now, 1)
		if !v.Allowed {
			return false
		}
		next[i] = n
	}
	copy(b.states, next)
	return true
}

// TestDecidesAsLimitReq converts Ingresses and runs each policy beside a
// port of nginx's limit_req configured as ingress-nginx configures it
// from the same annotations, on random timelines of bursts and pauses
// with millisecond arrival times: every decision must be the same.
//
// nginx drains a zone by rate*ms/1000 thousandths of a request, rounded
// down, and forgets the remainder at each admitted request; the converted
// policy drains continuously. The two agree exactly when that product is
// whole, as it always is for r/s; the r/m timelines step in multiples of
// the milliseconds that make it whole (the doc says what nginx does
// otherwise: at most a thousandth of a request per admitted request).
func TestDecidesAsLimitReq(t *testing.T) {
	cases := []struct {
		anns []string
		// step is the r/m timeline's time unit in ms (1 for r/s alone).
		step int64
	}{
		{[]string{`limit-rps: "1"`}, 1},
		{[]string{`limit-rps: "5"`}, 1},
		{[]string{`limit-rps: "3"`, `limit-burst-multiplier: "0"`}, 1},
		{[]string{`limit-rps: "7"`, `limit-burst-multiplier: "2"`}, 1},
		{[]string{`limit-rps: "1000"`, `limit-burst-multiplier: "1"`}, 1},
		{[]string{`limit-rpm: "6"`}, 10},
		{[]string{`limit-rpm: "10"`, `limit-burst-multiplier: "1"`}, 500},
		{[]string{`limit-rpm: "90"`, `limit-burst-multiplier: "2"`}, 2},
		{[]string{`limit-rps: "2"`, `limit-rpm: "30"`, `limit-burst-multiplier: "3"`}, 2},
		{[]string{`limit-rps: "4"`, `limit-rpm: "12"`, `limit-burst-multiplier: "1"`}, 5},
	}
	for i, tc := range cases {
		t.Run(strings.Join(tc.anns, ","), func(t *testing.T) {
			res := Convert([]convert.File{{Name: "in.yaml", Data: []byte(manifest("api", "", tc.anns...))}}, Options{})
			if len(res.Policies) != 1 || res.Worst() != convert.Note {
				t.Fatalf("want one exact policy: %v", res.Reports)
			}
			p := res.Policies[0]
			ann := map[string]int64{"limit-burst-multiplier": defaultBurstMultiplier}
			for _, a := range tc.anns {
				name, v, _ := strings.Cut(a, ": ")
				n, err := strconv.ParseInt(strings.Trim(v, `"`), 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				ann[name] = n
			}
			var zones []*ngxZone
			if n := ann["limit-rps"]; n > 0 {
				zones = append(zones, newNgxZone(n, 1, n*ann["limit-burst-multiplier"]))
			}
			if n := ann["limit-rpm"]; n > 0 {
				zones = append(zones, newNgxZone(n, 60, n*ann["limit-burst-multiplier"]))
			}
			sl := newSluiceBucket(t, p)
			// The slowest zone's interval between requests, in ms.
			slowest := int64(0)
			for _, z := range zones {
				slowest = max(slowest, 1_000_000/z.rate)
			}
			rnd := rand.New(rand.NewPCG(uint64(i)+1, 99))
			now := int64(1_000_000) // ms
			allowed, denied := 0, 0
			var trail []string
			for n := range 20_000 {
				switch r := rnd.IntN(100); {
				case r < 60: // the same instant
				case r < 85:
					now += tc.step * (1 + rnd.Int64N(max(slowest/tc.step/4, 1)))
				default:
					now += tc.step * rnd.Int64N(max(3*slowest/tc.step, 1))
				}
				want := ngxRequest(zones, now)
				got := sl.request(now * 1000)
				trail = append(trail, fmt.Sprintf("%d:%v", now, want))
				if len(trail) > 12 {
					trail = trail[1:]
				}
				if got != want {
					t.Fatalf("request %d at %d ms: nginx %v, Sluice %v (last: %v)", n, now, want, got, trail)
				}
				if want {
					allowed++
				} else {
					denied++
				}
			}
			if allowed < 100 || denied < 100 {
				t.Fatalf("a timeline that tests little: %d allowed, %d denied", allowed, denied)
			}
		})
	}
}

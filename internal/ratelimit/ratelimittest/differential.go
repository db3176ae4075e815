package ratelimittest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Target is a store under differential test; it must read the same Clock
// as the Reference.
type Target struct {
	Name  string
	Store ratelimit.Store
}

// DiffConfig shapes one random timeline.
type DiffConfig struct {
	// Requests is how many random requests to send (probes come on top).
	Requests int
	// Algorithms the keys use; with more than one, requests mix them and a
	// key sometimes switches algorithm (the user edited the limit).
	Algorithms []ratelimit.Algorithm
	// Keys is the size of the key pool.
	Keys int
	// MaxEntries bounds the entries of one request (default 4).
	MaxEntries int
	// Penalties gives most buckets (three keys each) a random penalty
	// box, carried by their entries.
	Penalties bool
	// Reserves: a third of the keys (of every algorithm but Concurrency)
	// take reservations of random lives (ratelimit.Entry.Reserve), and
	// a tenth of the requests are settlements of random actual costs.
	Reserves bool
}

// DiffStats counts what a timeline exercised.
type DiffStats struct {
	Requests, Probes, Entries, Allowed, Denied, EntryDenials, Never, DryRuns, Refunds, Releases, Shadows, ChargedAlways, Switches, Bans, Banned int
	Reserving, Settlements, Settled                                                                                                             int
	PerAlgorithm                                                                                                                                map[ratelimit.Algorithm]int
}

func (s DiffStats) String() string {
	var per []string
	for _, a := range ratelimit.Algorithms {
		if n := s.PerAlgorithm[a]; n > 0 {
			per = append(per, fmt.Sprintf("%s=%d", a, n))
		}
	}
	return fmt.Sprintf("%d requests (%d allowed, %d denied, %d dry-run, %d refunds, %d releases, %d settlements) + %d retry probes; %d entries [%s]; %d entry denials, %d never, %d shadow, %d charged always, %d reserving, %d settled, %d algorithm switches; %d bans issued, %d entries banned",
		s.Requests, s.Allowed, s.Denied, s.DryRuns, s.Refunds, s.Releases, s.Settlements, s.Probes, s.Entries, strings.Join(per, " "), s.EntryDenials, s.Never, s.Shadows, s.ChargedAlways, s.Reserving, s.Settled, s.Switches, s.Bans, s.Banned)
}

type diffKey struct {
	key     string
	alg     ratelimit.Algorithm
	limits  map[ratelimit.Algorithm]ratelimit.Limit // one fixed Limit per algorithm
	always  bool                                    // its entries mostly charge always
	reserve bool                                    // its entries reserve (DiffConfig.Reserves)
	penalty ratelimit.Penalty                       // its bucket's
	shadow  bool                                    // its bucket's policy is in shadow mode (with a penalty)
}

// RunDifferential drives one random timeline on ref's clock, sends every
// request to ref and to each target, and fails on the first Decision that
// differs in any field. After a denial it sometimes probes the exact retry
// moment (1µs before: denied; at it: allowed) with dry runs. A tenth of
// the requests are refunds of random costs, a tenth releases of what a
// request's holder holds in its concurrency limits. A request's holder is
// one of a few, so that holders collide (a holder takes units once) and
// releases free nothing as often as something.
func RunDifferential(t testing.TB, rng *rand.Rand, cfg DiffConfig, ref *Reference, targets ...Target) DiffStats {
	t.Helper()
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = 4
	}
	run := fmt.Sprintf("%x", rng.Uint64())
	keys := make([]*diffKey, cfg.Keys)
	for i := range keys {
		keys[i] = &diffKey{key: ratelimit.Key("diff", run, fmt.Sprint(i/3), fmt.Sprint(i)), limits: map[ratelimit.Algorithm]ratelimit.Limit{}, always: i%3 == 1, reserve: cfg.Reserves && i%3 == 2}
		keys[i].switchTo(rng, cfg.Algorithms[i%len(cfg.Algorithms)]) // every algorithm from the start
		if cfg.Penalties && i%3 == 0 && rng.IntN(4) != 0 {
			keys[i].penalty, keys[i].shadow = RandomPenalty(rng), rng.IntN(5) == 0
			keys[i].penalty.Shadow = keys[i].shadow
		}
		if i%3 != 0 {
			keys[i].penalty, keys[i].shadow = keys[i-i%3].penalty, keys[i-i%3].shadow
		}
	}
	st := DiffStats{PerAlgorithm: map[ratelimit.Algorithm]int{}}
	ctx := context.Background()
	var refDec ratelimit.Decision
	decs := make([]ratelimit.Decision, len(targets))
	send := func(req *ratelimit.Request, what string) {
		t.Helper()
		if err := ref.Check(ctx, 0, req, &refDec); err != nil {
			t.Fatalf("%s: reference: %v", what, err)
		}
		if debugDiff {
			t.Logf("%s t=%d %s\n=> %s", what, ref.Clock.Micros(), fmtRequest(req), fmtDecision(&refDec))
		}
		for i, tg := range targets {
			if err := tg.Store.Check(ctx, 0, req, &decs[i]); err != nil {
				t.Fatalf("%s: %s: %v", what, tg.Name, err)
			}
			if !sameDecision(&refDec, &decs[i]) {
				t.Fatalf("%s at t=%d: %s differs from the model\nrequest %s\nmodel %s\n%-5s %s",
					what, ref.Clock.Micros(), tg.Name, fmtRequest(req), fmtDecision(&refDec), tg.Name, fmtDecision(&decs[i]))
			}
		}
	}
	var hint time.Duration
	for n := range cfg.Requests {
		if len(cfg.Algorithms) > 1 && rng.IntN(100) == 0 {
			k := keys[rng.IntN(len(keys))]
			k.switchTo(rng, cfg.Algorithms[rng.IntN(len(cfg.Algorithms))])
			st.Switches++
		}
		req := randomRequest(rng, keys, cfg.MaxEntries)
		if cfg.Reserves {
			reserving(rng, req, keys)
		}
		// Extreme limits have windows of years: keep steps short so the
		// simulated clock stays in this century (times must stay < 2^52 µs).
		ref.Clock.Advance(RandomAdvance(rng, min(req.Entries[rng.IntN(len(req.Entries))].Limit.Interval, time.Minute), hint))
		send(req, fmt.Sprintf("request %d", n))

		st.Requests++
		if req.Action == ratelimit.DryRun {
			st.DryRuns++
		}
		if req.Action == ratelimit.Refund {
			st.Refunds++
		}
		if req.Action == ratelimit.Release || req.Action == ratelimit.Settle {
			st.Releases += b2i(req.Action == ratelimit.Release)
			st.Settlements += b2i(req.Action == ratelimit.Settle)
			for _, r := range refDec.Results {
				st.Settled += b2i(req.Action == ratelimit.Settle && r.Settled > 0)
			}
			continue // a release that freed nothing reports Never: nothing to probe
		}
		if refDec.Allowed {
			st.Allowed++
		} else {
			st.Denied++
		}
		hint = 0
		results := append([]ratelimit.Result(nil), refDec.Results...) // probes reuse refDec
		probed := false                                               // a probe moves the clock: one per request
		for i, e := range req.Entries {
			r := results[i]
			st.Entries++
			st.PerAlgorithm[e.Limit.Algorithm]++
			if e.Shadow {
				st.Shadows++
			}
			if e.ChargeAlways {
				st.ChargedAlways++
			}
			if e.Reserve > 0 {
				st.Reserving++
			}
			if r.Ban > 0 && (i == 0 || req.Entries[i-1].Penalty != e.Penalty) {
				st.Bans++
			}
			if r.Banned {
				st.Banned++
			}
			if r.Allowed {
				if r.Reset <= maxJump {
					hint = max(hint, r.Reset)
				}
				continue
			}
			st.EntryDenials++
			if r.RetryAfter == ratelimit.Never {
				st.Never++
				continue
			}
			if r.RetryAfter > maxJump {
				continue
			}
			hint = r.RetryAfter
			// A dry run reports the retry after a charge, or a ban, it did
			// not make: the state it leaves admits earlier. So does a
			// banned entry that charges always (the ban kept its charge
			// from being made): its retry is late, never early, so only
			// its admission at the retry moment is probed.
			if !probed && !(req.Action == ratelimit.DryRun && (e.ChargeAlways || r.Ban > 0)) && rng.IntN(4) == 0 {
				probed = true
				probeRetry(t, ref, send, e, r.RetryAfter, r.Banned && e.ChargeAlways)
				st.Probes += 2
			}
		}
	}
	return st
}

// debugDiff (SLUICE_DIFF_LOG set) logs every request of a timeline with
// the model's decision: what led to a difference or a failed probe.
var debugDiff = os.Getenv("SLUICE_DIFF_LOG") != ""

// maxJump bounds the clock moves taken from results.
const maxJump = time.Hour

// probeRetry checks, with dry runs, that e is denied 1µs before retry and
// allowed at it. This moves the clock forward by retry.
func probeRetry(t testing.TB, ref *Reference, send func(*ratelimit.Request, string), e ratelimit.Entry, retry time.Duration, late bool) {
	t.Helper()
	e.Shadow = false // its box keeps its own mode (Penalty.Shadow)
	req := &ratelimit.Request{Entries: []ratelimit.Entry{e}, Action: ratelimit.DryRun}
	var d ratelimit.Decision
	ref.Clock.Advance(retry - time.Microsecond)
	send(req, "retry probe -1µs")
	if err := ref.Check(context.Background(), 0, req, &d); err != nil || d.Allowed && !late {
		t.Fatalf("retry-after %s of %s cost %d: allowed 1µs early (%v) %s %s", retry, e.Limit, e.Cost, err, fmtRequest(req), fmtDecision(&d))
	}
	ref.Clock.Advance(time.Microsecond)
	send(req, "retry probe")
	if err := ref.Check(context.Background(), 0, req, &d); err != nil || !d.Allowed {
		t.Fatalf("retry-after %s of %s cost %d: still denied then (%v)", retry, e.Limit, e.Cost, err)
	}
}

func (k *diffKey) switchTo(rng *rand.Rand, alg ratelimit.Algorithm) {
	k.alg = alg
	if _, ok := k.limits[alg]; !ok {
		k.limits[alg] = RandomLimit(rng, alg)
	}
}

func randomRequest(rng *rand.Rand, keys []*diffKey, maxEntries int) *ratelimit.Request {
	n := 1
	switch rng.IntN(4) {
	case 2:
		n = 2
	case 3:
		n = 3 + rng.IntN(max(maxEntries-2, 1))
	}
	n = min(n, maxEntries, len(keys))
	req := &ratelimit.Request{}
	switch rng.IntN(10) {
	case 0:
		req.Action = ratelimit.DryRun
	case 1:
		req.Action = ratelimit.Refund // units given back, as a lease's leftovers are
	case 2:
		req.Action = ratelimit.Release
	}
	holder := fmt.Sprintf("h%d", rng.IntN(6))
	for _, i := range rng.Perm(len(keys))[:n] {
		k := keys[i]
		l := k.limits[k.alg]
		e := ratelimit.Entry{Key: k.key, Limit: l, Cost: RandomCost(rng, l), Shadow: rng.IntN(7) == 0, Penalty: k.penalty, Holder: holder}
		if k.penalty.Enabled() { // a bucket with a box has entries of its mode only
			e.Shadow = k.shadow
		}
		// Some keys' entries charge always (a policy's choice); others
		// then read the debts those leave.
		e.ChargeAlways = k.always && rng.IntN(4) != 0 && l.ValidateDebt() == nil
		req.Entries = append(req.Entries, e)
	}
	return req
}

// reserving makes req's entries of reserving keys reserve, for a life of
// up to ten minutes, and a tenth of the requests settlements of random
// actual costs (of the entries whose limits can go into debt; a request
// left with none is a refund).
func reserving(rng *rand.Rand, req *ratelimit.Request, keys []*diffKey) {
	if rng.IntN(10) == 0 {
		req.Action = ratelimit.Settle
		for _, k := range keys { // most settle the reserving limits
			if l := k.limits[k.alg]; k.reserve && rng.IntN(4) != 0 && !slices.ContainsFunc(req.Entries, func(e ratelimit.Entry) bool { return e.Key == k.key }) {
				req.Entries = append(req.Entries, ratelimit.Entry{Key: k.key, Limit: l, Holder: req.Entries[0].Holder})
			}
		}
		kept := req.Entries[:0]
		for _, e := range req.Entries {
			if e.Limit.Algorithm == ratelimit.Concurrency || e.Limit.ValidateDebt() == nil {
				e.ChargeAlways, e.Shadow, e.Cost = false, false, RandomCost(rng, e.Limit)
				kept = append(kept, e)
			}
		}
		req.Entries = kept
		if len(kept) == 0 {
			req.Action = ratelimit.Refund
			req.Entries = append(req.Entries, ratelimit.Entry{Key: keys[0].key, Limit: keys[0].limits[keys[0].alg], Holder: "h0"})
		}
		return
	}
	if !req.Action.Decides() {
		return
	}
	for i := range req.Entries {
		e := &req.Entries[i]
		for _, k := range keys {
			if k.key == e.Key && k.reserve && e.Limit.Algorithm != ratelimit.Concurrency {
				e.ChargeAlways = false
				e.Reserve = time.Duration(1+rng.IntN(600_000_000)) * time.Microsecond
				if req.Action == ratelimit.DryRun && rng.IntN(3) == 0 {
					e.Holder = "" // an inspection
				}
			}
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func sameDecision(a, b *ratelimit.Decision) bool {
	if a.Allowed != b.Allowed || len(a.Results) != len(b.Results) {
		return false
	}
	for i := range a.Results {
		if a.Results[i] != b.Results[i] {
			return false
		}
	}
	return true
}

func fmtRequest(r *ratelimit.Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v", r.Action)
	for _, e := range r.Entries {
		fmt.Fprintf(&b, "\n  %s %s cost=%d shadow=%v always=%v holder=%s reserve=%s", e.Key, e.Limit, e.Cost, e.Shadow, e.ChargeAlways, e.Holder, e.Reserve)
		if e.Penalty.Enabled() {
			fmt.Fprintf(&b, " %s", e.Penalty)
		}
	}
	return b.String()
}

func fmtDecision(d *ratelimit.Decision) string {
	var b strings.Builder
	fmt.Fprintf(&b, "allowed=%v", d.Allowed)
	for _, r := range d.Results {
		fmt.Fprintf(&b, " [%v rem=%d reset=%s retry=%s banned=%v ban=%s left=%s reserved=%d settled=%d]", r.Allowed, r.Remaining, r.Reset, r.RetryAfter, r.Banned, r.Ban, r.BanLeft, r.Reserved, r.Settled)
	}
	return b.String()
}

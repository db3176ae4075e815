package reliability

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
	"github.com/sluice-dev/sluice/internal/testutil/checktest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestLostReplyIsNotReplayed loses the reply of a library call after
// Redis ran it: a loopback proxy between the checker and Redis forwards
// the call, swallows the reply and closes the connection. The checker
// answers by the failure mode and never sends the call again, so each
// counter it carried moved exactly once (read back from Redis).
func TestLostReplyIsNotReplayed(t *testing.T) {
	cases := []struct {
		name string
		mode redisstore.Mode
		// flush, when set, runs first: the first call then finds the
		// library missing (it did not run) and is sent again after a
		// load; the reply lost is the resent call's.
		flush string
		// checks run at once on distinct keys (merged into few commands).
		checks int
		// skip lets that many commands through before the one lost; with
		// one flusher, the calls that queue behind the first command
		// merge into the second.
		skip     int
		flushers int
	}{
		{name: "one call, FCALL", mode: redisstore.ModeAuto, checks: 1},
		{name: "merged calls, FCALL", mode: redisstore.ModeAuto, checks: 16, skip: 1, flushers: 1},
		{name: "resent after FUNCTION FLUSH", mode: redisstore.ModeAuto, flush: "FUNCTION FLUSH", checks: 1},
		{name: "one call, EVALSHA", mode: redisstore.ModeScripts, checks: 1},
		// One flusher: with two, two commands can be refused at once and the
		// second refusal's reply would be the one lost (a call that never
		// ran, rightly not resent), not a resent call's.
		{name: "resent after SCRIPT FLUSH", mode: redisstore.ModeScripts, flush: "SCRIPT FLUSH", checks: 4, flushers: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			srv := redistest.Start(t)
			proxy := redistest.StartProxy(t, srv.Addr())
			const limit = 5
			pol := testPolicy{namespace: "ns", name: "p", spec: fmt.Sprintf(
				"failureMode: Closed\nkey: '{header:X-Client}'\nlimits: [{name: hour, fixedWindow: {limit: %d, window: 1h}}]", limit)}
			compiled := pol.compile(t)
			store, err := redisstore.New(newClient(t, proxy.Addr()), redisstore.Options{Mode: tc.mode, Flushers: tc.flushers})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = store.Close() })
			checker := checktest.New(t, check.Options{Backend: store.Backend()}, compiled)
			request := func(key string) *policy.Request {
				return &policy.Request{Method: http.MethodGet, Host: "app.example", Path: "/", Header: http.Header{"X-Client": {key}}}
			}
			// A first check loads the library and opens a connection.
			if out, err := checker.Check(ctx, check.Input{Namespace: "ns", Request: request("warm")}); err != nil || out.Degraded {
				t.Fatalf("warm-up: %+v %v", out, err)
			}
			if tc.flush != "" {
				if err := srv.Client().Do(ctx, splitArgs(tc.flush)...).Err(); err != nil {
					t.Fatal(err)
				}
			}
			name := "FCALL"
			if tc.mode == redisstore.ModeScripts {
				name = "EVALSHA"
			}
			skip := tc.skip
			if tc.flush != "" {
				skip = 1 // the refused call; the reply lost is the resent one's
			}
			before := commandStats(t, srv, name)
			sentBefore := countCommands(proxy, name)
			statsBefore := store.Stats()
			lost := proxy.LoseReply(name, skip)

			outcomes := make([]*check.Outcome, tc.checks)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range tc.checks {
				wg.Go(func() {
					<-start
					out, err := checker.Check(ctx, check.Input{Namespace: "ns", Request: request("k" + strconv.Itoa(i))})
					if err != nil {
						t.Errorf("check %d: %v", i, err)
					}
					outcomes[i] = out
				})
			}
			close(start)
			wg.Wait()
			select {
			case <-lost:
			case <-time.After(5 * time.Second):
				t.Fatal("no reply was lost: the proxy never saw the call")
			}
			after := commandStats(t, srv, name)
			sent := countCommands(proxy, name) - sentBefore
			stats := store.Stats()

			// Read every counter back through a direct connection.
			direct, err := redisstore.New(newClient(t, srv.Addr()), redisstore.Options{Mode: tc.mode})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = direct.Close() })
			degraded := 0
			for i, out := range outcomes {
				if out == nil {
					continue
				}
				if out.Degraded {
					degraded++
				}
				key := ratelimit.Key("ns", "p", "k"+strconv.Itoa(i), "hour")
				moved := consumed(t, direct, key, compiled)
				bucket, _ := ratelimit.SplitKey(key)
				raw := srv.Client().HGetAll(ctx, bucket).Val()
				if moved != 1 {
					t.Errorf("check %d (degraded %v, %v): counter %s moved %d times, want exactly once; hash %v", i, out.Degraded, out.StoreErr, key, moved, raw)
				} else if i == 0 {
					t.Logf("check %d: degraded %v (%v); counter moved once; hash %v", i, out.Degraded, out.StoreErr, raw)
				}
			}
			if degraded == 0 {
				t.Error("no check was answered by the failure mode, yet a reply was lost")
			}
			ran := (after.calls - after.failed) - (before.calls - before.failed)
			refused := after.failed - before.failed
			t.Logf("%d checks: %d answered by the failure mode; the proxy forwarded %d %s commands; Redis ran %d and refused %d (library missing); the store sent %d commands carrying %d calls",
				tc.checks, degraded, sent, name, ran, refused, stats.Commands-statsBefore.Commands, stats.Calls-statsBefore.Calls)
			if ran+refused != int64(sent) {
				t.Errorf("Redis counted %d %s calls, the proxy forwarded %d", ran+refused, name, sent)
			}
			if tc.flush != "" && refused == 0 {
				t.Errorf("the flush did not make a call find the library missing")
			}

			// One lost connection failed every call its command carried,
			// and each counts towards the breaker's threshold.
			t.Logf("breaker after the lost reply: %s", checker.Breaker().State())
			// The next check on the same key works, from one more unit
			// (a fresh checker: this one's breaker may be open).
			checker = checktest.New(t, check.Options{Backend: store.Backend()}, compiled)
			out, err := checker.Check(ctx, check.Input{Namespace: "ns", Request: request("k0")})
			if err != nil || out.Degraded || !out.Allowed || out.Limits[0].Remaining != limit-2 {
				t.Fatalf("next check on k0: %+v %v; want allowed with %d remaining", out, err, limit-2)
			}
		})
	}
}

// consumed reads how much of a fixed window's limit key has used, by a
// dry run of the library on Redis (which consumes nothing): a dry run
// that would be allowed reports what would remain after one more unit.
func consumed(t testing.TB, s *redisstore.Store, key string, p *policy.Policy) int {
	t.Helper()
	req := ratelimit.Request{Action: ratelimit.DryRun, Entries: []ratelimit.Entry{{Key: key, Limit: p.Limits[0].Limit, Cost: 1}}}
	var dec ratelimit.Decision
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.Check(ctx, 0, &req, &dec); err != nil {
		t.Fatalf("dry run on %s: %v", key, err)
	}
	if !dec.Allowed {
		return int(p.Limits[0].Limit.Capacity)
	}
	return int(p.Limits[0].Limit.Capacity - dec.Results[0].Remaining - 1)
}

type cmdStat struct{ calls, failed int64 }

// commandStats reads INFO commandstats for one command.
func commandStats(t testing.TB, srv *redistest.Server, name string) cmdStat {
	t.Helper()
	info, err := srv.Info(context.Background(), "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	var st cmdStat
	for _, field := range strings.Split(info["cmdstat_"+strings.ToLower(name)], ",") {
		k, v, _ := strings.Cut(field, "=")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "calls":
			st.calls = n
		case "failed_calls":
			st.failed = n
		}
	}
	return st
}

func countCommands(p *redistest.Proxy, name string) int {
	n := 0
	for _, c := range p.Commands() {
		if c.Name == name {
			n++
		}
	}
	return n
}

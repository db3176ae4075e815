package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// httpConfigs are the HTTP part's servers by role.
type httpConfigs struct {
	// bare and bareFast are the ceilings: net/http, and fasthttp, which
	// Sluice's check routes are served by.
	bare, bareFast *config
	naive          *config // the baseline
	// Sluice: one limit allowing, denying every request, three limits
	// allowing.
	allow, deny, three *config
	// Sluice: one calendar quota allowing (beside allow, its token bucket).
	calendar *config
	// Sluice on one hot global key: exact, and leased (spec.lease).
	hotExact, hotLeased *config
	// Sluice allowing with the one limit of allow and a penalty box.
	penalty *config
	// Sluice allowing with the one limit of allow and overrides.MaxPerPolicy
	// declared overrides, half of the load's client IPs among them.
	overridden *config
	// Sluice allowing as allow does, every check traced (sampled) and
	// exported over OTLP/gRPC to a sink.
	traced *config
}

// all is every configuration in the order of the rounds and the table.
func (h httpConfigs) all() []*config {
	return []*config{h.bare, h.bareFast, h.naive, h.allow, h.calendar, h.deny, h.three, h.hotExact, h.hotLeased, h.penalty, h.overridden, h.traced}
}

// runHTTP is the HTTP part: the check endpoint loaded with wrk round by
// round, then at half load, and Redis's memory.
func runHTTP(ps *processes, o options, redisAddr string, redisPid int, rdb *redis.Client) (string, error) {
	h := httpConfigs{
		bare:       &config{name: "bare net/http 200 (ceiling)", path: "/", serve: "serve-bare"},
		bareFast:   &config{name: "bare fasthttp 200 (ceiling)", path: "/", serve: "serve-bare-fasthttp"},
		naive:      &config{name: "naive EVALSHA per request (baseline)", path: "/", serve: "serve-naive"},
		allow:      &config{name: "Sluice, token bucket, allowing", path: "/check/bench", policies: allowOne},
		calendar:   &config{name: "Sluice, calendar month in Europe/Berlin, allowing", path: "/check/bench", policies: allowCalendar},
		deny:       &config{name: "Sluice, denying every request", path: "/check/bench", policies: denyAll},
		three:      &config{name: "Sluice, three limits, allowing", path: "/check/bench", policies: allowThree},
		hotExact:   &config{name: "Sluice, one hot global key, exact", path: "/check/bench", policies: hotExact},
		hotLeased:  &config{name: "Sluice, one hot global key, leased (1,000 units)", path: "/check/bench", policies: hotLeased},
		penalty:    &config{name: "Sluice, token bucket with a penalty box, allowing", path: "/check/bench", policies: allowPenalty},
		overridden: &config{name: "Sluice, token bucket with 100,000 overrides (half the clients overridden), allowing", path: "/check/bench", policies: allowOverridden, redisDB: 1},
		traced:     &config{name: "Sluice, token bucket, allowing, every check traced (OTLP/gRPC)", path: "/check/bench", policies: allowOne},
	}
	endpoint, err := ps.startOTLPSink()
	if err != nil {
		return "", fmt.Errorf("OTLP sink: %w", err)
	}
	h.traced.env = []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_TRACES_SAMPLER=always_on"}
	if err := ps.startServers(h.all(), o.manager, redisAddr); err != nil {
		return "", err
	}
	overridden, err := declareOverrides(ps.dir, h.overridden, overriddenPolicy, redisAddr, 2*time.Second)
	if err != nil {
		return "", fmt.Errorf("%s: %w", h.overridden.name, err)
	}
	if err := warmUp(h); err != nil {
		return "", err
	}
	if err := measureRounds(ps.dir, h.all(), redisPid, rdb, o); err != nil {
		return "", err
	}
	if overridden.rssAfter, err = residentMemory(h.overridden.pid); err != nil {
		return "", err
	}

	// Latency at half the allowing throughput, two ways (see halfLoad).
	half, err := measureHalfLoad(ps.dir, h, medianRPS(h.allow)/2, o.duration)
	if err != nil {
		return "", err
	}
	mem, err := measureMemory(redisAddr)
	if err != nil {
		return "", fmt.Errorf("memory: %w", err)
	}
	var profiles []string
	if o.httpProfile != "" {
		for _, p := range []struct {
			c    *config
			name string
		}{{h.allow, "one-limit-allowing"}, {h.three, "three-limits-allowing"}} {
			top, err := profileUnderLoad(p.c.pprof, o.manager, profileFile(o.httpProfile, p.name), p.c.name+" (wrk -t2 -c50)", o.duration, func() (float64, error) {
				w, err := runWrk(ps.dir, p.c.url, 2, 50, o.duration)
				return w.rps, err
			})
			if err != nil {
				return "", fmt.Errorf("profile: %w", err)
			}
			profiles = append(profiles, top)
		}
	}
	return renderReport(h, half, mem, overridden, profiles, o.rounds, o.duration), nil
}

// warmUp sends every client IP twice to the denying configuration, so
// that its rounds measure a flood of keys already over their limit and
// denied once (the deny cache holds a key from its first denial on), not
// the keys' first requests, which reach Redis and would weigh on short
// runs; as the RLS part's warm-up does. It checks the answers on the way,
// and that the allowing configurations allow: a configuration answering
// otherwise measures nothing.
func warmUp(h httpConfigs) error {
	fmt.Fprintf(os.Stderr, "bench: HTTP warm-up, %d requests to %q\n", 2*loadClients, h.deny.name)
	for _, c := range []*config{h.allow, h.calendar, h.three, h.hotExact, h.hotLeased, h.penalty, h.overridden, h.traced} {
		u, err := url.Parse(c.url)
		if err != nil {
			return err
		}
		if err := exchangeAll(u.Host, 0, 1, authURL(u), http.StatusOK); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	u, err := url.Parse(h.deny.url)
	if err != nil {
		return err
	}
	if err := exchangeAll(u.Host, 0, loadClients, authURL(u), http.StatusOK); err != nil {
		return fmt.Errorf("%s, first requests: %w", h.deny.name, err)
	}
	// ingress-nginx's profile denies with 403 (nginx turns a 429 into 500).
	if err := exchangeAll(u.Host, 0, loadClients, authURL(u), http.StatusForbidden); err != nil {
		return fmt.Errorf("%s, second requests: %w", h.deny.name, err)
	}
	return nil
}

// authURL renders the auth-url requests to u (appendAuthURLRequest) for
// exchangeAll.
func authURL(u *url.URL) func(dst []byte, i int) []byte {
	return func(dst []byte, i int) []byte { return appendAuthURLRequest(dst, u, i) }
}

// exchangeAll sends the requests from..to-1 that render appends to addr
// over several connections at once and wants each answered with status
// want.
func exchangeAll(addr string, from, to int, render func(dst []byte, i int) []byte, want int) error {
	const conns = 16
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for k := range conns {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs[k] = err
				return
			}
			defer c.Close()
			r := bufio.NewReader(c)
			var req []byte
			for i := from + k; i < to; i += conns {
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				req = render(req[:0], i)
				status, err := exchange(c, r, req)
				if err == nil && status != want {
					err = fmt.Errorf("request %d answered %d, want %d", i, status, want)
				}
				if err != nil {
					errs[k] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// measureRounds measures every configuration once per round, interleaved,
// so that a noisy machine affects all alike.
func measureRounds(dir string, configs []*config, redisPid int, rdb *redis.Client, o options) error {
	fmt.Fprintf(os.Stderr, "bench: %d rounds × %d configurations × %s, wrk -t2 -c50, 10,000 client IPs\n", o.rounds, len(configs), o.duration)
	for round := 1; round <= o.rounds; round++ {
		for _, c := range configs {
			s, err := measure(c, redisPid, rdb, func() (wrkResult, error) { return runWrk(dir, c.url, 2, 50, o.duration) })
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			c.rounds = append(c.rounds, s)
			fmt.Fprintf(os.Stderr, "  round %d  %-40s %9.0f req/s\n", round, c.name, s.rps)
		}
	}
	return nil
}

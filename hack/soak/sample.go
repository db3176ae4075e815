package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-dev/sluice/hack/internal/procs"
)

// sample is one look at the processes and Redis.
type sample struct {
	at                                   time.Duration
	checkRSS, checkGo, checkFD, checkTCP int64
	checkHTTP                            int64 // sluice_http_open_connections
	ctlRSS, ctlGo, ctlFD, ctlTCP         int64
	redisMem, redisClients, redisKeys    int64
	sent, errors, undecided              int64
}

const sampleHeader = "time     check: RSS MiB goroutines fds tcp http | controller: RSS MiB goroutines fds tcp | redis: used MiB clients keys | checks sent errors failure-mode"

func (s sample) String() string {
	mib := func(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) }
	return fmt.Sprintf("%7s  check: %6s %4d %4d %4d %4d | controller: %6s %4d %4d %4d | redis: %6s %4d %7d | %9d %d %d",
		s.at.Round(time.Second), mib(s.checkRSS), s.checkGo, s.checkFD, s.checkTCP, s.checkHTTP,
		mib(s.ctlRSS), s.ctlGo, s.ctlFD, s.ctlTCP, mib(s.redisMem), s.redisClients, s.redisKeys, s.sent, s.errors, s.undecided)
}

func takeSample(ctx context.Context, at time.Duration, checker, controller *procs.Proc, checkMetrics, ctlMetrics string, rdb *redis.Client, ld *load) sample {
	s := sample{at: at, sent: ld.sent.Load(), errors: ld.errors.Load(), undecided: ld.undecided.Load()}
	s.checkRSS, s.checkFD, s.checkTCP = procs.Stats(checker.Cmd.Process.Pid)
	s.ctlRSS, s.ctlFD, s.ctlTCP = procs.Stats(controller.Cmd.Process.Pid)
	m := procs.Scrape(checkMetrics)
	s.checkGo, s.checkHTTP = int64(m["go_goroutines"]), int64(m["sluice_http_open_connections"])
	s.ctlGo = int64(procs.Scrape(ctlMetrics)["go_goroutines"])
	if info, err := rdb.Info(ctx, "memory", "clients").Result(); err == nil {
		f := parseInfo(info)
		s.redisMem, _ = strconv.ParseInt(f["used_memory"], 10, 64)
		s.redisClients, _ = strconv.ParseInt(f["connected_clients"], 10, 64)
	}
	s.redisKeys, _ = rdb.DBSize(ctx).Result()
	return s
}

func parseInfo(text string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out
}

// report prints the verdict and returns an error when anything grew or
// any answer was an error.
func report(o options, samples []sample, ld *load, edits []string, editErr error, processes ...*procs.Proc) error {
	var problems []string
	for _, p := range processes {
		if p.Exited() {
			problems = append(problems, fmt.Sprintf("%s exited (log %s)", p.Name, p.Log))
		}
	}
	if editErr != nil {
		problems = append(problems, "policy edits: "+editErr.Error())
	}
	fmt.Printf("\nchecks: %d sent, %d allowed, %d denied, %d answered by the failure mode, %d errors, %d not sent (more than %d in flight)\n",
		ld.sent.Load(), ld.allowed.Load(), ld.denied.Load(), ld.undecided.Load(), ld.errors.Load(), ld.notSent.Load(), o.maxInFlight)
	if n := ld.errors.Load(); n > 0 {
		problems = append(problems, fmt.Sprintf("%d error answers, e.g. %v", n, ld.firstErrors))
	}
	if ld.denied.Load() == 0 || ld.allowed.Load() == 0 {
		problems = append(problems, "the load was not both allowed and denied: the policies did not apply")
	}
	fmt.Printf("policy edits: %d (%s)\n", len(edits), strings.Join(edits, "; "))

	var after []sample
	for _, s := range samples {
		if s.at >= o.warmup {
			after = append(after, s)
		}
	}
	if len(after) < 4 {
		problems = append(problems, fmt.Sprintf("only %d samples after the warm-up (%s): run longer or sample more often", len(after), o.warmup))
	} else {
		q := max(len(after)/4, 1)
		first, last := after[:q], after[len(after)-q:]
		fmt.Printf("\nflat after the warm-up (%s): the mean of the last %d samples against the first %d after the warm-up, within x%.2f + slack\n", o.warmup, q, q, o.flatRatio)
		for _, r := range []struct {
			what  string
			get   func(sample) int64
			slack int64
			bytes bool
		}{
			{"check RSS", func(s sample) int64 { return s.checkRSS }, o.flatRSS, true},
			{"check goroutines", func(s sample) int64 { return s.checkGo }, o.flatB, false},
			{"check descriptors", func(s sample) int64 { return s.checkFD }, o.flatB, false},
			{"check sockets", func(s sample) int64 { return s.checkTCP }, o.flatB, false},
			{"controller RSS", func(s sample) int64 { return s.ctlRSS }, o.flatRSS, true},
			{"controller goroutines", func(s sample) int64 { return s.ctlGo }, o.flatB, false},
			{"controller descriptors", func(s sample) int64 { return s.ctlFD }, o.flatB, false},
			{"controller sockets", func(s sample) int64 { return s.ctlTCP }, o.flatB, false},
			{"Redis used_memory", func(s sample) int64 { return s.redisMem }, o.flatRSS, true},
			{"Redis clients", func(s sample) int64 { return s.redisClients }, o.flatB, false},
		} {
			a, b, peak := mean(first, r.get), mean(last, r.get), slices.MaxFunc(after, func(x, y sample) int { return int(r.get(x) - r.get(y)) })
			limit := a*o.flatRatio + float64(r.slack)
			verdict := "flat"
			if b > limit {
				verdict = "GREW"
				problems = append(problems, fmt.Sprintf("%s grew from %.0f to %.0f (limit %.0f)", r.what, a, b, limit))
			}
			unit := func(v float64) string {
				if r.bytes {
					return strconv.FormatFloat(v/(1<<20), 'f', 1, 64) + " MiB"
				}
				return strconv.FormatFloat(v, 'f', 1, 64)
			}
			fmt.Printf("  %-24s %12s -> %12s (peak %s, limit %s): %s\n", r.what, unit(a), unit(b), unit(float64(r.get(peak))), unit(limit), verdict)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d problems:\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	fmt.Println("\nsoak: flat, no error answers")
	return nil
}

func mean(ss []sample, get func(sample) int64) float64 {
	var sum float64
	for _, s := range ss {
		sum += float64(get(s))
	}
	return sum / math.Max(1, float64(len(ss)))
}

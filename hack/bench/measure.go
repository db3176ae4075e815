package main

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// measure runs one load on c's server and reads the server's and Redis's
// CPU time and Redis's command counts around it.
func measure(c *config, redisPid int, rdb *redis.Client, load func() (wrkResult, error)) (sample, error) {
	cpu0, err := processCPU(c.pid)
	if err != nil {
		return sample{}, err
	}
	rcpu0, _ := processCPU(redisPid)
	cmds0, calls0, err := redisCommands(rdb)
	if err != nil {
		return sample{}, err
	}
	w, err := load()
	if err != nil {
		return sample{}, err
	}
	cpu1, _ := processCPU(c.pid)
	rcpu1, _ := processCPU(redisPid)
	cmds1, calls1, _ := redisCommands(rdb)
	// INFO itself is a command: take it out.
	return sample{wrkResult: w, serverCPU: cpu1 - cpu0, redisCPU: rcpu1 - rcpu0, redisCmds: cmds1 - cmds0 - 1, redisCalls: calls1 - calls0}, nil
}

// redisCommands reads the commands Redis has run and, of those, the script calls.
func redisCommands(rdb *redis.Client) (commands, scriptCalls int64, err error) {
	info, err := rdb.Info(context.Background(), "stats", "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	found := false
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			commands, _ = strconv.ParseInt(v, 10, 64)
			found = true
		}
		for _, cmd := range []string{"cmdstat_fcall:", "cmdstat_fcall_ro:", "cmdstat_evalsha:", "cmdstat_eval:"} {
			if v, ok := strings.CutPrefix(line, cmd+"calls="); ok {
				n, _ := strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
				scriptCalls += n
			}
		}
	}
	if !found {
		return 0, 0, errors.New("no total_commands_processed in INFO")
	}
	return commands, scriptCalls, nil
}

func median(ss []sample, f func(sample) float64) float64 {
	vals := make([]float64, len(ss))
	for i, s := range ss {
		vals[i] = f(s)
	}
	sort.Float64s(vals)
	if len(vals) == 0 {
		return 0
	}
	return vals[len(vals)/2]
}

// The medians of one configuration's rounds, shared by the HTTP and RLS
// tables and their targets so that both read a figure the same way.
func medianRPS(c *config) float64 { return median(c.rounds, func(s sample) float64 { return s.rps }) }

func medianP50(c *config) time.Duration {
	return time.Duration(median(c.rounds, func(s sample) float64 { return float64(s.p50) }))
}

func medianP99(c *config) time.Duration {
	return time.Duration(median(c.rounds, func(s sample) float64 { return float64(s.p99) }))
}

// perRequest is the median over c's rounds of f per request (per
// decision, for a limiter) in that round.
func perRequest(c *config, f func(sample) float64) float64 {
	return median(c.rounds, func(s sample) float64 { return f(s) / float64(s.requests) })
}

func micros(d time.Duration) float64 { return float64(d.Microseconds()) }

func serverCPUPerRequest(c *config) float64 {
	return perRequest(c, func(s sample) float64 { return micros(s.serverCPU) })
}

// redisCPUPerRequest is Redis's CPU time per request in µs, read from
// /proc around each run (measure).
func redisCPUPerRequest(c *config) float64 {
	return perRequest(c, func(s sample) float64 { return micros(s.redisCPU) })
}

// redisCmdsPerRequest counts the commands run inside scripts too.
func redisCmdsPerRequest(c *config) float64 {
	return perRequest(c, func(s sample) float64 { return float64(s.redisCmds) })
}

func redisCallsPerRequest(c *config) float64 {
	return perRequest(c, func(s sample) float64 { return float64(s.redisCalls) })
}

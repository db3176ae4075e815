package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// wrkScript sends ingress-nginx auth-url requests from 10,000 client IPs,
// as the ingress controller does for every request it serves.
const wrkScript = `
local ips = {}
for i = 0, 9999 do
  ips[i + 1] = "10." .. math.floor(i / 65536) % 256 .. "." .. math.floor(i / 256) % 256 .. "." .. i % 256
end
local n = 0
request = function()
  n = n + 1
  local ip = ips[math.random(1, 10000)]
  return wrk.format("GET", wrk.path, {
    ["X-Original-URL"] = "http://shop.example.com/api/items?page=2",
    ["X-Original-Method"] = "GET",
    ["X-Real-IP"] = ip,
    ["X-Forwarded-For"] = ip,
    ["X-Sent-From"] = "nginx-ingress-controller",
  })
end
`

type wrkResult struct {
	requests int64
	rps      float64
	p50, p99 time.Duration
	non2xx   int64
	// clientCPU is the load generator's CPU time (ghz runs only).
	clientCPU time.Duration
}

var (
	reqsRe    = regexp.MustCompile(`(\d+) requests in`)
	rpsRe     = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	latencyRe = regexp.MustCompile(`^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$`)
	non2xxRe  = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
)

// runWrk loads url with wrk and parses its report.
func runWrk(dir, url string, threads, conns int, d time.Duration) (wrkResult, error) {
	script := filepath.Join(dir, "auth-url.lua")
	if err := os.WriteFile(script, []byte(wrkScript), 0o644); err != nil {
		return wrkResult{}, err
	}
	cmd := exec.Command("wrk", "-t", strconv.Itoa(threads), "-c", strconv.Itoa(conns),
		"-d", fmt.Sprintf("%ds", int(d.Seconds())), "--latency", "-s", script, url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %v: %s", err, out)
	}
	var r wrkResult
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		if m := reqsRe.FindStringSubmatch(line); m != nil {
			r.requests, _ = strconv.ParseInt(m[1], 10, 64)
		}
		if m := rpsRe.FindStringSubmatch(line); m != nil {
			r.rps, _ = strconv.ParseFloat(m[1], 64)
		}
		if m := non2xxRe.FindStringSubmatch(line); m != nil {
			r.non2xx, _ = strconv.ParseInt(m[1], 10, 64)
		}
		if m := latencyRe.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second}[m[3]]
			lat := time.Duration(v * float64(unit))
			if m[1] == "50" {
				r.p50 = lat
			} else {
				r.p99 = lat
			}
		}
	}
	if r.requests == 0 {
		return r, fmt.Errorf("wrk: no requests in its report:\n%s", out)
	}
	return r, nil
}

// processCPU is a process's user+system CPU time so far.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond, nil
}

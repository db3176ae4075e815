package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ghzRun is one ghz load: concurrency workers sharing conns HTTP/2
// connections (as Envoy shares one connection per worker thread to its
// rate limit cluster), each sending the next request as soon as the last
// is answered, for d or, with requests > 0, for that many requests.
type ghzRun struct {
	ghz, protoset, addr, data string
	concurrency, conns        int
	d                         time.Duration
	requests                  int
}

// ghzReport is the part of ghz's JSON report read here. Durations are in
// nanoseconds; the report also lists every request ("details"), which is
// skipped.
type ghzReport struct {
	Count               int64            `json:"count"`
	Total               time.Duration    `json:"total"`
	Rps                 float64          `json:"rps"`
	ErrorDistribution   map[string]int64 `json:"errorDistribution"`
	StatusCodeDist      map[string]int64 `json:"statusCodeDistribution"`
	LatencyDistribution []struct {
		Percentage int           `json:"percentage"`
		Latency    time.Duration `json:"latency"`
	} `json:"latencyDistribution"`
}

// run loads the server and reads ghz's report into the fields the HTTP
// runs fill from wrk's: non2xx counts the calls whose gRPC status was not
// OK (an RLS denial is an OK call whose answer says OVER_LIMIT).
func (g ghzRun) run(dir string) (wrkResult, error) {
	out := filepath.Join(dir, "ghz.json")
	args := []string{
		"--insecure", "--protoset", g.protoset, "--call", rlsMethod,
		"--data-file", g.data,
		"-c", strconv.Itoa(g.concurrency), "--connections", strconv.Itoa(g.conns),
		"--format", "json", "-o", out,
	}
	if g.requests > 0 {
		args = append(args, "-n", strconv.Itoa(g.requests))
	} else {
		// -z alone: ghz stops at the duration; -n is then ignored.
		args = append(args, "-z", g.d.String())
	}
	args = append(args, g.addr)
	cmd := exec.Command(g.ghz, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return wrkResult{}, fmt.Errorf("ghz: %v: %s", err, b)
	}
	// ghz shares the CPUs with the servers: what it costs is reported.
	clientCPU := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	b, err := os.ReadFile(out)
	if err != nil {
		return wrkResult{}, err
	}
	var rep ghzReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return wrkResult{}, fmt.Errorf("ghz report: %w", err)
	}
	r := wrkResult{requests: rep.Count, rps: rep.Rps, clientCPU: clientCPU}
	for code, n := range rep.StatusCodeDist {
		if code != "OK" {
			r.non2xx += n
		}
	}
	// At the end of a timed run ghz closes its connections under the calls
	// still in flight (up to one per worker) and counts them as failed:
	// those are no answer of the server's.
	for msg, n := range rep.ErrorDistribution {
		if g.requests == 0 && strings.Contains(msg, "use of closed network connection") {
			r.non2xx -= n
			r.requests -= n
		}
	}
	for _, l := range rep.LatencyDistribution {
		switch l.Percentage {
		case 50:
			r.p50 = l.Latency
		case 99:
			r.p99 = l.Latency
		}
	}
	if r.requests == 0 {
		return r, fmt.Errorf("ghz: no requests in its report (errors: %v)", rep.ErrorDistribution)
	}
	// A stray failed call is reported in the table; more than 1% means the
	// server is not answering what is measured.
	if r.non2xx*100 > r.requests {
		return r, fmt.Errorf("ghz: %d of %d calls failed: %s", r.non2xx, r.requests, errorSummary(rep.ErrorDistribution))
	}
	return r, nil
}

func errorSummary(dist map[string]int64) string {
	var parts []string
	for msg, n := range dist {
		parts = append(parts, fmt.Sprintf("%d× %s", n, msg))
		if len(parts) == 3 {
			break
		}
	}
	return strings.Join(parts, "; ")
}

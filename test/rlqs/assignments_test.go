package rlqs

import (
	"bufio"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/encoding/prototext"
)

// received is one assignment an Envoy received, as its log shows it
// (--component-log-level rate_limit_quota:debug): what the Envoy was
// given, not what the server meant to send.
type received struct {
	at     time.Time
	bucket map[string]string
	// tokens is the token bucket's max_tokens; 0 for a blanket rule.
	tokens  uint32
	blanket string
	// perFill, fill and ttl: the token bucket's refill and the
	// assignment's life.
	perFill   uint32
	fill, ttl time.Duration
}

// logLine is the head of an Envoy log line: its time, then the message.
var logLine = regexp.MustCompile(`^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})\]\[\d+\]\[(\w+)\]\[(\w+)\] \[[^\]]+\] (.*)$`)

const receivedMsg = "The response that is received from RLQS server:"

// receivedAssignments reads the assignments an Envoy logged receiving:
// each such message is followed by the response in protobuf text form,
// up to the next log line.
func receivedAssignments(t *testing.T, logPath string) []received {
	t.Helper()
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []received
	var at time.Time
	var body *strings.Builder
	flush := func() {
		if body == nil {
			return
		}
		// Protobuf's debug form opens with a marker that varies from run
		// to run (goo.gle/debugstr, goo.gle/debugonly, ...).
		text := body.String()
		if first, rest, ok := strings.Cut(text, "\n"); ok && strings.HasPrefix(strings.TrimSpace(first), "goo.gle/") {
			text = rest
		}
		body = nil
		var resp rlqsv3.RateLimitQuotaResponse
		if err := prototext.Unmarshal([]byte(text), &resp); err != nil {
			t.Fatalf("%s: an RLQS response Envoy logged does not parse: %v\n%s", logPath, err, text)
		}
		for _, a := range resp.GetBucketAction() {
			r := received{at: at, bucket: a.GetBucketId().GetBucket()}
			s := a.GetQuotaAssignmentAction().GetRateLimitStrategy()
			r.ttl = a.GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration()
			if tb := s.GetTokenBucket(); tb != nil {
				r.tokens, r.perFill, r.fill = tb.GetMaxTokens(), tb.GetTokensPerFill().GetValue(), tb.GetFillInterval().AsDuration()
			} else {
				r.blanket = s.GetBlanketRule().String()
			}
			out = append(out, r)
		}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := logLine.FindStringSubmatch(sc.Text())
		if m == nil {
			if body != nil {
				body.WriteString(sc.Text() + "\n")
			}
			continue
		}
		flush()
		if m[3] == "rate_limit_quota" && m[4] == receivedMsg {
			at, err = time.ParseInLocation("2006-01-02 15:04:05.000", m[1], time.Local)
			if err != nil {
				t.Fatal(err)
			}
			body = &strings.Builder{}
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// reportEvery is how often Envoy 1.40 reports, whatever its
// reporting_interval says.
const reportEvery = 5 * time.Second

// size is what a token bucket admits from full between two of Envoy's
// reports: max_tokens and the fills of 5 s (the assignment the bound
// counts); 0 for a blanket rule.
func (r received) size() int {
	if r.tokens == 0 || r.fill <= 0 {
		return 0
	}
	return int(r.tokens) + int(r.perFill)*int(reportEvery/r.fill)
}

// largestBucket is the largest token bucket of bucket an Envoy held at
// any time in [from, to): the last one received before from, and every
// one received in it.
func largestBucket(rs []received, bucket map[string]string, from, to time.Time) int {
	var largest, before int
	for _, r := range rs {
		if !sameBucket(r.bucket, bucket) || !r.at.Before(to) {
			continue
		}
		if r.at.Before(from) {
			before = r.size()
			continue
		}
		largest = max(largest, r.size())
	}
	return max(largest, before)
}

func sameBucket(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// arrivals records when each request reached the upstream.
type arrivals struct {
	mu sync.Mutex
	at []time.Time
}

func (a *arrivals) add(t time.Time) {
	a.mu.Lock()
	a.at = append(a.at, t)
	a.mu.Unlock()
}

// in counts the arrivals in [from, to).
func (a *arrivals) in(from, to time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, t := range a.at {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

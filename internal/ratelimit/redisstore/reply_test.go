package redisstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

func TestParseReply(t *testing.T) {
	l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 5, Interval: time.Second}
	req := &ratelimit.Request{Entries: []ratelimit.Entry{{Key: "a", Limit: l, Cost: 1}, {Key: "b", Limit: l, Cost: 1, Shadow: true}}}
	idx := []int{0, 1}
	ok := []int64{1, 0, 4, 100, 200, -1, 0, 5, 5}
	verdicts := make([]model.Verdict, 2)
	allowed, err := parseReply(ok, req, []string{"a", "b"}, idx, verdicts)
	if err != nil || !allowed {
		t.Fatalf("valid reply: %v %v", allowed, err)
	}
	want := []model.Verdict{
		{Allowed: true, Remaining: 4, Reset: 100, RemainingAfter: 3, ResetAfter: 200},
		{Allowed: false, Remaining: 0, Reset: 5, RetryAfter: model.Never, RemainingAfter: 0, ResetAfter: 5},
	}
	if verdicts[0] != want[0] || verdicts[1] != want[1] {
		t.Fatalf("verdicts %+v, want %+v", verdicts, want)
	}

	with := func(i int, v int64) []int64 {
		r := append([]int64(nil), ok...)
		r[i] = v
		return r
	}
	for name, c := range map[string]struct {
		val  []int64
		want string
	}{
		"nil":                  {nil, "0 values for 2 entries"},
		"short":                {ok[:5], "5 values for 2 entries"},
		"long":                 {append(append([]int64(nil), ok...), 0), "10 values"},
		"decision 2":           {with(0, 2), "decision"},
		"negative left":        {with(2, -3), "remaining"},
		"allowed beyond left":  {with(2, 0), "remaining"},
		"negative reset":       {with(3, -1), "reset"},
		"negative reset after": {with(4, -1), "reset"},
		"denied, retry -5":     {with(5, -5), "retry-after"},
		"denied, reset after":  {with(8, 6), "reset after consuming"},
		"wrong decision":       {with(0, 0), "disagrees"},
	} {
		_, err := parseReply(c.val, req, []string{"a", "b"}, idx, make([]model.Verdict, 2))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", name, err, c.want)
		}
	}
}

// TestParseReplyPenalty: a bucket's penalty box has four values of its
// own before its entries'; its ban marks the entries Banned and the ban
// issued reaches every entry of the bucket.
func TestParseReplyPenalty(t *testing.T) {
	l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 5, Interval: time.Second}
	pen := ratelimit.Penalty{Denials: 3, Within: time.Second, Ban: time.Second, MaxBan: time.Minute}
	req := &ratelimit.Request{Entries: []ratelimit.Entry{
		{Key: "{b}:x", Limit: l, Cost: 1, Penalty: pen}, {Key: "{b}:y", Limit: l, Cost: 1, Penalty: pen}, {Key: "{c}:x", Limit: l, Cost: 1},
	}}
	buckets, idx := []string{"{b}", "{b}", "{c}"}, []int{0, 1, 2}
	banned := []int64{0, 700, 0, 0, 0, 700, 0, 700, 700, 700, 0, 700, 700, 0, 4, 100, 200}
	verdicts := make([]model.Verdict, 3)
	if allowed, err := parseReply(banned, req, buckets, idx, verdicts); err != nil || allowed {
		t.Fatalf("banned reply: %v %v", allowed, err)
	}
	if !verdicts[0].Banned || !verdicts[1].Banned || verdicts[2].Banned || verdicts[0].RetryAfter != 700 ||
		verdicts[0].BanLeft != 700 || verdicts[1].BanLeft != 700 || verdicts[2].BanLeft != 0 {
		t.Fatalf("verdicts %+v: want the bucket's two entries banned for 700µs", verdicts)
	}
	issued := []int64{0, 0, 2_000_000, 0, 60_000_000, 5, 0, 5, 5, 5, 0, 5, 5, 0, 4, 100, 200}
	if _, err := parseReply(issued, req, buckets, idx, verdicts); err != nil {
		t.Fatal(err)
	}
	if verdicts[0].Banned || verdicts[0].Ban != 2_000_000 || verdicts[1].Ban != 2_000_000 || verdicts[2].Ban != 0 ||
		verdicts[0].BanLeft != 2_000_000 || verdicts[1].BanLeft != 2_000_000 || verdicts[2].BanLeft != 0 {
		t.Fatalf("verdicts %+v: want the ban issued on the bucket's entries", verdicts)
	}
	for name, f := range map[string][]int64{"count at the ban": {0, 0, 0, 3, 0}, "ban beyond maxBan": {0, 0, 60_000_001, 0, 0}, "left and issued": {0, 5, 5, 0, 0}} {
		r := append([]int64(nil), issued...)
		copy(r[1:5], f[1:])
		if _, err := parseReply(r, req, buckets, idx, verdicts); err == nil || !strings.Contains(err.Error(), "penalty") {
			t.Errorf("%s: error %v, want one about the penalty", name, err)
		}
	}
	if _, err := parseReply(issued[:13], req, buckets, idx, verdicts); err == nil {
		t.Error("a reply without the penalty's values was accepted")
	}
}

// TestDeliver: a merged command's reply reaches its calls only when its
// layout is exactly one segment per call, in order, each with its tag.
func TestDeliver(t *testing.T) {
	newCommand := func(sizes ...int) *command {
		m := &command{}
		for _, n := range sizes {
			m.calls = append(m.calls, &call{keys: make([]string, n), entries: n})
			m.nkeys += n
		}
		return m
	}
	segment := func(tag int64, n int, fill int64) []int64 {
		s := []int64{tag, 1}
		for range n {
			s = append(s, 0, fill, fill, fill)
		}
		return s
	}
	good := slices.Concat(segment(1, 1, 11), segment(2, 3, 22), segment(3, 2, 33))

	m := newCommand(1, 3, 2)
	m.cmd = noRetryCmd{redis.NewIntSliceCmd(context.Background())}
	m.cmd.SetVal(good)
	m.deliver()
	for i, c := range m.calls {
		fill := int64(11 * (i + 1))
		if c.err != nil || len(c.reply) != 1+4*c.entries || c.reply[0] != 1 || c.reply[len(c.reply)-1] != fill {
			t.Fatalf("call %d: reply %v, err %v", i+1, c.reply, c.err)
		}
	}

	for name, val := range map[string][]int64{
		"empty":         nil,
		"short":         good[:len(good)-1],
		"long":          append(slices.Clone(good), 0),
		"tags swapped":  slices.Concat(segment(2, 1, 11), segment(1, 3, 22), segment(3, 2, 33)),
		"tag missing":   slices.Concat(segment(1, 1, 11), segment(3, 2, 33)),
		"sizes shifted": slices.Concat(segment(1, 3, 11), segment(2, 1, 22), segment(3, 2, 33)),
		"one call more": slices.Concat(good, segment(4, 1, 44)),
	} {
		m := newCommand(1, 3, 2)
		m.cmd = noRetryCmd{redis.NewIntSliceCmd(context.Background())}
		m.cmd.SetVal(val)
		m.deliver()
		for i, c := range m.calls {
			if c.err == nil || c.reply != nil || !strings.Contains(c.err.Error(), "unexpected reply") {
				t.Errorf("%s: call %d got reply %v, err %v", name, i+1, c.reply, c.err)
			}
		}
	}

	m = newCommand(1, 2)
	m.err = errors.New("boom")
	m.deliver()
	for i, c := range m.calls {
		if c.err != m.err {
			t.Errorf("failed command: call %d err %v", i+1, c.err)
		}
	}
}

// TestAdjacentBuckets: a call's entries are reordered, stably, so that
// those of one bucket are adjacent, as the library wants them.
func TestAdjacentBuckets(t *testing.T) {
	for _, c := range []struct{ buckets, want string }{
		{"", ""},
		{"a", "0"},
		{"aab", "012"},
		{"aba", "021"},
		{"abcab", "03142"},
		{"abcba", "04132"},
		{"aabbcc", "012345"},
	} {
		buckets := strings.Split(c.buckets, "")
		idx := make([]int, len(buckets))
		for i := range idx {
			idx[i] = i
		}
		adjacentBuckets(buckets, idx)
		var got strings.Builder
		for _, i := range idx {
			got.WriteString(strconv.Itoa(i))
		}
		if got.String() != c.want {
			t.Errorf("buckets %q: order %s, want %s", c.buckets, got.String(), c.want)
		}
	}
}

func TestLibraryNames(t *testing.T) {
	if len(Version) != 12 || LibraryName != "sluice_"+Version || FunctionName != "sluice_check_"+Version {
		t.Fatalf("names: %q %q %q", Version, LibraryName, FunctionName)
	}
	if !strings.HasPrefix(functionCode, "#!lua name="+LibraryName+"\n") || len(scriptSHA) != 40 {
		t.Fatal("library code malformed")
	}
}

package redisstore

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

func TestParseReply(t *testing.T) {
	l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 5, Interval: time.Second}
	req := &ratelimit.Request{Entries: []ratelimit.Entry{{Key: "a", Limit: l, Cost: 1}, {Key: "b", Limit: l, Cost: 1, Shadow: true}}}
	idx := []int{0, 1}
	ok := []any{int64(1), int64(1), int64(4), int64(100), int64(0), int64(3), int64(200), int64(0), int64(0), int64(5), int64(-1), int64(0), int64(5)}
	verdicts := make([]model.Verdict, 2)
	allowed, err := parseReply(ok, req, idx, verdicts)
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

	with := func(i int, v any) []any {
		r := append([]any(nil), ok...)
		r[i] = v
		return r
	}
	for name, c := range map[string]struct {
		val  any
		want string
	}{
		"nil":              {nil, "want an array"},
		"string":           {"OK", "want an array"},
		"short":            {ok[:7], "7 values for 2 entries"},
		"long":             {append(append([]any(nil), ok...), int64(0)), "14 values"},
		"string value":     {with(3, "4"), "value 3"},
		"nested":           {with(3, []any{}), "value 3"},
		"float":            {with(3, 4.0), "value 3"},
		"decision 2":       {with(0, int64(2)), "decision"},
		"allowed 7":        {with(1, int64(7)), "not 0 or 1"},
		"negative left":    {with(2, int64(-3)), "remaining"},
		"negative reset":   {with(3, int64(-1)), "reset"},
		"retry on allowed": {with(4, int64(10)), "retry-after"},
		"denied, no retry": {with(10, int64(0)), "retry-after"},
		"denied, retry -5": {with(10, int64(-5)), "retry-after"},
		"wrong decision":   {with(0, int64(0)), "disagrees"},
	} {
		_, err := parseReply(c.val, req, idx, make([]model.Verdict, 2))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", name, err, c.want)
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

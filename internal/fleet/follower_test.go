package fleet

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// recorder is a Handler that records its calls.
type recorder struct {
	mu     sync.Mutex
	calls  []string
	called chan struct{}
}

func newRecorder() *recorder { return &recorder{called: make(chan struct{}, 1000)} }

func (r *recorder) record(call string) {
	r.mu.Lock()
	r.calls = append(r.calls, call)
	r.mu.Unlock()
	r.called <- struct{}{}
}

func (r *recorder) Subscribed(context.Context)            { r.record("subscribed") }
func (r *recorder) Message(_ context.Context, msg string) { r.record("message " + msg) }
func (r *recorder) Poll(context.Context)                  { r.record("poll") }

// waitFor waits until r made call n times, and returns its calls so far.
func (r *recorder) waitFor(t *testing.T, call string, n int) []string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		calls := slices.Clone(r.calls)
		r.mu.Unlock()
		made := 0
		for _, c := range calls {
			if c == call {
				made++
			}
		}
		if made >= n {
			return calls
		}
		select {
		case <-r.called:
		case <-deadline:
			t.Fatalf("%q %d times within 10s? calls %q", call, n, calls)
		}
	}
}

// One connection subscribes to every channel followed; each handler hears
// its channel's messages alone, its subscription made and made again, and
// is polled first and then every interval.
func TestFollowerServesEveryChannelOnOneConnection(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := NewFollower(client, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	a1, a2, b := newRecorder(), newRecorder(), newRecorder()
	f.Follow("chan:a", a1)
	f.Follow("chan:a", a2)
	f.Follow("chan:b", b)
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for _, r := range []*recorder{a1, a2, b} {
		if calls := r.waitFor(t, "subscribed", 1); calls[0] != "poll" {
			t.Fatalf("calls %q, want a poll first", calls)
		}
	}
	numsub, err := client.PubSubNumSub(ctx, "chan:a", "chan:b").Result()
	if err != nil || numsub["chan:a"] != 1 || numsub["chan:b"] != 1 {
		t.Fatalf("NUMSUB %v, %v; want one subscriber of each channel", numsub, err)
	}
	list, err := client.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(list, " sub=2 "); n != 1 || strings.Count(list, " sub=1 ") != 0 {
		t.Fatalf("want one connection subscribed to both channels:\n%s", list)
	}

	client.Publish(ctx, "chan:a", "one")
	client.Publish(ctx, "chan:b", "two")
	a1.waitFor(t, "message one", 1)
	a2.waitFor(t, "message one", 1)
	b.waitFor(t, "message two", 1)
	for _, r := range []*recorder{a1, a2} {
		if calls := r.waitFor(t, "message one", 1); slices.Contains(calls, "message two") {
			t.Fatalf("a handler of chan:a heard chan:b: %q", calls)
		}
	}
	if slices.Contains(b.waitFor(t, "message two", 1), "message one") {
		t.Fatal("the handler of chan:b heard chan:a")
	}

	// The connection dropped: subscribed again, each handler hears of it.
	if err := client.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*recorder{a1, a2, b} {
		r.waitFor(t, "subscribed", 2)
	}
}

// Polls come every interval, with no message.
func TestFollowerPolls(t *testing.T) {
	client := redistest.Start(t).Client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := NewFollower(client, 20*time.Millisecond, nil)
	r := newRecorder()
	f.Follow("chan:a", r)
	go f.Run(ctx)
	r.waitFor(t, "poll", 3)
}

package topkeys

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// Two processes' minutes, published to one redis-server, merge into one
// answer; each minute's hash expires when the longest window leaves it.
func TestPublishedMinutesMerge(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	client := srv.Client()
	c := &clock{now: time.Now().Truncate(time.Minute).Add(10 * time.Second)}
	one, two := NewRecorder(c.Now), NewRecorder(c.Now)
	p1, p2 := NewPublisher(one, client, nil), NewPublisher(two, client, nil)

	for range 3 {
		one.Record("ns", "p", "acme", true, c.now)
	}
	one.Record("ns", "p", "globex", false, c.now)
	two.Record("ns", "p", "acme", true, c.now.Add(-time.Minute))
	two.Record("ns", "p", "initech", true, c.now)
	for _, p := range []*Publisher{p1, p2} {
		if err := p.Publish(ctx); err != nil {
			t.Fatal(err)
		}
	}
	a := top(t, NewReader(client, c.Now), DefaultWindow)
	if got := counts(a.Denied); got["acme"] != 4 || got["initech"] != 1 || len(got) != 2 || a.Denied.Total != 5 {
		t.Fatalf("denied, merged: %v of %d", got, a.Denied.Total)
	}
	if got := counts(a.Admitted); got["globex"] != 1 || len(got) != 1 {
		t.Fatalf("admitted, merged: %v", got)
	}

	// Published again, a process's minute replaces its field.
	one.Record("ns", "p", "acme", true, c.now)
	if err := p1.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counts(top(t, NewReader(client, c.Now), DefaultWindow).Denied); got["acme"] != 5 {
		t.Fatalf("denied after a second publish: %v", got)
	}

	minute := c.now.Unix() / 60
	fields, err := client.HLen(ctx, Key("ns", "p", minute)).Result()
	if err != nil || fields != 2 {
		t.Fatalf("the minute's hash has %d fields (%v), want one per process", fields, err)
	}
	expiry, err := client.PExpireTime(ctx, Key("ns", "p", minute)).Result()
	if want := time.Unix((minute+1)*60, 0).Add(MaxWindow); err != nil || expiry != time.Duration(want.UnixMilli())*time.Millisecond {
		t.Fatalf("the minute expires at %v (%v), want %v", expiry, err, want)
	}

	// Nothing recorded since: nothing sent (the first INFO is the one
	// command between the two readings).
	commands := func() int {
		info, err := srv.Info(ctx, "stats")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(info["total_commands_processed"])
		return n
	}
	before := commands()
	if err := p1.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if sent := commands() - before - 1; sent != 0 {
		t.Fatalf("a publish with nothing new sent %d commands", sent)
	}
}

// TestPublishedWindowIsTheLastMinutes: merged through Redis, the window
// covers the last minutes as the memory store's does.
func TestPublishedWindowIsTheLastMinutes(t *testing.T) {
	ctx := context.Background()
	client := redistest.Start(t).Client()
	// Now, so that the minutes published have not expired in Redis.
	c := &clock{now: time.Now()}
	r := NewRecorder(c.Now)
	p := NewPublisher(r, client, nil)
	checkLastMinutes(t, c, func(key string, at time.Time) {
		r.Record("ns", "p", key, true, at)
		if err := p.Publish(ctx); err != nil {
			t.Fatal(err)
		}
	}, NewReader(client, c.Now))
}

// A publish that fails is sent again by the next one.
func TestFailedPublishIsRetried(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	client := srv.Client()
	r := NewRecorder(nil)
	p := NewPublisher(r, client, nil)
	r.Record("ns", "p", "acme", true, time.Now())
	srv.Stop()
	if err := p.Publish(ctx); err == nil {
		t.Fatal("published to a stopped server")
	}
	srv.Restart()
	if err := p.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counts(top(t, NewReader(client, nil), DefaultWindow).Denied); got["acme"] != 1 {
		t.Fatalf("denied after the retried publish: %v", got)
	}
}

// Over a Redis Cluster, one publish carries the minutes of policies in
// several slots, and a policy's minutes share one slot (its hash tag),
// read in one pipeline.
func TestPublishedMinutesOverCluster(t *testing.T) {
	ctx := context.Background()
	client := redistest.StartCluster(t, 3).Client()
	now := time.Now()
	r := NewRecorder(nil)
	policies := []string{"a", "b", "c", "d", "e", "f"}
	for _, p := range policies {
		r.Record("ns", p, "acme", true, now)
		r.Record("ns", p, "acme", true, now.Add(-2*time.Minute))
	}
	if err := NewPublisher(r, client, nil).Publish(ctx); err != nil {
		t.Fatal(err)
	}
	reader := NewReader(client, nil)
	for _, p := range policies {
		a, err := reader.Top(ctx, "ns", p, DefaultWindow)
		if err != nil {
			t.Fatal(err)
		}
		if got := counts(a.Denied); got["acme"] != 2 {
			t.Errorf("policy %s: denied %v", p, got)
		}
	}
}

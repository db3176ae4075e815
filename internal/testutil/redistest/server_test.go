package redistest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

func TestServerLifecycle(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	c := s.Client()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := c.ConfigGet(ctx, "save").Val()["save"]; got != "" {
		t.Fatalf("persistence on: save=%q", got)
	}

	// Freeze: nothing answers; Thaw: it answers again, data intact.
	s.Freeze()
	quick := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1, DisableIdentity: true})
	defer quick.Close()
	if err := quick.Get(ctx, "k").Err(); err == nil {
		t.Fatal("frozen server answered")
	}
	s.Thaw()
	if got := waitGet(t, s, "k"); got != "v" {
		t.Fatalf("after thaw: %q", got)
	}

	// Restart: same port, empty dataset.
	port := s.Port()
	s.Restart()
	if s.Port() != port {
		t.Fatalf("restart moved port %d -> %d", port, s.Port())
	}
	if got := waitGet(t, s, "k"); got != "" {
		t.Fatalf("data survived restart: %q", got)
	}

	// Kill then Restart from stopped.
	s.Kill()
	s.Restart()
	if err := s.Client().Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.Stop()
}

// waitGet reads key, retrying while the client reconnects.
func waitGet(t *testing.T, s *redistest.Server, key string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := s.Client().Get(context.Background(), key).Result()
		if err == nil || err.Error() == "redis: nil" {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	ctx := context.Background()
	cc := c.Client()
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		if err := cc.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	masters := 0
	if err := cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if n.Client().DBSize(ctx).Val() > 0 {
			masters++
		}
	}
	if masters < 2 {
		t.Fatalf("keys on %d masters", masters)
	}
}

func TestProxyCountsAndLosesReplies(t *testing.T) {
	s := redistest.Start(t)
	p := redistest.StartProxy(t, s.Addr())
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DisableIdentity: true})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v := c.Get(ctx, "k").Val(); v != "v" {
		t.Fatalf("get through the proxy: %q", v)
	}
	var names []string
	for _, cmd := range p.Commands() {
		names = append(names, cmd.Name)
	}
	if got := strings.Join(names, " "); !strings.HasSuffix(got, "SET GET") {
		t.Fatalf("commands %q", got)
	}

	lost := p.LoseReply("incr", 0)
	if err := c.Incr(ctx, "n").Err(); err == nil {
		t.Fatal("INCR answered although its reply was lost")
	}
	<-lost
	if n := s.Client().Get(ctx, "n").Val(); n != "1" {
		t.Fatalf("counter after a lost reply: %q, want 1 (ran once, not replayed)", n)
	}
	if err := c.Incr(ctx, "n").Err(); err != nil { // a new connection
		t.Fatal(err)
	}
	if p.Accepted() != 2 {
		t.Fatalf("%d connections, want 2", p.Accepted())
	}
}

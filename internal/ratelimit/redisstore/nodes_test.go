package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestNodes: in Cluster mode the store names the master each request goes
// to, as CLUSTER SLOTS says; a call to a dead master fails with a
// NodeError naming it while the other masters answer; a frozen master
// does not hold the replies of calls to the others sent in the same batch.
func TestNodes(t *testing.T) {
	cl := redistest.StartCluster(t, 3, redistest.WithArgs("--cluster-require-full-coverage", "no"))
	client := NewClient(&redis.UniversalOptions{Addrs: cl.Addrs(), DisableIdentity: true})
	t.Cleanup(func() { _ = client.Close() })
	s, err := New(client, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	limit := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 100, Interval: time.Hour}
	request := func(values ...string) *ratelimit.Request {
		req := &ratelimit.Request{}
		for _, v := range values {
			req.Entries = append(req.Entries, ratelimit.Entry{Key: ratelimit.Key("ns", "p", v, "l"), Limit: limit, Cost: 1})
		}
		return req
	}
	// One key value per master.
	valueOn := map[string]string{}
	for i := 0; len(valueOn) < 3; i++ {
		v := fmt.Sprintf("v%d", i)
		m, err := cl.MasterOf(ctx, int(ratelimit.HashSlot(ratelimit.Key("ns", "p", v, "l"))))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := valueOn[m.Addr()]; !ok {
			valueOn[m.Addr()] = v
		}
	}
	masters := slices.Sorted(func(yield func(string) bool) {
		for m := range valueOn {
			if !yield(m) {
				return
			}
		}
	})

	all, err := s.AllNodes(ctx)
	if err != nil || !slices.Equal(all, masters) {
		t.Fatalf("AllNodes: %v, %v; want %v", all, err, masters)
	}
	for _, m := range masters {
		if got := s.NodesOf(ctx, request(valueOn[m], valueOn[m]), nil); !slices.Equal(got, []string{m}) {
			t.Errorf("NodesOf a key value on %s: %v", m, got)
		}
	}
	if got := s.NodesOf(ctx, request(valueOn[masters[0]], valueOn[masters[1]]), []string{"x"}); !slices.Equal(got, []string{"x", masters[0], masters[1]}) {
		t.Errorf("NodesOf two masters' key values, appended to [x]: %v", got)
	}

	frozen, dead := cl.Node(masters[1]), cl.Node(masters[2])

	t.Run("a frozen master holds only its own calls", func(t *testing.T) {
		frozen.Freeze()
		defer frozen.Thaw()
		// Two requests queued at once, the frozen master's first: each
		// master has its own flushers, so the frozen one cannot hold the
		// healthy one's reply.
		queue := func(value string) *checkState {
			req := request(value)
			cs := &checkState{done: make(chan struct{}, 1), deadline: time.Now().Add(3 * time.Second)}
			s.compile(req, cs)
			s.b.submit(s.prepare(ctx, req, cs, false, -1))
			return cs
		}
		onFrozen := queue(valueOn[masters[1]])
		onHealthy := queue(valueOn[masters[0]])
		<-onHealthy.done
		select {
		case <-onFrozen.done:
			t.Fatalf("the frozen master's call was answered (%v) before the healthy one's was seen", onFrozen.call.err)
		default:
		}
		if err := onHealthy.call.err; err != nil {
			t.Fatalf("the healthy master's call: %v", err)
		}
		<-onFrozen.done // the frozen call's deadline
	})

	// A request with a key on a healthy master and one on a frozen master:
	// its timeout is the frozen master's failure, not the healthy one's
	// (the checker keeps the healthy master's breaker closed).
	t.Run("a request spanning a frozen master times out naming it", func(t *testing.T) {
		frozen.Freeze()
		defer frozen.Thaw()
		var dec ratelimit.Decision
		err := s.Check(ctx, 200*time.Millisecond, request(valueOn[masters[0]], valueOn[masters[1]]), &dec)
		// The deadline ends the call while it waits for the answer
		// (DeadlineExceeded) or, on a loaded machine, while the frozen
		// master's socket still refuses the request (the connection's
		// write timeout): a timeout either way.
		var ne *ratelimit.NodeError
		var netErr net.Error
		timedOut := errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()
		if !errors.As(err, &ne) || ne.Node != masters[1] || !timedOut {
			t.Fatalf("a request on a healthy and a frozen master: %v; want a timeout naming %s", err, masters[1])
		}
	})

	t.Run("a dead master's calls fail naming it", func(t *testing.T) {
		dead.Kill()
		var dec ratelimit.Decision
		err := s.Check(ctx, 2*time.Second, request(valueOn[masters[2]]), &dec)
		var ne *ratelimit.NodeError
		if !errors.As(err, &ne) || ne.Node != masters[2] {
			t.Fatalf("a call to the dead master: %v; want a NodeError naming %s", err, masters[2])
		}
		if err := s.Check(ctx, 2*time.Second, request(valueOn[masters[0]]), &dec); err != nil || !dec.Allowed {
			t.Fatalf("a call to a healthy master: allowed %v, %v", dec.Allowed, err)
		}
	})
}

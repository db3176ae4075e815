package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of masters without replicas, on loopback.
type Cluster struct {
	t      testing.TB
	Nodes  []*Server
	client *redis.ClusterClient
}

// StartCluster starts masters (at least 3) cluster-enabled servers, joins
// them with `redis-cli --cluster create`, and waits until every node
// reports cluster_state:ok and a client sees all 16384 slots.
func StartCluster(t testing.TB, masters int, opts ...Option) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, got %d", masters)
	}
	cli := lookPath(t, "redis-cli")
	c := &Cluster{t: t}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	cfg.busPort = true
	cfg.args = append(cfg.args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "3000")
	for range masters {
		c.Nodes = append(c.Nodes, start(t, cfg))
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.waitOK()
	return c
}

// Addrs are the nodes' host:port addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Client returns a cluster client with go-redis defaults, closed when the
// test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	if c.client == nil {
		c.client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), DisableIdentity: true})
		c.t.Cleanup(func() { _ = c.client.Close() })
	}
	return c.client
}

func (c *Cluster) waitOK() {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: cluster not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) check() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		info, err := n.Client().ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: %w", n.Addr(), err)
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
			return fmt.Errorf("%s: %s", n.Addr(), firstLines(info, 3))
		}
	}
	slots, err := c.Client().ClusterSlots(ctx).Result()
	if err != nil {
		return fmt.Errorf("cluster slots: %w", err)
	}
	covered := 0
	for _, s := range slots {
		covered += s.End - s.Start + 1
	}
	if covered != 16384 {
		return fmt.Errorf("client sees %d of 16384 slots", covered)
	}
	c.Client().ReloadState(ctx)
	return nil
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[:min(n, len(lines))], "; ")
}

package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster on loopback: masters, each with its replicas.
type Cluster struct {
	t      testing.TB
	Nodes  []*Server
	client *redis.ClusterClient
	// replicas is how many replicas each master has.
	replicas int
}

// ClusterNodeTimeout is the default cluster-node-timeout of the nodes: how
// long a master may be unreachable before its replica takes over. Pass
// WithArgs("--cluster-node-timeout", ms) to change it.
const ClusterNodeTimeout = 3 * time.Second

// StartCluster starts masters (at least 3) cluster-enabled servers, joins
// them with `redis-cli --cluster create`, and waits until every node
// reports cluster_state:ok and a client sees all 16384 slots.
func StartCluster(t testing.TB, masters int, opts ...Option) *Cluster {
	t.Helper()
	return StartClusterWithReplicas(t, masters, 0, opts...)
}

// StartClusterWithReplicas starts masters*(1+replicas) cluster-enabled
// servers and joins them with `redis-cli --cluster create
// --cluster-replicas replicas`, so that every master has that many
// replicas; it waits until every node reports cluster_state:ok, a client
// sees all 16384 slots and every replica is in sync with its master.
func StartClusterWithReplicas(t testing.TB, masters, replicas int, opts ...Option) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, got %d", masters)
	}
	cli := lookPath(t, "redis-cli")
	c := &Cluster{t: t, replicas: replicas}
	cfg := config{args: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(ClusterNodeTimeout.Milliseconds(), 10)}}
	for _, o := range opts { // later arguments override the defaults above
		o(&cfg)
	}
	cfg.busPort = true
	for range masters * (1 + replicas) {
		c.Nodes = append(c.Nodes, start(t, cfg))
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
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
	if err := c.WaitHealthy(30 * time.Second); err != nil {
		c.t.Fatalf("redistest: cluster not ready: %v", err)
	}
}

// WaitHealthy waits until every running node reports cluster_state:ok
// with all slots served, a client sees all 16384 slots, no slot is served
// by a node that is not running, and (with replicas) every running node
// that serves no slots is a replica in sync with its master
// (after a kill, the promoted replica serves its master's slots alone).
func (c *Cluster) WaitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := c.check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) check() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	running := 0
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		running++
		info, err := n.Client().ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: %w", n.Addr(), err)
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
			return fmt.Errorf("%s: %s", n.Addr(), firstLines(info, 3))
		}
	}
	// go-redis's cluster client builds its slot map from CLUSTER SLOTS: check
	// the view it will have.
	slots, err := c.Client().ClusterSlots(ctx).Result() //nolint:staticcheck // see above
	if err != nil {
		return fmt.Errorf("cluster slots: %w", err)
	}
	covered := 0
	owners := map[string]bool{}
	for _, s := range slots {
		covered += s.End - s.Start + 1
		owners[s.Nodes[0].Addr] = true
		if n := c.Node(s.Nodes[0].Addr); n == nil || !n.Running() {
			return fmt.Errorf("slots %d-%d served by %s, which is not running", s.Start, s.End, s.Nodes[0].Addr)
		}
	}
	if covered != 16384 {
		return fmt.Errorf("client sees %d of 16384 slots", covered)
	}
	if c.replicas > 0 {
		synced := 0
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			info, err := n.Info(ctx, "replication")
			if err != nil {
				return fmt.Errorf("%s: %w", n.Addr(), err)
			}
			if info["role"] == "slave" && info["master_link_status"] == "up" && info["master_sync_in_progress"] == "0" {
				synced++
			}
		}
		if want := running - len(owners); synced < want {
			return fmt.Errorf("%d of %d replicas in sync", synced, want)
		}
	}
	c.Client().ReloadState(ctx)
	return nil
}

// Node returns the node at addr, or nil.
func (c *Cluster) Node(addr string) *Server {
	for _, n := range c.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// MasterOf returns the node that serves slot now, as a running node's
// CLUSTER SLOTS reports it.
func (c *Cluster) MasterOf(ctx context.Context, slot int) (*Server, error) {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		slots, err := n.Client().ClusterSlots(ctx).Result() //nolint:staticcheck // the slot map go-redis's cluster client reads
		if err != nil {
			continue
		}
		for _, s := range slots {
			if slot >= s.Start && slot <= s.End {
				if m := c.Node(s.Nodes[0].Addr); m != nil {
					return m, nil
				}
				return nil, fmt.Errorf("slot %d served by unknown node %s", slot, s.Nodes[0].Addr)
			}
		}
		return nil, fmt.Errorf("slot %d not served", slot)
	}
	return nil, fmt.Errorf("no running node answered CLUSTER SLOTS")
}

// Masters returns the running nodes that serve slots now.
func (c *Cluster) Masters(ctx context.Context) ([]*Server, error) {
	var out []*Server
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		info, err := n.Info(ctx, "replication")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.Addr(), err)
		}
		if info["role"] == "master" {
			out = append(out, n)
		}
	}
	return out, nil
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[:min(n, len(lines))], "; ")
}

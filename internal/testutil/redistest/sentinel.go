package redistest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelDownAfter is how long the Sentinels of StartSentinel wait for an
// unreachable master before they agree it is down and fail over
// (down-after-milliseconds).
const SentinelDownAfter = time.Second

// Sentinel is a master with one replica, watched by three Sentinels (a
// failover needs two of them to agree), all on loopback.
type Sentinel struct {
	t testing.TB
	// MasterName is the name the Sentinels monitor the master under.
	MasterName string
	// Nodes are the data nodes: Nodes[0] starts as the master, Nodes[1]
	// as its replica. A failover swaps the roles; Master tells which is
	// the master now. A node restarted after a kill starts with the
	// arguments it first had (Nodes[1] replicating Nodes[0]'s port, Nodes[0]
	// as an empty master) and the Sentinels then make it a replica of
	// whichever node they promoted.
	Nodes []*Server
	// Sentinels are the three Sentinel processes.
	Sentinels []*Server
	// Username and Password are the data nodes' ACL user (WithUser);
	// SentinelPassword is the Sentinels' requirepass (WithSentinelPassword).
	Username, Password, SentinelPassword string
}

// StartSentinel starts the master, its replica and three Sentinels, and
// waits until every Sentinel knows the replica and the two other
// Sentinels and the replica is in sync, so that a failover can happen.
// opts apply to the data nodes, except WithSentinelPassword; with
// WithUser the Sentinels and the replicas authenticate to the data nodes
// as that user.
func StartSentinel(t testing.TB, opts ...Option) *Sentinel {
	t.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	s := &Sentinel{t: t, MasterName: "sluice-test", Username: cfg.username, Password: cfg.password, SentinelPassword: cfg.sentinelPassword}
	if cfg.username != "" {
		// Every node: a failover makes the old master a replica.
		cfg.args = append(slices.Clone(cfg.args), "--masteruser", cfg.username, "--masterauth", cfg.password)
	}
	master := start(t, cfg)
	replicaCfg := cfg
	replicaCfg.args = append(slices.Clone(cfg.args), "--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))
	s.Nodes = []*Server{master, start(t, replicaCfg)}
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
		"sentinel down-after-milliseconds %[1]s %[3]d\n"+
		"sentinel failover-timeout %[1]s 10000\n"+
		"sentinel parallel-syncs %[1]s 1\n",
		s.MasterName, master.Port(), SentinelDownAfter.Milliseconds())
	if cfg.username != "" {
		conf += fmt.Sprintf("sentinel auth-user %s %s\nsentinel auth-pass %s %s\n", s.MasterName, cfg.username, s.MasterName, cfg.password)
	}
	if cfg.sentinelPassword != "" {
		// Sentinels also authenticate to each other with it.
		conf += fmt.Sprintf("requirepass %s\n", cfg.sentinelPassword)
	}
	for range 3 {
		s.Sentinels = append(s.Sentinels, start(t, config{conf: conf, sentinel: true, password: cfg.sentinelPassword}))
	}
	s.waitReady(30 * time.Second)
	return s
}

// Addrs are the Sentinels' addresses (what a Sentinel client is given).
func (s *Sentinel) Addrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Options returns client options for the monitored master through the
// Sentinels (redis.NewUniversalClient makes a failover client of them).
func (s *Sentinel) Options() *redis.UniversalOptions {
	return &redis.UniversalOptions{Addrs: s.Addrs(), MasterName: s.MasterName, DisableIdentity: true,
		Username: s.Username, Password: s.Password, SentinelPassword: s.SentinelPassword}
}

// Node returns the data node at addr, or nil.
func (s *Sentinel) Node(addr string) *Server {
	for _, n := range s.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// sentinelQuery runs fn against every running Sentinel.
func (s *Sentinel) sentinelQuery(fn func(*redis.SentinelClient) error) error {
	var firstErr error
	for _, n := range s.Sentinels {
		if !n.Running() {
			continue
		}
		c := redis.NewSentinelClient(&redis.Options{Addr: n.Addr(), Password: s.SentinelPassword, DisableIdentity: true, MaxRetries: -1})
		err := fn(c)
		_ = c.Close()
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("sentinel %s: %w", n.Addr(), err)
		}
	}
	return firstErr
}

// MasterAddr returns the master's address as the running Sentinels report
// it; an error when they disagree or none answers.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	var addr string
	err := s.sentinelQuery(func(c *redis.SentinelClient) error {
		hp, err := c.GetMasterAddrByName(ctx, s.MasterName).Result()
		if err != nil {
			return err
		}
		a := net.JoinHostPort(hp[0], hp[1])
		if addr != "" && a != addr {
			return fmt.Errorf("reports master %s, another reports %s", a, addr)
		}
		addr = a
		return nil
	})
	if err == nil && addr == "" {
		err = fmt.Errorf("no sentinel is running")
	}
	return addr, err
}

// Master returns the node every running Sentinel reports as the master.
func (s *Sentinel) Master(ctx context.Context) (*Server, error) {
	addr, err := s.MasterAddr(ctx)
	if err != nil {
		return nil, err
	}
	if n := s.Node(addr); n != nil {
		return n, nil
	}
	return nil, fmt.Errorf("sentinels report master %s, not one of the nodes", addr)
}

// WaitFailover waits until every running Sentinel reports a master other
// than old and that node says it is a master, and returns it.
func (s *Sentinel) WaitFailover(old *Server, timeout time.Duration) *Server {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		m, err := s.Master(ctx)
		if err == nil && m == old {
			err = fmt.Errorf("sentinels still report %s", old.Addr())
		}
		if err == nil {
			var info map[string]string
			if info, err = m.Info(ctx, "replication"); err == nil && info["role"] != "master" {
				err = fmt.Errorf("%s has role %s", m.Addr(), info["role"])
			}
		}
		cancel()
		if err == nil {
			return m
		}
		lastErr = err
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("redistest: no failover away from %s within %s: %v", old.Addr(), timeout, lastErr)
	return nil
}

// WaitReplicaSynced waits until node is a replica with its link to the
// master up and no sync in progress.
func (s *Sentinel) WaitReplicaSynced(node *Server, timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := node.Info(ctx, "replication")
		cancel()
		switch {
		case err != nil:
			lastErr = err
		case info["role"] != "slave" || info["master_link_status"] != "up" || info["master_sync_in_progress"] != "0":
			lastErr = fmt.Errorf("role %s, link %s, sync in progress %s", info["role"], info["master_link_status"], info["master_sync_in_progress"])
		default:
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("redistest: %s not a synced replica within %s: %v", node.Addr(), timeout, lastErr)
}

// waitReady waits until every Sentinel monitors the master with the
// replica and the two other Sentinels known, and the replica is synced.
func (s *Sentinel) waitReady(timeout time.Duration) {
	s.t.Helper()
	s.WaitReplicaSynced(s.Nodes[1], timeout)
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		lastErr = s.sentinelQuery(func(c *redis.SentinelClient) error {
			m, err := c.Master(ctx, s.MasterName).Result()
			if err != nil {
				return err
			}
			if m["flags"] != "master" || m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
				return fmt.Errorf("flags %s, replicas %s, other sentinels %s", m["flags"], m["num-slaves"], m["num-other-sentinels"])
			}
			return nil
		})
		cancel()
		if lastErr == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("redistest: sentinels not ready within %s: %v", timeout, lastErr)
}

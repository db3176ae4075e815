// Package reliability tests Sluice under faults against real servers on
// loopback: redis-server killed, frozen and flushed under load, replies
// lost after the write, a Sentinel failover, a Redis Cluster master lost,
// and a million distinct key values. Every figure the tests measure is in
// their log (go test -v).
package reliability

import (
	"context"
	"os"
	"testing"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// discard drops go-redis's log lines (a dial failure per attempt while a
// server is down); the tests count the errors that matter themselves.
type discard struct{}

func (discard) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	logf.SetLogger(logr.Discard()) // the table sync logs its retries while Redis is away
	redis.SetLogger(discard{})
	os.Exit(m.Run())
}

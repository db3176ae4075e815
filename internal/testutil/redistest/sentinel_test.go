package redistest

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestSentinelWithAuth: the Sentinels require their own password and the
// data nodes an ACL user; StartSentinel returning means the Sentinels
// reached the data nodes and each other with them.
func TestSentinelWithAuth(t *testing.T) {
	ctx := context.Background()
	sen := StartSentinel(t, WithUser("sluice", "data-pw"), WithSentinelPassword("sentinel-pw"))

	c := redis.NewUniversalClient(sen.Options())
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("through the Sentinels with both credentials: %v", err)
	}
	if who, err := c.Do(ctx, "ACL", "WHOAMI").Text(); err != nil || who != "sluice" {
		t.Fatalf("ACL WHOAMI = %q, %v; want sluice", who, err)
	}

	anon := redis.NewSentinelClient(&redis.Options{Addr: sen.Sentinels[0].Addr(), DisableIdentity: true, MaxRetries: -1})
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("a Sentinel without its password: %v, want NOAUTH", err)
	}
	def := redis.NewClient(&redis.Options{Addr: sen.Nodes[0].Addr(), DisableIdentity: true, MaxRetries: -1})
	defer def.Close()
	if err := def.Get(ctx, "k").Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("a data node as the default user: %v, want NOAUTH", err)
	}
}

package middleware

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
)

// NewRedisClient returns a go-redis client for WithRedis: a single server,
// a Sentinel-managed master (MasterName set) or a Cluster (several Addrs
// or IsClusterMode), with MaxRetries -1 and ContextTimeoutEnabled set
// (WithRedis says why). It changes o. The caller closes the client.
func NewRedisClient(o *redis.UniversalOptions) redis.UniversalClient {
	return redisstore.NewClient(o)
}

// checkRedisClient refuses a client that retries commands or ignores
// context deadlines. go-redis turns MaxRetries -1 into 0 for a Client
// and keeps it for a ClusterClient; a positive value means retries.
func checkRedisClient(client redis.UniversalClient) error {
	var retries int
	var ctxTimeout bool
	switch c := client.(type) {
	case *redis.Client:
		retries, ctxTimeout = c.Options().MaxRetries, c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		retries, ctxTimeout = c.Options().MaxRetries, c.Options().ContextTimeoutEnabled
	default:
		return nil // redisstore.New refuses what it cannot use
	}
	if retries > 0 {
		return fmt.Errorf("middleware: WithRedis: the client retries failed commands (MaxRetries %d), which could count one request twice: build it with middleware.NewRedisClient, or set MaxRetries: -1 and ContextTimeoutEnabled: true", retries)
	}
	if !ctxTimeout {
		return errors.New("middleware: WithRedis: the client ignores context deadlines (ContextTimeoutEnabled false), so a frozen Redis would hold connections past the store timeout: build it with middleware.NewRedisClient, or set MaxRetries: -1 and ContextTimeoutEnabled: true")
	}
	return nil
}

// newRedisStore builds the Redis store of WithRedis or WithRedisURL and
// what Close must close, in order.
func newRedisStore(c *config) (*redisstore.Store, []func() error, error) {
	client := c.redisClient
	var closers []func() error
	if c.redisURL != "" {
		o, err := redis.ParseURL(c.redisURL)
		if err != nil {
			return nil, nil, fmt.Errorf("middleware: WithRedisURL: %w", err)
		}
		o.MaxRetries = -1
		o.ContextTimeoutEnabled = true
		cl := redis.NewClient(o)
		client = cl
		closers = append(closers, cl.Close)
	} else if err := checkRedisClient(client); err != nil {
		return nil, nil, err
	}
	st, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		for _, cl := range closers {
			_ = cl()
		}
		return nil, nil, fmt.Errorf("middleware: %w", err)
	}
	// The store first: its pipelines use the client.
	return st, append([]func() error{st.Close}, closers...), nil
}

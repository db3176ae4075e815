package redisconn

import (
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
)

// Conn is a client made from a Config and the rate-limit store over it.
type Conn struct {
	Client redis.UniversalClient
	Store  *redisstore.Store
}

// Connect makes the client of c (redisstore.NewClient: no retries,
// context deadlines bound the I/O) and the store over it. Nothing is
// sent to Redis yet.
func (c *Config) Connect(opts redisstore.Options) (*Conn, error) {
	o, err := c.Options()
	if err != nil {
		return nil, err
	}
	client := redisstore.NewClient(o)
	store, err := redisstore.New(client, opts)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return &Conn{Client: client, Store: store}, nil
}

// Close closes the store, then the client its pipelines use.
func (c *Conn) Close() {
	_ = c.Store.Close()
	_ = c.Client.Close()
}

package redisstore

import (
	"context"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// CheckBatch exposes checkBatch to the external tests: reqs evaluated as
// flushers do when they are queued together (merged commands, one
// pipeline), request i at time at[i] µs (-1: the server's TIME).
func (s *Store) CheckBatch(ctx context.Context, reqs []*ratelimit.Request, at []int64, decs []ratelimit.Decision) error {
	return s.checkBatch(ctx, reqs, at, decs)
}

// BetweenRounds sets a function the store calls between the dry run and
// the consuming round of a request that takes several calls (nil: none).
func BetweenRounds(s *Store, f func()) { s.betweenRounds = f }

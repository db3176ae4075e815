// Package ratelimit is Sluice's rate-limit engine: the limit and decision
// value types, the Store interface that the Redis and in-memory stores
// implement, and the Redis key encoding.
//
// The algorithms themselves live in sub-packages: model holds the Go
// reference of each algorithm (pure functions over a small state), memstore
// an in-process Store built on it, and redisstore the Lua library and the
// Redis Store. Both stores give bit-identical decisions for the same
// timeline; the tests check this.
//
// Time is kept in whole microseconds everywhere inside the engine; durations
// handed back to callers are rounded up to the microsecond, so a Retry-After
// derived from them is never early.
package ratelimit

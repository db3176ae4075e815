// Package model is the Go reference of Sluice's algorithms: pure
// functions over a small State and a time in microseconds. The Lua library
// in redisstore implements the same functions and must agree with this
// package exactly (decisions, remaining, reset and retry-after); the
// differential tests check it.
//
// # Arithmetic
//
// Lua numbers are IEEE doubles. Every algorithm except the sliding window
// counter uses integers only, in microseconds, and Limit.Validate bounds the
// parameters so that every intermediate value stays below 2^53, where
// doubles are exact. Integer division in Lua is math.floor(a/b) (or ceil):
// for 0 <= a < 2^53 the rounding error of a/b is below 1/b, so the floor of
// the rounded quotient is the exact integer quotient.
//
// The sliding window counter's weight is a fraction of a window, so it is
// computed in doubles with one fixed operation order,
// floor((prev*(window-elapsed))/window), in both languages (Go converts each
// product explicitly so the compiler cannot fuse a multiply-add). Its
// retry-after is found by binary search over that same monotone predicate,
// so it is exact with respect to the admitted set.
//
// # Time going backwards
//
// Redis TIME can step back after a failover to a replica with a slower
// clock. No algorithm ever moves its state back: a time before the state's
// own timestamp is evaluated as if it were that timestamp, and durations
// are then measured from the real now (so they grow by the skew).
package model

// Package ratelimittest holds what the stores' tests share: a simulated
// clock, a Reference store that applies the model directly, each algorithm's
// documented behavior as examples, and a differential driver that runs one
// random timeline against several stores and compares their decisions.
package ratelimittest

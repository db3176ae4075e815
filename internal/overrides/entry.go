// Package overrides keeps the overrides of key values: other numbers for
// the limits of one key value of a policy (a tenant, an API key, a client
// network). They come from two sources, run time over declared: run-time
// ones are set through Runtime and kept in a Store (Redis, shared by every
// process and surviving restarts, or the memory of a local process);
// declared ones are the entries of RateLimitOverrides objects. An Index
// holds both, compiled against the policies in force, and gives the
// checker the one in force for a key (check.Overrides).
package overrides

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
)

// MaxPerPolicy bounds the overrides of one policy, declared and run time
// together: memory and lookup cost are measured at this bound
// (BenchmarkIndexAt100k).
const MaxPerPolicy = 100_000

// The kinds of Runtime's errors (see Error): an admin API answers
// ErrNotFound with 404, ErrInvalid and ErrTooMany with 400.
var (
	// ErrNotFound: no such policy, limit or (to delete) override.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: a malformed key, number or expiry.
	ErrInvalid = errors.New("invalid override")
	// ErrTooMany: the policy has MaxPerPolicy overrides already.
	ErrTooMany = errors.New("too many overrides")
)

// Error is an error of Runtime's methods: its message names the argument
// and what is wrong with it; errors.Is matches its Kind.
type Error struct {
	Kind    error
	Message string
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Kind }

func errorf(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// PolicyID names a policy: its namespace and name.
type PolicyID struct {
	Namespace, Name string
}

// String is "namespace/name".
func (id PolicyID) String() string { return id.Namespace + "/" + id.Name }

// Entry is one override as kept and listed.
type Entry struct {
	// Key is the key value as the policy's key template renders it.
	Key string `json:"key"`
	// Limits are the numbers by limit name: each limit's quota (what the
	// RateLimit-Policy header reports as q).
	Limits map[string]int64 `json:"limits"`
	// Source is Runtime or Declared.
	Source policy.OverrideSource `json:"source"`
	// Expires is when the override stops applying; nil: never.
	Expires *time.Time `json:"expires"`
	// SetBy names who set a run-time override.
	SetBy string `json:"setBy,omitempty"`
	// SetAt is when a run-time override was set.
	SetAt time.Time `json:"setAt,omitzero"`
	// Object names the RateLimitOverrides object of a declared override.
	Object string `json:"object,omitempty"`
}

// expired reports whether e no longer applies at now.
func (e *Entry) expired(now time.Time) bool { return e.Expires != nil && !now.Before(*e.Expires) }

// compile compiles e against p.
func (e *Entry) compile(p *policy.Policy) (*policy.Override, error) {
	var expires time.Time
	if e.Expires != nil {
		expires = *e.Expires
	}
	return p.NewOverride(e.Source, e.Limits, expires, e.SetBy, e.Object)
}

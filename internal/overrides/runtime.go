package overrides

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/policytable"
)

// MaxKeyLen bounds a run-time override's key value: long enough for the
// key values people target that a declared entry cannot hold (a bearer
// token, a signed header), as bans and resets do. An override is found by
// the whole key value, and its counters' key is the policy's
// (ratelimit.Key, hashed when long), so a long one is as exact as a short
// one. The bound keeps what MaxPerPolicy entries take in the store and in
// every check process's index within 100,000 × 4 KiB.
const MaxKeyLen = 4 << 10

// Runtime sets, lists and deletes run-time overrides: the Go API behind
// the admin API's overrides. Every change is logged with who made it.
type Runtime struct {
	// Store keeps the overrides.
	Store Store
	// Policy returns the policy in force named id; nil when there is none.
	Policy func(ctx context.Context, id PolicyID) (*policy.Policy, error)
	// Log receives each change; nil: slog.Default().
	Log *slog.Logger
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Set sets (or replaces) the run-time override of key for policy id:
// limits are numbers by limit name, expires (nil: never) when it stops
// applying, by who sets it. It returns the override as List shows it.
// Errors wrap ErrNotFound (no such policy or limit), ErrInvalid (an empty
// or too long key, a number the limit cannot take, an expiry not in the
// future) or ErrTooMany (the policy has MaxPerPolicy overrides), each
// naming the argument; nothing is changed then.
func (r *Runtime) Set(ctx context.Context, id PolicyID, key string, limits map[string]int64, expires *time.Time, by string) (Entry, error) {
	p, err := r.policy(ctx, id)
	if err != nil {
		return Entry{}, err
	}
	now := r.now()
	switch {
	case key == "":
		return Entry{}, errorf(ErrInvalid, "key is required")
	case len(key) > MaxKeyLen:
		return Entry{}, errorf(ErrInvalid, "key is %d bytes long, more than %d", len(key), MaxKeyLen)
	case expires != nil && !expires.After(now):
		return Entry{}, errorf(ErrInvalid, "expires %s is in the past", expires.UTC().Format(time.RFC3339))
	}
	e := Entry{Key: key, Limits: limits, Source: policy.OverrideRuntime, Expires: expires, SetBy: by, SetAt: now.UTC()}
	if _, err := e.compile(p); err != nil {
		var unknown *policy.UnknownLimitError
		if errors.As(err, &unknown) {
			return Entry{}, errorf(ErrNotFound, "%v", err)
		}
		return Entry{}, errorf(ErrInvalid, "%v", err)
	}
	if err := r.Store.Put(ctx, id, e); err != nil {
		return Entry{}, err
	}
	r.log().Info("override set", "policy", id.String(), "key", key, "limits", limits, "expires", expires, "by", by)
	return e, nil
}

// Delete deletes the run-time override of key for policy id (a declared
// one stays: it is changed in its object). Errors wrap ErrNotFound (no
// such policy, or no run-time override of key) or ErrInvalid (no key).
func (r *Runtime) Delete(ctx context.Context, id PolicyID, key, by string) error {
	if _, err := r.policy(ctx, id); err != nil {
		return err
	}
	if key == "" {
		return errorf(ErrInvalid, "key is required")
	}
	deleted, err := r.Store.Delete(ctx, id, key)
	if err != nil {
		return err
	}
	if !deleted {
		return errorf(ErrNotFound, "policy %s has no run-time override of key %q", id, key)
	}
	r.log().Info("override deleted", "policy", id.String(), "key", key, "by", by)
	return nil
}

// List returns policy id's overrides in force: the run-time ones (read
// from the store, so every process lists the same) then the declared
// ones, each group sorted by key. Expired run-time overrides are left out,
// and deleted from the store. Errors wrap ErrNotFound for no such policy.
func (r *Runtime) List(ctx context.Context, id PolicyID) ([]Entry, error) {
	if _, err := r.policy(ctx, id); err != nil {
		return nil, err
	}
	stored, err := r.Store.LoadPolicy(ctx, id)
	if err != nil {
		return nil, err
	}
	now := r.now()
	out := make([]Entry, 0, len(stored.Runtime)+len(stored.Declared))
	for key, e := range stored.Runtime {
		if e.expired(now) {
			if _, err := r.Store.Delete(ctx, id, key); err == nil {
				r.log().Info("override expired", "policy", id.String(), "key", key, "expires", e.Expires)
			}
			continue
		}
		out = append(out, e)
	}
	sortByKey(out)
	runtime := len(out)
	for _, e := range stored.Declared {
		if !e.expired(now) {
			out = append(out, e)
		}
	}
	sortByKey(out[runtime:])
	return out, nil
}

func (r *Runtime) policy(ctx context.Context, id PolicyID) (*policy.Policy, error) {
	p, err := r.Policy(ctx, id)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, errorf(ErrNotFound, "policy %s not found", id)
	}
	return p, nil
}

// PolicyOf returns a Runtime.Policy that finds policies in the set
// policies gives (a check process's source, local mode's folder).
func PolicyOf(policies func() *policy.Set) func(context.Context, PolicyID) (*policy.Policy, error) {
	return func(_ context.Context, id PolicyID) (*policy.Policy, error) {
		return policies().Get(id.Namespace, id.Name), nil
	}
}

// PolicyInTable returns a Runtime.Policy that reads policies from the
// policy table (the controller process, which holds no compiled set): the
// entry as the check processes compile it.
func PolicyInTable(t *policytable.Table) func(context.Context, PolicyID) (*policy.Policy, error) {
	return func(ctx context.Context, id PolicyID) (*policy.Policy, error) {
		e, ok, err := t.Get(ctx, id.Namespace, id.Name)
		if err != nil || !ok {
			return nil, err
		}
		return policy.CompileTargeted(e.Namespace, e.Name, &e.Spec, e.Routes)
	}
}

func sortByKey(entries []Entry) {
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
}

func (r *Runtime) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Runtime) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

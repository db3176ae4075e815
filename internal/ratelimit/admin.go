package ratelimit

import (
	"context"
	"time"
)

// Resetter is a store that forgets limit state on an operator's word (the
// admin API's reset and lift).
type Resetter interface {
	// Reset removes the state of each entry's limit (its Key; Limit says
	// where a limit of its algorithm keeps it), so that the next request
	// finds it untouched. The bucket's ban stays: that is Lift's.
	Reset(ctx context.Context, entries []Entry) error
	// Lift ends the ban of the bucket of key (a Key of one of its limits)
	// and clears its penalty box's count of denials.
	Lift(ctx context.Context, key string) error
}

// Ban is a ban in force over one key value of one policy.
type Ban struct {
	KeyValue string
	// Until is the ban's end.
	Until time.Time
	// Length is how long the ban was issued for.
	Length time.Duration
}

// BanIndex records, per policy, the key values whose buckets a check saw
// banned, so that the bans in force can be listed (a bucket's ban lives in
// the bucket, found only by its key). An entry ends with its ban.
type BanIndex interface {
	// RecordBan notes that the bucket of value was banned for length,
	// until until.
	RecordBan(ctx context.Context, namespace, policy string, b Ban) error
	// Bans lists the policy's bans in force at now, soonest end first.
	Bans(ctx context.Context, namespace, policy string, now time.Time) ([]Ban, error)
	// ForgetBan drops value from the policy's index (its ban was lifted).
	ForgetBan(ctx context.Context, namespace, policy, value string) error
}

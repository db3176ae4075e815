package check

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Observer is told what the checker did: each check once it is decided,
// the buckets given units back, the bans lifted. Who counts, logs,
// records and announces is registered where the checker is assembled
// (Options.Observer; Observers tells several), never in the deciding
// code. Its methods must not block: they run on the check's path.
type Observer interface {
	// Checked is told of every check but a dry run, once decided: a
	// decision (Observation.Decides), or a refund or release, which are
	// none. ob is valid only during the call.
	Checked(ctx context.Context, ob *Observation)
	// Refunded is told the keys of buckets given units back (a check's
	// refund or release, a reset, a lease's unused units), which another
	// check process may remember denials of. keys is valid only during
	// the call.
	Refunded(keys []string)
	// Lifted is told the keys of buckets whose ban was lifted. Same terms
	// as Refunded.
	Lifted(keys []string)
}

// Observation is one check as its observers see it.
type Observation struct {
	Input   *Input
	Outcome *Outcome
	// Err is the check's error: then the Outcome holds what was decided
	// before it (the limits of 0 a request met, a release refused), and
	// its verdicts are not judged.
	Err error
	// Sent is when the check's store call was sent (a ban it issued runs
	// from then); zero when none was.
	Sent time.Time

	// set is the policy set the check was decided by; clock the checker's.
	set   *policy.Set
	clock func() time.Time
}

// Decides reports whether the check was a decision: it consumed, and not
// only to read the figures of parts that gave their cost back
// (Part.Refunded). Dry runs, refunds and releases are no decisions.
func (ob *Observation) Decides() bool { return ob.Outcome.decides }

// Now reads the checker's clock.
func (ob *Observation) Now() time.Time { return ob.clock() }

// Observers tells each of its observers in turn.
type Observers []Observer

// Checked implements Observer.
func (os Observers) Checked(ctx context.Context, ob *Observation) {
	for _, o := range os {
		o.Checked(ctx, ob)
	}
}

// Refunded implements Observer.
func (os Observers) Refunded(keys []string) {
	for _, o := range os {
		o.Refunded(keys)
	}
}

// Lifted implements Observer.
func (os Observers) Lifted(keys []string) {
	for _, o := range os {
		o.Lifted(keys)
	}
}

// checksOnly is the part of an Observer that is told of nothing but checks.
type checksOnly struct{}

func (checksOnly) Refunded([]string) {}
func (checksOnly) Lifted([]string)   {}

// KeyRecorder is told how each policy decided each key value
// (topkeys.Recorder, which finds the key values decided most).
type KeyRecorder interface {
	Record(namespace, policy, key string, denied bool, at time.Time)
}

// RecordKeys is an Observer that tells rec, for each decision, each
// policy's key value and whether it denied: any of its limits denied (a
// shadow policy's too: what it would deny), or it admitted the request
// allowed. A policy whose limits allowed a request another denied
// admitted nothing (nothing was consumed) and denied nothing, and is not
// told; nor is one that decided nothing (a missing key, the failure mode,
// another policy's cached denial answered first), nor one of a part that
// gave its cost back, read for the answer only (Part.Refunded).
func RecordKeys(rec KeyRecorder) Observer { return keyObserver{rec: rec} }

type keyObserver struct {
	checksOnly
	rec KeyRecorder
}

func (k keyObserver) Checked(_ context.Context, ob *Observation) {
	if ob.Err != nil || !ob.Decides() {
		return
	}
	out := ob.Outcome
	now := ob.Now()
	for i := range out.Policies {
		if pr := &out.Policies[i]; pr.decided && !pr.givesBack && (pr.denied || out.Allowed) {
			k.rec.Record(pr.Policy.Namespace, pr.Policy.Name, pr.KeyValue, pr.denied, now)
		}
	}
}

// DenialLog is told of denials (the decision log).
type DenialLog interface {
	Denied(ctx context.Context, in *Input, out *Outcome)
}

// LogDenials is an Observer that tells log of every denial of a decision.
func LogDenials(log DenialLog) Observer { return denialObserver{log: log} }

type denialObserver struct {
	checksOnly
	log DenialLog
}

func (d denialObserver) Checked(ctx context.Context, ob *Observation) {
	if ob.Err == nil && !ob.Outcome.Allowed && ob.Decides() {
		d.log.Denied(ctx, ob.Input, ob.Outcome)
	}
}

// RecordBans is an Observer that notes in index, off the check's path,
// each ban a consuming check issued to an enforced policy's bucket, so
// that the bans in force can be listed (Buckets.Bans). log receives the
// notes that fail (default slog.Default()).
func RecordBans(index ratelimit.BanIndex, log *slog.Logger) Observer {
	if log == nil {
		log = slog.Default()
	}
	return banObserver{index: index, log: log}
}

type banObserver struct {
	checksOnly
	index ratelimit.BanIndex
	log   *slog.Logger
}

// banRecordTimeout bounds the note of one ban.
const banRecordTimeout = time.Second

func (b banObserver) Checked(ctx context.Context, ob *Observation) {
	if ob.Input.Action != ratelimit.Consume {
		return
	}
	for i := range ob.Outcome.Policies {
		pr := &ob.Outcome.Policies[i]
		if pr.Ban <= 0 || pr.Policy.Shadow {
			continue
		}
		p, ban := pr.Policy, ratelimit.Ban{KeyValue: pr.KeyValue, Until: ob.Sent.Add(pr.Ban), Length: pr.Ban}
		go func() {
			// Off the check's path: the note outlives the check's context.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), banRecordTimeout)
			defer cancel()
			if err := b.index.RecordBan(ctx, p.Namespace, p.Name, ban); err != nil {
				b.log.Warn("cannot record a ban in the index of bans; it is enforced, but not listed", "policy", p.Namespace+"/"+p.Name, "err", err)
			}
		}()
	}
}

// Announce is an Observer that tells the other check processes of the
// buckets given units back (refunds) and of the bans lifted (lifts), so
// that they forget their denials of them too (Checker.ForgetDenials,
// Checker.ForgetLifted). Either may be nil.
func Announce(refunds, lifts func(keys []string)) Observer {
	return announcer{refunds: refunds, lifts: lifts}
}

type announcer struct {
	refunds, lifts func(keys []string)
}

func (announcer) Checked(context.Context, *Observation) {}

func (a announcer) Refunded(keys []string) {
	if a.refunds != nil {
		a.refunds(keys)
	}
}

func (a announcer) Lifted(keys []string) {
	if a.lifts != nil {
		a.lifts(keys)
	}
}

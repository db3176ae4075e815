package topkeys

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/adminapi"
)

// DefaultWindow is the window Top covers when none is asked for.
const DefaultWindow = adminapi.DefaultTopWindow

// MaxWindow is the longest window the admin API asks for: what the
// minutes each process keeps, and how long a published minute lives in
// Redis after it ends, must cover.
const MaxWindow = adminapi.MaxTopWindow

// ringMinutes are the minutes a ring keeps: every one a MaxWindow
// window can overlap (windowMinutes).
const ringMinutes = int(MaxWindow/time.Minute) + 1

// Recorder keeps this process's sketches: per policy, a ring of the
// minutes a MaxWindow window overlaps, each with a sketch of the denied and one of the
// admitted key values. It is safe for concurrent use; a check locks only
// the ring of the policy it records, for a few map and heap steps.
type Recorder struct {
	now      func() time.Time
	policies sync.Map // policyID -> *ring
}

type policyID struct{ namespace, policy string }

// ring is one policy's minutes: the one of minute m sits at m % ringMinutes.
type ring struct {
	mu      sync.Mutex
	minutes [ringMinutes]minute
}

type minute struct {
	at               int64 // minutes since the Unix epoch
	denied, admitted sketch
	// changed: recorded into since the last publish.
	changed bool
}

// NewRecorder returns a Recorder whose windows end at now() (time.Now
// when nil).
func NewRecorder(now func() time.Time) *Recorder {
	if now == nil {
		now = time.Now
	}
	return &Recorder{now: now}
}

// Record counts one decision of a policy for key, made at at.
func (r *Recorder) Record(namespace, policy, key string, denied bool, at time.Time) {
	id := policyID{namespace, policy}
	v, ok := r.policies.Load(id)
	if !ok {
		v, _ = r.policies.LoadOrStore(id, &ring{})
	}
	rg := v.(*ring)
	m := at.Unix() / 60
	rg.mu.Lock()
	defer rg.mu.Unlock()
	slot := &rg.minutes[m%int64(ringMinutes)]
	switch {
	case slot.at > m:
		return // older than the ring: out of every window
	case slot.at < m:
		slot.denied.reset()
		slot.admitted.reset()
		slot.at = m
	}
	slot.changed = true
	if denied {
		slot.denied.add(key)
	} else {
		slot.admitted.add(key)
	}
}

// Top answers from this process's sketches alone (the memory store's
// process, which no other shares).
func (r *Recorder) Top(_ context.Context, namespace, policy string, window time.Duration) (*Answer, error) {
	if err := adminapi.CheckTopWindow(window); err != nil {
		return nil, err
	}
	var denied, admitted []Summary
	if v, ok := r.policies.Load(policyID{namespace, policy}); ok {
		rg := v.(*ring)
		first, last := windowMinutes(r.now(), window)
		rg.mu.Lock()
		for i := range rg.minutes {
			if slot := &rg.minutes[i]; slot.at >= first && slot.at <= last {
				denied = append(denied, slot.denied.summary())
				admitted = append(admitted, slot.admitted.summary())
			}
		}
		rg.mu.Unlock()
	}
	return newAnswer(namespace, policy, window, Merge(denied...), Merge(admitted...)), nil
}

// windowMinutes are the first and last minutes of the window that ends
// at now: every minute that overlaps the last window of time, so that
// the window covers it whole, whatever the clock's second (a decision at
// :50 is in a 1-minute window at :02 of the next minute). Counts are kept
// by minute, so the answer also holds up to a minute before the window's
// start: at most window/time.Minute + 1 minutes in all.
func windowMinutes(now time.Time, window time.Duration) (first, last int64) {
	return now.Add(-window).Unix() / 60, now.Unix() / 60
}

// forgetOld drops the rings whose every minute is out of the longest
// window: policies deleted or no longer checked.
func (r *Recorder) forgetOld() {
	first, _ := windowMinutes(r.now(), MaxWindow)
	r.policies.Range(func(k, v any) bool {
		rg := v.(*ring)
		rg.mu.Lock()
		old := true
		for i := range rg.minutes {
			old = old && rg.minutes[i].at < first
		}
		rg.mu.Unlock()
		if old {
			r.policies.CompareAndDelete(k, v)
		}
		return true
	})
}

// Run forgets, once a minute until ctx ends, the policies recorded into
// no more (deleted, or no longer matched) once their minutes are out of
// every window.
func (r *Recorder) Run(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.forgetOld()
		}
	}
}

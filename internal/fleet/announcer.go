package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Refund messages travel on the policy table's channel beside its
// revisions (policytable.Channel, which the check user may publish on), so
// every check process that follows the table hears them on the
// subscription it has. A refund gives units back to buckets; the check
// process that made it forgets its remembered denials of them at once, and
// tells the others with a message naming their keys:
//
//	refunded <origin>\n<key>\n<key>...
//
// or, when it refunded more keys than one message holds, "*" for every
// key. A key marked with a leading "!" was lifted (the admin API ended its
// bucket's ban): its denials are forgotten, the ban's included. <origin>
// names the sending process, which ignores its own messages. A revision
// is a number, so a reader of any version tells the two apart
// (one from before refund messages reads one as a change and reloads the
// table, which is harmless).
const refundPrefix = "refunded "

// Bounds of the refund messages a process sends: at most one per
// RefundInterval (the first at once), naming at most MaxRefundKeyBytes of
// keys; more keys than that in one interval are sent as "*". So a flood
// of refunds costs Redis at most ten small messages a second per process,
// and the other processes at most a cache of denials emptied as often.
const (
	RefundInterval    = 100 * time.Millisecond
	MaxRefundKeyBytes = 16 << 10
	publishTimeout    = time.Second
)

// Forgetter drops remembered denials (check.Checker does).
type Forgetter interface {
	ForgetDenials(keys []string)
	ForgetAllDenials()
	// ForgetLifted drops them with the bans of keys, which were lifted.
	ForgetLifted(keys []string)
}

// liftMark starts a lifted key in a message (keys start with "sluice:").
const liftMark = "!"

// Announcer tells the other check processes of this one's refunds and
// lifts, and hands theirs to a Forgetter (ForgetWith): a Follower delivers
// them, as the Handler of the channel it publishes on.
type Announcer struct {
	client  redis.UniversalClient
	channel string
	origin  string
	log     *slog.Logger
	forget  atomic.Pointer[Forgetter]

	mu      sync.Mutex
	pending map[string]struct{}
	size    int  // bytes of pending keys, one separator each
	all     bool // more than MaxRefundKeyBytes: every key
	wake    chan struct{}

	failing atomic.Bool // a publish failed; logged once until one succeeds
}

// NewAnnouncer returns an Announcer that publishes on channel through
// client once Run runs.
func NewAnnouncer(client redis.UniversalClient, channel string, log *slog.Logger) *Announcer {
	if log == nil {
		log = slog.Default()
	}
	var id [8]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	return &Announcer{client: client, channel: channel, origin: hex.EncodeToString(id[:]), log: log,
		pending: map[string]struct{}{}, wake: make(chan struct{}, 1)}
}

// ForgetWith has f forget the keys other processes refunded.
func (r *Announcer) ForgetWith(f Forgetter) { r.forget.Store(&f) }

// AnnounceRefunds queues keys, refunded by this process, for the next
// message (the checker's observer, check.Announce). It never blocks on Redis.
func (r *Announcer) AnnounceRefunds(keys []string) { r.queue(keys, "") }

// AnnounceLifts queues keys whose bans this process lifted
// (the checker's observer, check.Announce).
func (r *Announcer) AnnounceLifts(keys []string) { r.queue(keys, liftMark) }

// queue adds keys, each with mark, to the next message. Refunded keys
// beyond one message become "*"; lifted keys stay named, as "*" keeps
// bans (lifts are an operator's, a few at a time: those beyond one
// message are dropped, their bans remembered elsewhere until their end).
func (r *Announcer) queue(keys []string, mark string) {
	r.mu.Lock()
	for _, k := range keys {
		k = mark + k
		if r.all && mark == "" {
			break // every refunded key is in the message already
		}
		if _, ok := r.pending[k]; ok {
			continue
		}
		if r.size+len(k)+1 > MaxRefundKeyBytes {
			r.allButLifts()
			if mark == "" || r.size+len(k)+1 > MaxRefundKeyBytes {
				break
			}
		}
		r.pending[k] = struct{}{}
		r.size += len(k) + 1
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// allButLifts makes the next message name every refunded key ("*") and
// the lifted keys queued.
func (r *Announcer) allButLifts() {
	r.all, r.size = true, len("*")
	for k := range r.pending {
		if strings.HasPrefix(k, liftMark) {
			r.size += len(k) + 1
		} else {
			delete(r.pending, k)
		}
	}
}

// Run publishes the queued refunds until ctx ends: at once after a quiet
// spell, then at most once per RefundInterval.
func (r *Announcer) Run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		r.publish(ctx)
		t.Reset(RefundInterval)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// publish sends one message of what is queued, if anything.
func (r *Announcer) publish(ctx context.Context) {
	msg, ok := r.take()
	if !ok {
		return
	}
	callCtx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	if err := r.client.Publish(callCtx, r.channel, msg).Err(); err != nil {
		// Lost: the other processes' denials of these keys last until
		// their remembered retry times, as before refunds were told.
		if !r.failing.Swap(true) {
			r.log.Warn("cannot tell the other check processes of refunds; their cached denials of refunded buckets last until their retry times (the check user needs +publish on "+r.channel+")", "err", err)
		}
		return
	}
	if r.failing.Swap(false) {
		r.log.Info("refunds are told to the other check processes again")
	}
}

// take empties the queue into a message; ok is false when it was empty.
func (r *Announcer) take() (msg string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.all && len(r.pending) == 0 {
		return "", false
	}
	var b strings.Builder
	b.Grow(len(refundPrefix) + len(r.origin) + 2 + r.size)
	b.WriteString(refundPrefix)
	b.WriteString(r.origin)
	if r.all {
		b.WriteString("\n*")
	}
	for k := range r.pending {
		b.WriteByte('\n')
		b.WriteString(k)
	}
	r.all, r.size = false, 0
	clear(r.pending)
	return b.String(), true
}

// isRefundMessage tells a refund message from a revision.
func isRefundMessage(payload string) bool { return strings.HasPrefix(payload, refundPrefix) }

// Message implements Handler: it hands a refund message of another
// process to the Forgetter, and ignores the table's revisions. Keys that
// no check could have (longer than any key) are skipped, and a message
// longer than any process sends forgets every key.
func (r *Announcer) Message(_ context.Context, payload string) {
	f := r.forget.Load()
	if f == nil || !isRefundMessage(payload) {
		return
	}
	head, body, _ := strings.Cut(strings.TrimPrefix(payload, refundPrefix), "\n")
	if head == r.origin {
		return // ours: forgotten when made
	}
	if len(body) > MaxRefundKeyBytes {
		(*f).ForgetAllDenials()
		return
	}
	if rest, ok := strings.CutPrefix(body, "*"); ok && (rest == "" || rest[0] == '\n') {
		(*f).ForgetAllDenials()
		body = rest // the lifted keys, if any
	}
	var keys, lifted []string
	for k := range strings.SplitSeq(body, "\n") {
		if l, ok := strings.CutPrefix(k, liftMark); ok && l != "" && len(l) <= ratelimit.MaxKeyLen {
			lifted = append(lifted, l)
		} else if k != "" && len(k) <= ratelimit.MaxKeyLen {
			keys = append(keys, k)
		}
	}
	if len(keys) > 0 {
		(*f).ForgetDenials(keys)
	}
	if len(lifted) > 0 {
		(*f).ForgetLifted(lifted)
	}
}

// Subscribed implements Handler: it forgets every key, since the refund
// messages sent while the subscription was down are lost.
func (r *Announcer) Subscribed(context.Context) {
	if f := r.forget.Load(); f != nil {
		(*f).ForgetAllDenials()
	}
}

// Poll implements Handler: lost messages are made up for when the
// subscription is made again (Subscribed), there is nothing to poll.
func (r *Announcer) Poll(context.Context) {}

package fleet

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/policytable"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// forgotten records what an Announcer hands over.
type forgotten struct {
	mu     sync.Mutex
	keys   []string
	lifted []string
	all    int
	seen   chan struct{}
}

func newForgotten() *forgotten { return &forgotten{seen: make(chan struct{}, 100)} }

func (f *forgotten) ForgetDenials(keys []string) {
	f.mu.Lock()
	f.keys = append(f.keys, keys...)
	f.mu.Unlock()
	f.seen <- struct{}{}
}

func (f *forgotten) ForgetLifted(keys []string) {
	f.mu.Lock()
	f.lifted = append(f.lifted, keys...)
	f.mu.Unlock()
	f.seen <- struct{}{}
}

func (f *forgotten) ForgetAllDenials() {
	f.mu.Lock()
	f.all++
	f.mu.Unlock()
	f.seen <- struct{}{}
}

func (f *forgotten) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-f.seen:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing forgotten after 10s", what)
	}
}

func (f *forgotten) take() (keys []string, all int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys, all = f.keys, f.all
	f.keys, f.all = nil, 0
	slices.Sort(keys)
	return keys, all
}

// A check process's refunds reach the other processes that follow the
// table, not itself; a (re)subscription forgets everything, since
// messages sent while it was down are lost.
func TestRefundsReachTheOtherProcesses(t *testing.T) {
	client := redistest.Start(t).Client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	process := func() (*Announcer, *forgotten) {
		r, f := NewAnnouncer(client, policytable.Channel, quiet), newForgotten()
		r.ForgetWith(f)
		follower := NewFollower(client, time.Hour, quiet)
		follower.Follow(policytable.Channel, r)
		go follower.Run(ctx)
		go r.Run(ctx)
		f.wait(t, "subscription")
		if keys, all := f.take(); all != 1 || keys != nil {
			t.Fatalf("on subscribing: %d forget-alls and keys %q, want one forget-all", all, keys)
		}
		return r, f
	}
	a, fa := process()
	b, fb := process()

	a.AnnounceRefunds([]string{"sluice:v2:{ns/p/u}:l", "sluice:v2:{ns/p/v}:l"})
	a.AnnounceRefunds([]string{"sluice:v2:{ns/p/u}:l"})
	fb.wait(t, "B")
	keys, all := fb.take()
	for len(keys) < 2 && all == 0 { // two announcements may be two messages
		fb.wait(t, "B")
		more, moreAll := fb.take()
		keys, all = append(keys, more...), all+moreAll
	}
	if slices.Sort(keys); all != 0 || !slices.Equal(slices.Compact(keys), []string{"sluice:v2:{ns/p/u}:l", "sluice:v2:{ns/p/v}:l"}) {
		t.Fatalf("B forgot %q (and all %d times), want A's two keys", keys, all)
	}
	b.AnnounceRefunds([]string{"sluice:v2:{ns/p/w}:l"})
	fa.wait(t, "A")
	// Messages arrive in order: A's own came before B's, and was skipped.
	if keys, all := fa.take(); all != 0 || !slices.Equal(keys, []string{"sluice:v2:{ns/p/w}:l"}) {
		t.Fatalf("A forgot %q (and all %d times), want only B's key", keys, all)
	}

	// Pub/sub connections dropped: messages sent meanwhile are lost, so
	// each process forgets every denial when it has subscribed again.
	if err := client.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*forgotten{fa, fb} {
		f.wait(t, "resubscription")
		if _, all := f.take(); all != 1 {
			t.Fatalf("after the subscription was dropped: %d forget-alls, want 1", all)
		}
	}
}

// A message names at most MaxRefundKeyBytes of keys, each once; more keys
// than that make it a forget-all, and a received message longer than any
// process sends is one. Revisions are no refunds.
func TestRefundMessagesAreBounded(t *testing.T) {
	r := NewAnnouncer(nil, "", nil)
	var keys, others []string // each 60% of a message
	for i := 0; len(strings.Join(keys, "\n")) < MaxRefundKeyBytes*6/10; i++ {
		keys = append(keys, "sluice:v2:{ns/p/"+strconv.Itoa(i)+"}:l")
		others = append(others, "sluice:v2:{ns/q/"+strconv.Itoa(i)+"}:l")
	}
	r.AnnounceRefunds(keys)
	r.AnnounceRefunds(keys)
	msg, ok := r.take()
	if !ok || len(msg) > len(refundPrefix)+len(r.origin)+MaxRefundKeyBytes || strings.Count(msg, "\n") != len(keys) {
		t.Fatalf("a message of %d keys announced twice: %d bytes, %d lines, want each key once", len(keys), len(msg), strings.Count(msg, "\n"))
	}
	if _, ok := r.take(); ok {
		t.Fatal("a second message with nothing queued")
	}
	r.AnnounceRefunds(keys)
	r.AnnounceRefunds(others) // over the bound: every key
	r.AnnounceRefunds(keys)
	if msg, _ := r.take(); msg != refundPrefix+r.origin+"\n*" {
		t.Fatalf("more keys than a message holds: %.80q, want a forget-all", msg)
	}

	recv := NewAnnouncer(nil, "", nil)
	f := newForgotten()
	recv.ForgetWith(f)
	recv.Message(context.Background(), refundPrefix+"other\n"+strings.Repeat("k", MaxRefundKeyBytes+1))
	if _, all := f.take(); all != 1 {
		t.Fatal("an oversized message did not forget every key")
	}
	recv.Message(context.Background(), refundPrefix+"other\n"+strings.Repeat("k", 1000)+"\nsluice:v2:{ns/p/u}:l\n")
	if keys, all := f.take(); all != 0 || !slices.Equal(keys, []string{"sluice:v2:{ns/p/u}:l"}) {
		t.Fatalf("forgot %q (all %d), want the one key a check can have", keys, all)
	}
	if isRefundMessage("1800000000000000") {
		t.Fatal("a revision read as a refund")
	}
	recv.Message(context.Background(), "1800000000000000")
	if keys, all := f.take(); all != 0 || keys != nil {
		t.Fatalf("a revision forgot %q (all %d)", keys, all)
	}
}

// A flood of refunds costs Redis at most one message per RefundInterval
// per process.
func TestRefundsAreCoalesced(t *testing.T) {
	client := redistest.Start(t).Client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := client.Subscribe(ctx, policytable.Channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // subscribed
		t.Fatal(err)
	}
	r := NewAnnouncer(client, policytable.Channel, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go r.Run(ctx)
	start := time.Now()
	for i := range 2000 {
		r.AnnounceRefunds([]string{"sluice:v2:{ns/p/" + strconv.Itoa(i) + "}:l"})
		if i%100 == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	elapsed := time.Since(start)
	time.Sleep(2 * RefundInterval) // the last message
	n := 0
	for {
		recvCtx, done := context.WithTimeout(ctx, RefundInterval)
		m, err := sub.ReceiveMessage(recvCtx)
		done()
		if err != nil {
			break
		}
		if !isRefundMessage(m.Payload) || len(m.Payload) > len(refundPrefix)+len(r.origin)+MaxRefundKeyBytes+2 {
			t.Fatalf("message of %d bytes: %.60q", len(m.Payload), m.Payload)
		}
		n++
	}
	if most := int(elapsed/RefundInterval) + 2; n < 1 || n > most {
		t.Fatalf("2000 refunds over %s sent %d messages, want 1 to %d", elapsed, n, most)
	}
	t.Logf("2000 refunds over %s: %d messages", elapsed.Round(time.Millisecond), n)
}

var _ Forgetter = (*forgotten)(nil)

// A lifted key is named in the message even when the refunds around it
// became a forget-all (which keeps bans), and the receiver forgets it with
// its ban.
func TestLiftsAreNamed(t *testing.T) {
	r := NewAnnouncer(nil, "", nil)
	var keys []string
	for i := 0; len(strings.Join(keys, "\n")) < MaxRefundKeyBytes; i++ {
		keys = append(keys, "sluice:v2:{ns/p/"+strconv.Itoa(i)+"}:l")
	}
	lifted := "sluice:v2:{ns/p/acme}:l"
	r.AnnounceLifts([]string{lifted})
	r.AnnounceRefunds(keys) // over the bound
	msg, ok := r.take()
	if !ok || msg != refundPrefix+r.origin+"\n*\n"+liftMark+lifted {
		t.Fatalf("message %.80q, want a forget-all naming the lifted key", msg)
	}
	recv := NewAnnouncer(nil, "", nil)
	f := newForgotten()
	recv.ForgetWith(f)
	recv.Message(context.Background(), strings.Replace(msg, r.origin, "other", 1))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.all != 1 || !slices.Equal(f.lifted, []string{lifted}) || len(f.keys) != 0 {
		t.Fatalf("forgot all %d times, lifted %q, keys %q", f.all, f.lifted, f.keys)
	}
}

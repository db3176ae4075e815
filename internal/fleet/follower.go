// Package fleet follows the state the processes of a fleet share in Redis
// (the policy table, the overrides of key values, the refunds and lifts
// the check processes tell each other) over one subscription per process,
// with a poll of revisions for the messages pub/sub loses, and announces
// this process's refunds and lifts to the others. It knows pub/sub and
// nothing of what it follows: each piece is a Handler of its channel's
// messages (policytable.Reader, overrides.Tracker, Announcer).
package fleet

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultPoll is how often a Follower polls unless told.
const DefaultPoll = 500 * time.Millisecond

// Handler keeps one piece of the shared state current. Its calls come from
// the Follower's one loop, never two at once, so a slow call delays the
// others: a handler bounds its Redis calls.
type Handler interface {
	// Subscribed: the subscription to the handler's channel was made, or
	// made again after a reconnection; the messages sent meanwhile are lost.
	Subscribed(ctx context.Context)
	// Message is a message on the handler's channel (which may carry other
	// handlers' messages too: each tells its own apart).
	Message(ctx context.Context, payload string)
	// Poll runs first and then every poll interval: the fallback that
	// finds a change whose message was lost (a revision that moved).
	Poll(ctx context.Context)
}

// Follower subscribes to the channels of its handlers on one connection
// and polls them, in one loop.
type Follower struct {
	client   redis.UniversalClient
	poll     time.Duration
	log      *slog.Logger
	channels []string
	handlers map[string][]Handler
}

// NewFollower returns a Follower over client polling every poll (0:
// DefaultPoll).
func NewFollower(client redis.UniversalClient, poll time.Duration, log *slog.Logger) *Follower {
	if poll <= 0 {
		poll = DefaultPoll
	}
	if log == nil {
		log = slog.Default()
	}
	return &Follower{client: client, poll: poll, log: log, handlers: map[string][]Handler{}}
}

// Follow hands h the messages of channel from Run on. Call it before Run.
func (f *Follower) Follow(channel string, h Handler) {
	if !slices.Contains(f.channels, channel) {
		f.channels = append(f.channels, channel)
	}
	f.handlers[channel] = append(f.handlers[channel], h)
}

// Run follows until ctx ends. go-redis subscribes again by itself after a
// reconnection, and each handler hears of it.
func (f *Follower) Run(ctx context.Context) {
	sub := f.client.Subscribe(ctx, f.channels...)
	defer sub.Close()
	msgs := sub.ChannelWithSubscriptions()
	f.pollAll(ctx) // at once, whether or not the subscription is made
	t := time.NewTicker(f.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			f.dispatch(ctx, m)
		case <-t.C:
			f.pollAll(ctx)
		}
	}
}

func (f *Follower) dispatch(ctx context.Context, m any) {
	switch m := m.(type) {
	case *redis.Subscription:
		if m.Kind != "subscribe" {
			return
		}
		f.log.Debug("subscribed", "channel", m.Channel)
		for _, h := range f.handlers[m.Channel] {
			h.Subscribed(ctx)
		}
	case *redis.Message:
		for _, h := range f.handlers[m.Channel] {
			h.Message(ctx, m.Payload)
		}
	}
}

func (f *Follower) pollAll(ctx context.Context) {
	for _, c := range f.channels {
		for _, h := range f.handlers[c] {
			h.Poll(ctx)
		}
	}
}

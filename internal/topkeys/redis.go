package topkeys

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/adminapi"
)

// In Redis, each policy's minute is one hash, a field per check process
// (a random name it draws at start), whose value is that process's two
// summaries of the minute (published, below). The hash expires MaxWindow
// after its minute ends, when no window reaches it any more: a policy
// costs Redis at most (MaxWindow/time.Minute + 1) hashes, each of two
// summaries of at most Capacity key values per process.
//
//	sluice:top:{<namespace>/<policy>}:<minutes since the Unix epoch>
const keyPrefix = "sluice:top:"

// PublishInterval is how often a process publishes the minutes it
// recorded into: how late the merged answer may be.
const PublishInterval = 3 * time.Second

const callTimeout = 2 * time.Second

// Key is the hash of one policy's minute.
func Key(namespace, policy string, minute int64) string {
	return keyPrefix + "{" + namespace + "/" + policy + "}:" + strconv.FormatInt(minute, 10)
}

// published is a process's field of a minute's hash.
type published struct {
	Denied   Summary `json:"d"`
	Admitted Summary `json:"a"`
}

// Publisher sends a Recorder's minutes to Redis, for Readers to merge.
type Publisher struct {
	rec     *Recorder
	client  redis.UniversalClient
	origin  string
	log     *slog.Logger
	failing atomic.Bool // a publish failed; logged once until one succeeds
}

// NewPublisher returns a Publisher of rec through client once Run runs.
func NewPublisher(rec *Recorder, client redis.UniversalClient, log *slog.Logger) *Publisher {
	if log == nil {
		log = slog.Default()
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Publisher{rec: rec, client: client, origin: hex.EncodeToString(b[:]), log: log}
}

// Run publishes every PublishInterval until ctx ends, and once more then
// (the last seconds of a process that stops).
func (p *Publisher) Run(ctx context.Context) {
	t := time.NewTicker(PublishInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = p.Publish(context.WithoutCancel(ctx))
			return
		case <-t.C:
			if err := p.Publish(ctx); err != nil {
				if !p.failing.Swap(true) {
					p.log.Warn("cannot publish the top key values; the admin API's top misses this process's (the check user needs HSET and PEXPIREAT on "+keyPrefix+"*)", "err", err)
				}
			} else if p.failing.Swap(false) {
				p.log.Info("top key values are published again")
			}
		}
	}
}

// change is a minute recorded into since the last publish.
type change struct {
	id     policyID
	ring   *ring
	minute int64
	value  published
}

// Publish sends every minute recorded into since the last Publish. A
// minute that could not be sent is sent the next time.
func (p *Publisher) Publish(ctx context.Context) error {
	var changes []change
	p.rec.policies.Range(func(k, v any) bool {
		rg := v.(*ring)
		rg.mu.Lock()
		for i := range rg.minutes {
			if m := &rg.minutes[i]; m.changed {
				m.changed = false
				changes = append(changes, change{id: k.(policyID), ring: rg, minute: m.at,
					value: published{Denied: m.denied.summary(), Admitted: m.admitted.summary()}})
			}
		}
		rg.mu.Unlock()
		return true
	})
	if len(changes) == 0 {
		return nil
	}
	err := p.send(ctx, changes)
	if err != nil {
		for _, c := range changes {
			c.ring.mu.Lock()
			if m := &c.ring.minutes[c.minute%int64(ringMinutes)]; m.at == c.minute {
				m.changed = true
			}
			c.ring.mu.Unlock()
		}
	}
	return err
}

func (p *Publisher) send(ctx context.Context, changes []change) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	pipe := p.client.Pipeline()
	for _, c := range changes {
		value, err := json.Marshal(c.value)
		if err != nil {
			return err
		}
		key := Key(c.id.namespace, c.id.policy, c.minute)
		pipe.HSet(ctx, key, p.origin, value)
		pipe.PExpireAt(ctx, key, time.Unix((c.minute+1)*60, 0).Add(MaxWindow))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("publish top key values: %w", err)
	}
	return nil
}

// Reader merges the minutes every process published.
type Reader struct {
	client redis.UniversalClient
	now    func() time.Time
}

// NewReader returns a Reader through client whose windows end at now()
// (time.Now when nil).
func NewReader(client redis.UniversalClient, now func() time.Time) *Reader {
	if now == nil {
		now = time.Now
	}
	return &Reader{client: client, now: now}
}

// Top merges every process's sketches of the policy's minutes in window.
// A field that does not decode is left out.
func (r *Reader) Top(ctx context.Context, namespace, policy string, window time.Duration) (*Answer, error) {
	if err := adminapi.CheckTopWindow(window); err != nil {
		return nil, err
	}
	first, last := windowMinutes(r.now(), window)
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	pipe := r.client.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, 0, last-first+1)
	for m := first; m <= last; m++ {
		cmds = append(cmds, pipe.HGetAll(ctx, Key(namespace, policy, m)))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read top key values of %s/%s: %w", namespace, policy, err)
	}
	var denied, admitted []Summary
	for _, cmd := range cmds {
		for _, raw := range cmd.Val() {
			var v published
			if json.Unmarshal([]byte(raw), &v) == nil {
				denied, admitted = append(denied, v.Denied), append(admitted, v.Admitted)
			}
		}
	}
	return newAnswer(namespace, policy, window, Merge(denied...), Merge(admitted...)), nil
}

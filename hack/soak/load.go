package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// load is an open-loop load on the check endpoint.
type load struct {
	url string
	o   options

	sent, allowed, denied, undecided, errors, notSent atomic.Int64
	mu                                                sync.Mutex
	firstErrors                                       []string
}

func (l *load) run(ctx context.Context) {
	// A fixed number of connections (checks beyond them wait for one), so
	// the check process's descriptors and goroutines follow what it holds,
	// not how many checks a slow moment had in flight.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxConnsPerHost: l.o.conns, MaxIdleConns: l.o.conns, MaxIdleConnsPerHost: l.o.conns, IdleConnTimeout: time.Minute, DisableCompression: true,
	}}
	defer client.CloseIdleConnections()
	sem := make(chan struct{}, l.o.maxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for i := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		due := int(time.Since(start).Seconds() * float64(l.o.rate))
		for ; i < due; i++ {
			select {
			case sem <- struct{}{}:
			default:
				l.notSent.Add(1)
				continue
			}
			second := int(time.Since(start).Seconds())
			wg.Go(func() {
				defer func() { <-sem }()
				l.one(client, i, second)
			})
		}
	}
}

// one sends check i: algorithm i%6; one in ten to one of ten hot key
// values, the others to key values that change every second.
func (l *load) one(c *http.Client, i, second int) {
	alg := algorithms[i%len(algorithms)].name
	key := fmt.Sprintf("s%d-%d", second, (i/len(algorithms))%l.o.keysPerSecond)
	if i%10 == 0 {
		key = fmt.Sprintf("hot-%d", (i/10)%10)
	}
	req, err := http.NewRequest(http.MethodGet, l.url, nil)
	if err != nil {
		l.fail(err.Error())
		return
	}
	req.Header.Set("X-Forwarded-Method", "GET")
	req.Header.Set("X-Forwarded-Host", "app.example")
	req.Header.Set("X-Forwarded-Uri", "/"+alg)
	req.Header.Set("X-Key", key)
	l.sent.Add(1)
	resp, err := c.Do(req)
	if err != nil {
		l.fail(err.Error())
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	decided := resp.Header.Get("X-RateLimit-Remaining") != ""
	switch {
	case resp.StatusCode == http.StatusOK && decided:
		l.allowed.Add(1)
	case resp.StatusCode == http.StatusTooManyRequests && decided:
		l.denied.Add(1)
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusTooManyRequests:
		l.undecided.Add(1) // the failure mode answered: Redis did not in time
	default:
		l.fail(fmt.Sprintf("status %d for %s key %s", resp.StatusCode, alg, key))
	}
}

func (l *load) fail(msg string) {
	l.errors.Add(1)
	l.mu.Lock()
	if len(l.firstErrors) < 5 {
		l.firstErrors = append(l.firstErrors, msg)
	}
	l.mu.Unlock()
}

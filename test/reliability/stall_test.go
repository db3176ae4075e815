package reliability

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// stallMonitor watches the machine while a load runs, so that a store
// timeout or a slow answer the test did not cause can be told apart from
// a product fault (on a shared 2-core machine, another process can starve
// this one or Redis). It records three kinds of stall:
//   - a late heartbeat while the process used less than one core: the
//     whole process was off the CPU;
//   - a thread of the process kept waiting for a CPU (cpuWaits): the
//     goroutines and timers of the P it holds wait with it, however well
//     the other threads, and the heartbeat, run;
//   - Redis answering PING late, on a connection of its own.
type stallMonitor struct {
	mu     sync.Mutex
	stalls []stall
	stop   chan struct{}
	wg     sync.WaitGroup
}

// stall is a stretch when the process or Redis did not run.
type stall struct {
	at   time.Time
	took time.Duration
	what string
}

func (s stall) String() string { return fmt.Sprintf("%s %s", s.what, ms(s.took)) }

// cpuTime is the CPU time this process has used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

const (
	heartbeat = time.Millisecond
	// stallThreshold is a gap that can push a healthy Redis call past
	// the 50ms deadline together with the call's own queueing.
	stallThreshold = 20 * time.Millisecond
	// cpuWaitThreshold is a wait of one thread for a CPU that can push a
	// call past its deadline by stallThreshold: the P it holds waits with
	// it, and the rest comes from the other Ps running the load.
	cpuWaitThreshold = stallThreshold / 2
)

// startStallMonitor starts the heartbeat, and the PING to redisAddr
// unless it is empty. PING errors are ignored: the tests take Redis away
// on purpose.
func startStallMonitor(t testing.TB, redisAddr string) *stallMonitor {
	m := &stallMonitor{stop: make(chan struct{})}
	m.wg.Go(func() {
		last, lastCPU := time.Now(), cpuTime()
		for {
			select {
			case <-m.stop:
				return
			case <-time.After(heartbeat):
			}
			now, cpu := time.Now(), cpuTime()
			// A late heartbeat is the machine's doing only if the process
			// was off the CPU meanwhile: it used less than one core.
			// Otherwise the process itself (GC, the code under test) kept
			// the heartbeat waiting, which explains nothing.
			if gap := now.Sub(last) - heartbeat; gap >= stallThreshold && cpu-lastCPU < gap {
				m.add(stall{at: last, took: gap, what: fmt.Sprintf("process ran %s of CPU in", ms(cpu-lastCPU))})
			}
			last, lastCPU = now, cpu
		}
	})
	m.wg.Go(func() {
		var w cpuWaits
		tick := time.NewTicker(cpuWaitInterval)
		defer tick.Stop()
		for {
			select {
			case <-m.stop:
				return
			case now := <-tick.C:
				for _, s := range w.sample(now, cpuWaitThreshold) {
					m.add(s)
				}
			}
		}
	})
	if redisAddr != "" {
		c := redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1, DialTimeout: time.Second,
			ReadTimeout: time.Second, WriteTimeout: time.Second, PoolSize: 1, DisableIdentity: true})
		m.wg.Go(func() {
			defer c.Close()
			for {
				select {
				case <-m.stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				err := c.Ping(ctx).Err()
				cancel()
				if took := time.Since(start); err == nil && took >= stallThreshold {
					m.add(stall{at: start, took: took, what: "Redis answered PING in"})
				}
			}
		})
	}
	t.Cleanup(m.end)
	return m
}

func (m *stallMonitor) add(s stall) {
	m.mu.Lock()
	m.stalls = append(m.stalls, s)
	m.mu.Unlock()
}

func (m *stallMonitor) end() {
	select {
	case <-m.stop:
		return
	default:
	}
	close(m.stop)
	m.wg.Wait()
}

// near returns the stalls that overlap [at-margin, at+margin].
func (m *stallMonitor) near(at time.Time, margin time.Duration) []stall {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []stall
	for _, s := range m.stalls {
		if s.at.Before(at.Add(margin)) && s.at.Add(s.took).After(at.Add(-margin)) {
			out = append(out, s)
		}
	}
	return out
}

// all returns every stall seen.
func (m *stallMonitor) all() []stall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]stall(nil), m.stalls...)
}

package reliability

import (
	"bytes"
	"os"
	"strconv"
	"testing"
	"time"
)

// cpuWaitInterval is how often the monitor reads its threads' waits for a
// CPU: often enough to place a wait of stallThreshold, rarely enough that
// the reads (one file per thread) cost the load nothing that shows.
const cpuWaitInterval = 5 * time.Millisecond

// threadWaits reads, for each thread of this process, the time it has
// spent runnable but not running since it started (the kernel's
// run_delay, the second field of /proc/self/task/TID/schedstat), into
// into (reused). It returns nil where the kernel keeps no such figures.
func threadWaits(into map[int]time.Duration) map[int]time.Duration {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	if into == nil {
		into = make(map[int]time.Duration, len(tasks))
	}
	clear(into)
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/schedstat")
		if err != nil {
			continue // the thread ended meanwhile
		}
		fields := bytes.Fields(b)
		if len(fields) < 2 {
			return nil
		}
		ns, err := strconv.ParseInt(string(fields[1]), 10, 64)
		if err != nil {
			return nil
		}
		into[tid] = time.Duration(ns)
	}
	return into
}

// cpuWaits turns successive readings of threadWaits into stalls: a thread
// that waited for a CPU in consecutive readings, at least a millisecond
// in each, waited once, for the sum of those waits. Go runs goroutines
// on a few threads; while the kernel keeps one of them waiting, the
// goroutines, timers and network polls that thread's P holds wait too,
// even when the process's other threads run, so a late heartbeat (which
// runs on one of them) does not see it.
type cpuWaits struct {
	read      func(into map[int]time.Duration) map[int]time.Duration // nil: threadWaits
	last, cur map[int]time.Duration
	lastAt    time.Time
	open      map[int]*stall // waits still going on, by thread
}

// sample reads the threads' waits at now and returns the waits that ended
// since the last sample and lasted at least shortest.
func (w *cpuWaits) sample(now time.Time, shortest time.Duration) []stall {
	read := w.read
	if read == nil {
		read = threadWaits
	}
	w.cur = read(w.cur)
	if w.cur == nil {
		return nil
	}
	if w.open == nil {
		w.open = map[int]*stall{}
	}
	var ended []stall
	for tid, total := range w.cur {
		prev, seen := w.last[tid]
		if d := total - prev; seen && d >= time.Millisecond {
			s := w.open[tid]
			if s == nil {
				s = &stall{at: w.lastAt, what: "process thread " + strconv.Itoa(tid) + " waited for a CPU"}
				w.open[tid] = s
			}
			s.took += d
			continue
		}
		if s := w.open[tid]; s != nil {
			delete(w.open, tid)
			if s.took >= shortest {
				ended = append(ended, *s)
			}
		}
	}
	for tid, s := range w.open {
		if _, ok := w.cur[tid]; !ok { // the thread is gone
			delete(w.open, tid)
			if s.took >= shortest {
				ended = append(ended, *s)
			}
		}
	}
	w.last, w.cur = w.cur, w.last
	w.lastAt = now
	return ended
}

// TestCPUWaits: a thread's waits in consecutive readings are one wait of
// their sum, from the reading before the first; a reading without (less
// than a millisecond) or without the thread ends it; short waits are
// dropped; this machine's kernel gives the figures the monitor reads.
func TestCPUWaits(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	readings := []map[int]time.Duration{
		{1: 0, 2: 0, 3: 0},
		{1: ms(4), 2: ms(3), 3: ms(8)},
		{1: ms(12), 2: ms(3) + 500*time.Microsecond, 3: ms(15)},
		{1: ms(20), 2: ms(9)},
		{1: ms(20), 2: ms(9)},
	}
	next := 0
	w := cpuWaits{read: func(into map[int]time.Duration) map[int]time.Duration {
		clear(into)
		if into == nil {
			into = map[int]time.Duration{}
		}
		for k, v := range readings[next] {
			into[k] = v
		}
		next++
		return into
	}}
	t0 := time.Unix(1000, 0)
	var got []stall
	for i := range readings {
		got = append(got, w.sample(t0.Add(ms(5*i)), ms(10))...)
	}
	want := map[string]stall{
		"1": {at: t0, took: ms(20)},
		"3": {at: t0, took: ms(15)}, // gone with its wait still on
	}
	if len(got) != len(want) {
		t.Fatalf("stalls %v, want threads 1 and 3 (2's waits are 3ms and 5.5ms apart)", got)
	}
	for _, s := range got {
		tid := s.what[len("process thread ") : len("process thread ")+1]
		if wt, ok := want[tid]; !ok || s.at != wt.at || s.took != wt.took {
			t.Errorf("stall %v at %v, want %v", s, s.at, want[tid])
		}
	}

	if threadWaits(nil) == nil {
		t.Fatal("no /proc/self/task/*/schedstat here: the monitor cannot see a thread waiting for a CPU")
	}
}

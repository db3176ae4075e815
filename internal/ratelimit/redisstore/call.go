package redisstore

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

// call is one request's share of a library call: the entries of one
// group (one Cluster slot) of one Check. Flushers merge the calls queued
// together into few commands (see command), so it holds only its own part
// of the arguments: its keys (per entry its bucket, and a log's key), its
// header and its entries (see lua/sluice.lua). Everything is copied into
// the call's own storage at build time: a caller that gives up may reuse
// its Request while a flusher still sends the call. Keys and arguments are
// passed to go-redis by pointer into that storage, which boxes them
// without allocating.
type call struct {
	keys    []string
	args    []string // the header, then one per entry
	entries int
	// extra is how many reply values follow the entries' (two per entry
	// that reserves or settles).
	extra int
	slot  int    // Cluster slot of the keys; 0 outside Cluster
	node  string // Cluster: the address of the slot's master when built; "" outside Cluster
	job   *job   // the job the call belongs to

	// Set by the flusher before the job is done: the call's segment of
	// the reply (decision, then four per entry), or the error.
	reply []int64
	err   error
	// answered is set by the flusher when the call has its reply or
	// error; a waiter that gave up reads it to name the master that kept
	// the answer.
	answered atomic.Bool

	// Inline storage for calls of up to inlineEntries entries.
	keyBuf  [2 * inlineEntries]string
	argBuf  [1 + inlineEntries]string
	textBuf [24 + 96*inlineEntries]byte
}

const inlineEntries = 4

// build fills the call: its keys (per entry its bucket, then a log's own
// key), its header "n:mode:time" and its entries
// "algorithm:capacity:rate:interval:cost:flags:field" (a calendar quota's
// "8:capacity:w0:w1:w2:w3:cost:flags:field"; a Concurrency entry followed
// by its holder; one that reserves or settles (model.Reserves) ending in
// ":r<µs>" or ":s", then its holder), each bucket's penalty box before its entries (see
// boxOf), formatted into one
// string that the arguments slice. The entries of one bucket are adjacent
// in idx (adjacentBuckets).
func (c *call) build(req *ratelimit.Request, cs *checkState, idx []int, dry bool, now int64, cluster bool) {
	n := callEntries(req, cs.buckets, idx)
	c.keys, c.args, c.entries, c.extra = c.keyBuf[:0], c.argBuf[:0], n, 2*reservingEntries(req, idx)
	buf := c.textBuf[:0]
	if n > inlineEntries {
		c.keys, c.args, buf = make([]string, 0, 2*n), make([]string, 0, 1+n), make([]byte, 0, 24+96*n)
	}
	var ends [1 + inlineEntries]int
	end := ends[:0]
	if n > inlineEntries {
		end = make([]int, 0, 1+n)
	}
	buf = strconv.AppendInt(buf, int64(n), 10)
	buf = append(buf, ':', mode(req, dry, cs.op), ':')
	if now >= 0 {
		buf = strconv.AppendInt(buf, now, 10)
	} else {
		buf = append(buf, '-')
	}
	end = append(end, len(buf))
	for q, i := range idx {
		p, e, field := &cs.params[i], &req.Entries[i], cs.fields[i]
		if box := boxOf(req, cs.buckets, idx, q); box != nil {
			c.keys = append(c.keys, cs.buckets[i])
			buf = appendPenalty(buf, box)
			end = append(end, len(buf))
		}
		c.keys = append(c.keys, cs.buckets[i])
		if p.Alg == ratelimit.SlidingWindowLog {
			c.keys = append(c.keys, e.Key)
		}
		buf = strconv.AppendInt(buf, int64(p.Alg), 10)
		buf = append(buf, ':')
		buf = strconv.AppendInt(buf, p.Capacity, 10)
		buf = append(buf, ':')
		if p.Alg == ratelimit.Calendar {
			buf = appendCalendarWindows(buf, p, now)
		} else {
			buf = strconv.AppendInt(buf, p.Rate, 10)
			buf = append(buf, ':')
			buf = strconv.AppendInt(buf, p.Interval, 10)
			buf = append(buf, ':')
		}
		buf = strconv.AppendInt(buf, e.Cost, 10)
		buf = append(buf, ':', entryFlags(e), ':')
		buf = append(buf, field...)
		reserves := model.Reserves(e, req.Action)
		if reserves {
			buf = appendReserve(buf, e, req.Action)
		}
		end = append(end, len(buf))
		if p.Alg == ratelimit.Concurrency || reserves { // its holder: an argument of its own
			buf = append(buf, e.Holder...)
			end = append(end, len(buf))
		}
	}
	all, from := string(buf), 0
	for _, to := range end {
		c.args = append(c.args, all[from:to])
		from = to
	}
	c.slot = 0
	if cluster {
		c.slot = int(ratelimit.HashSlot(c.keys[0]))
	}
}

// appendCalendarWindows appends a calendar quota's window starts
// "w0:w1:w2:w3:" (ratelimit.CalendarWindows) around now, the call's
// explicit time, or when it has none (now < 0) around this process's
// clock: the library picks among them the window that holds the time it
// decides at, the server's.
func appendCalendarWindows(buf []byte, p *model.Params, now int64) []byte {
	if now < 0 {
		now = time.Now().UnixMicro()
	}
	for _, w := range ratelimit.CalendarWindows(p.Period, p.Zone, now) {
		buf = strconv.AppendInt(buf, w, 10)
		buf = append(buf, ':')
	}
	return buf
}

// appendReserve appends what makes an entry reserving: ":r" and its
// reservation's life in µs, or ":s" in a settlement.
func appendReserve(buf []byte, e *ratelimit.Entry, action ratelimit.Action) []byte {
	if action == ratelimit.Settle {
		return append(buf, ":s"...)
	}
	buf = append(buf, ":r"...)
	return strconv.AppendInt(buf, e.Reserve.Microseconds(), 10)
}

// mode is a call's mode digit: 0 a check, 1 a dry run, 2 a refund, 3 a
// release, 6 a settlement; op when set (4 a reset, 5 a lift).
func mode(req *ratelimit.Request, dry bool, op byte) byte {
	switch {
	case op != 0:
		return op
	case req.Action == ratelimit.Settle:
		return '6'
	case req.Action == ratelimit.Refund:
		return '2'
	case req.Action == ratelimit.Release:
		return '3'
	case dry:
		return '1'
	}
	return '0'
}

// entryFlags is an entry's flags digit: 1 shadow, 2 charge always, 3 both.
func entryFlags(e *ratelimit.Entry) byte {
	f := byte('0')
	if e.Shadow {
		f++
	}
	if e.ChargeAlways {
		f += 2
	}
	return f
}

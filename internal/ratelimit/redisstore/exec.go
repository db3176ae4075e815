package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// command is one library invocation (FCALL or EVALSHA) carrying one or
// more calls: numkeys, every call's keys in order, then every call's
// arguments in the same order. The reply holds per call its ordinal in the
// command (1-based), its decision and four values per entry; deliver checks
// the whole layout before handing any call its segment, so a reply can
// never be attributed to the wrong call.
type command struct {
	calls []*call
	nkeys int
	cmd   noRetryCmd
	err   error
	args  []any // the command's arguments, reused with the command
}

// flushScratch is one flusher's memory, reused batch after batch: the
// calls still wanted, the merged commands, the pipeline and its context.
// go-redis is done with all of it when the pipeline's Exec returns.
type flushScratch struct {
	live     []*call
	cmds     []*command
	commands []*command       // every command made so far, for reuse
	pipeline redis.Pipeliner  // made on first use
	open     map[int]*command // Cluster: per slot, the command being filled
	ctx      batchDeadline
}

// command returns a cleared command, reusing an earlier one.
func (f *flushScratch) command(used int) *command {
	if used == len(f.commands) {
		f.commands = append(f.commands, &command{})
	}
	m := f.commands[used]
	*m = command{calls: m.calls[:0], args: m.args[:0]}
	return m
}

// pipe returns the flusher's pipeline, made on first use.
func (f *flushScratch) pipe(client redis.UniversalClient) redis.Pipeliner {
	if f.pipeline == nil {
		f.pipeline = client.Pipeline()
	}
	return f.pipeline
}

const (
	// maxMerge bounds Options.MaxMerge.
	maxMerge = 1024
	// maxMergeKeys bounds the keys of a merged command; a single call of
	// up to ratelimit.MaxCallEntries entries always goes alone. The library
	// accepts up to 8192.
	maxMergeKeys = 1024
)

// exec runs one batch of one node's calls: those still wanted, merged
// into commands, in one pipeline (see execNode). The flusher waits for it,
// so a node has at most Flushers pipelines in flight, each on a connection
// of its own. In Cluster mode every master has its own batcher (see
// batchers), and a master that is frozen, or dead (go-redis redials
// it with backoff), holds only its own flushers: the healthy masters'
// calls never queue behind it.
func (s *Store) exec(f *flushScratch, batch []*call) {
	live := f.live[:0]
	defer func() { f.live = live; clear(live) }()
	now := time.Now()
	for _, c := range batch {
		if err := c.job.givenUp(now); err != nil { // given up before sending: never sent
			c.err = err
			delivered(c)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	s.execNode(f.ctx.set(live), f.pipe(s.client), s.merge(f, live))
}

// execNode sends one node's commands in one pipeline; then, for the
// commands the server refused because the library was missing, loads it
// and resends them once; then delivers every call its reply or error.
func (s *Store) execNode(ctx context.Context, pipe redis.Pipeliner, cmds []*command) {
	gen := s.gen.Load()
	sent := s.send(ctx, pipe, cmds)
	s.refreshSlotsAfterNetworkErrors(cmds)
	var again []*command
	switchMode := false
	for _, m := range cmds {
		switch {
		case needsLoad(m.err) && s.opts.NoLoad:
			m.err = fmt.Errorf("%w: %w", ErrLibraryMissing, m.err)
		case needsLoad(m.err):
			again = append(again, m)
		case unknownCommand(m.err) && s.opts.Mode == ModeAuto && sent == ModeFunctions:
			again = append(again, m)
			switchMode = true
		}
	}
	if len(again) > 0 {
		if err := s.reload(ctx, gen, switchMode); err != nil {
			for _, m := range again {
				m.err = fmt.Errorf("load library %s: %w (after: %w)", LibraryName, err, m.err)
			}
		} else {
			s.send(ctx, pipe, again)
		}
	}
	for _, m := range cmds {
		if outOfMemory(m.err) {
			// Redis answers: full, not away (the checker answers by the
			// failure mode without counting an outage).
			m.err = fmt.Errorf("%w: %w", ratelimit.ErrCapacity, m.err)
		}
		m.deliver()
	}
	for _, m := range cmds {
		for _, c := range m.calls {
			delivered(c)
		}
	}
}

// refreshSlotsAfterNetworkErrors asks a Cluster client to re-read the slot
// map when a node did not answer. go-redis refreshes it only on MOVED/ASK
// replies (a dead master sends none) or once a minute, so without this,
// calls keep going to a dead master long after its replica took over.
// LazyReload runs at most one refresh at a time.
func (s *Store) refreshSlotsAfterNetworkErrors(cmds []*command) {
	if s.cluster == nil {
		return
	}
	for _, m := range cmds {
		if m.err != nil && serverError(m.err) == "" && !errors.Is(m.err, context.Canceled) {
			s.RefreshNodes()
			return
		}
	}
}

// merge groups the calls into commands, in queue order: on a single
// server any calls, in Cluster only calls of one slot (a command's keys
// must share a slot), up to MaxMerge calls and maxMergeKeys keys each.
func (s *Store) merge(f *flushScratch, live []*call) []*command {
	cmds := f.cmds[:0]
	defer func() { f.cmds = cmds }()
	var cur *command
	open := f.open // Cluster: the command being filled per slot
	if s.cluster != nil {
		if open == nil {
			open = map[int]*command{}
			f.open = open
		}
		defer clear(open)
	}
	for _, c := range live {
		if open != nil {
			cur = open[c.slot]
		}
		if cur == nil || len(cur.calls) == s.opts.MaxMerge || cur.nkeys+len(c.keys) > maxMergeKeys {
			cur = f.command(len(cmds))
			cmds = append(cmds, cur)
			if open != nil {
				open[c.slot] = cur
			}
		}
		cur.calls = append(cur.calls, c)
		cur.nkeys += len(c.keys)
	}
	return cmds
}

// args returns the command's arguments, with the command and function
// (or script) name in front.
func (m *command) fillArgs(name, fn any) []any {
	args := m.args[:0]
	args = append(args, name, fn, m.nkeys)
	for _, c := range m.calls {
		for k := range c.keys {
			args = append(args, &c.keys[k])
		}
	}
	for _, c := range m.calls {
		for k := range c.args {
			args = append(args, &c.args[k])
		}
	}
	m.args = args
	return args
}

// deliver hands every call its segment of the reply, or the command's
// error. The layout is checked in full first: the reply must hold exactly
// one segment per call, each starting with that call's ordinal.
func (m *command) deliver() {
	err := m.err
	var val []int64
	if err == nil {
		val = m.cmd.Val()
		pos := 0
		for i, c := range m.calls {
			if pos >= len(val) || val[pos] != int64(i+1) {
				err = fmt.Errorf("unexpected reply: call %d of %d not found at value %d of %d", i+1, len(m.calls), pos, len(val))
				break
			}
			pos += 2 + replyValues*c.entries + c.extra
		}
		if err == nil && pos != len(val) {
			err = fmt.Errorf("unexpected reply of %d values for %d calls of %d keys", len(val), len(m.calls), m.nkeys)
		}
	}
	pos := 0
	for _, c := range m.calls {
		if err != nil {
			c.err = err
			continue
		}
		end := pos + 2 + replyValues*c.entries + c.extra
		c.reply = val[pos+1 : end : end]
		pos = end
	}
}

// Boxed once: boxing a string variable allocates.
var functionNameArg, scriptSHAArg, fcallArg, evalshaArg any = FunctionName, scriptSHA, "fcall", "evalsha"

// send pipelines the commands in the current mode, records each one's
// error, and returns the mode it used.
func (s *Store) send(ctx context.Context, pipe redis.Pipeliner, cmds []*command) Mode {
	mode := Mode(s.mode.Load())
	name, fn := fcallArg, functionNameArg
	if mode == ModeScripts {
		name, fn = evalshaArg, scriptSHAArg
	}
	calls := 0
	for _, m := range cmds {
		cmd := redis.NewIntSliceCmd(ctx, m.fillArgs(name, fn)...)
		cmd.SetFirstKeyPos(3)
		m.cmd = noRetryCmd{cmd}
		_ = pipe.Process(ctx, m.cmd)
		calls += len(m.calls)
	}
	_, execErr := pipe.Exec(ctx) // per-command errors are read below
	s.pipelines.Add(1)
	s.commands.Add(uint64(len(cmds)))
	s.calls.Add(uint64(calls))
	for _, m := range cmds {
		m.err = m.cmd.Err()
		// go-redis copies a pipeline's failure onto its commands, except a
		// server's refusal of the connection itself (Sentinels refusing
		// AUTH): the command then has neither error nor reply, and the
		// refusal is the reason.
		if m.err == nil && execErr != nil && len(m.cmd.Val()) == 0 {
			m.err = execErr
		}
	}
	return mode
}

// reload loads the library after calls sent under load generation gen
// found it missing (or, with switchMode, found FCALL unknown). Concurrent
// flushers that hit the same miss load once: whoever comes second sees a
// newer generation and just resends, in whatever mode is now in effect.
func (s *Store) reload(ctx context.Context, gen uint64, switchMode bool) error {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	if s.gen.Load() != gen {
		return nil
	}
	if switchMode {
		s.mode.Store(int32(ModeScripts))
	}
	if s.opts.NoLoad {
		s.gen.Add(1) // resend in the new mode; the scripts are another process's to load
		return nil
	}
	return s.loadLocked(ctx)
}

// ErrLibraryMissing: the library is not loaded where the call went, and
// the store was told not to load it (Options.NoLoad).
var ErrLibraryMissing = errors.New("the rate-limit library is not loaded in Redis (another process loads it)")

// EnsureLoaded makes sure the library is loaded on every master, loading
// it only where it is missing (FUNCTION LIST, or SCRIPT EXISTS in script
// mode, first: a periodic call costs one cheap command per master). The
// controller calls it so the first requests after a flush, restart or
// failover do not pay for a load; a Store also loads by itself when a call
// finds the library missing.
func (s *Store) EnsureLoaded(ctx context.Context) error {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	var loaded atomic.Bool
	ensure := func(ctx context.Context, c redis.Cmdable) error {
		present, err := s.presentOn(ctx, c)
		if err != nil || present {
			return err
		}
		loaded.Store(true)
		return s.loadOn(ctx, c)
	}
	var err error
	if s.cluster != nil {
		err = s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return ensure(ctx, c) })
	} else {
		err = ensure(ctx, s.client)
	}
	if loaded.Load() {
		s.gen.Add(1)
		s.loads.Add(1)
	}
	if err != nil {
		return fmt.Errorf("ensure library %s loaded: %w", LibraryName, err)
	}
	return nil
}

// presentOn reports whether one node has the library, in the current mode
// (switching to scripts in ModeAuto when the node has no Functions).
func (s *Store) presentOn(ctx context.Context, c redis.Cmdable) (bool, error) {
	if Mode(s.mode.Load()) == ModeFunctions {
		libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: LibraryName}).Result()
		if err == nil {
			for _, l := range libs {
				if l.Name == LibraryName {
					return true, nil
				}
			}
			return false, nil
		}
		if !unknownCommand(err) || s.opts.Mode != ModeAuto {
			return false, fmt.Errorf("function list: %w", err)
		}
		s.mode.Store(int32(ModeScripts)) // no Functions on this server
	}
	exists, err := c.ScriptExists(ctx, scriptSHA).Result()
	if err != nil {
		return false, fmt.Errorf("script exists: %w", err)
	}
	return len(exists) == 1 && exists[0], nil
}

// Load loads the library on every master now, unconditionally (FUNCTION
// LOAD REPLACE, or SCRIPT LOAD in script mode). EnsureLoaded is the
// cheaper choice for periodic calls.
func (s *Store) Load(ctx context.Context) error {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	if err := s.loadLocked(ctx); err != nil {
		return fmt.Errorf("load library %s: %w", LibraryName, err)
	}
	return nil
}

// loadLocked loads the library on every master; s.loadMu must be held.
func (s *Store) loadLocked(ctx context.Context) error {
	var err error
	if s.cluster != nil {
		err = s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return s.loadOn(ctx, c) })
	} else {
		err = s.loadOn(ctx, s.client)
	}
	if err != nil {
		return err
	}
	s.gen.Add(1)
	s.loads.Add(1)
	return nil
}

// loadOn loads the library on one node.
func (s *Store) loadOn(ctx context.Context, c redis.Cmdable) error {
	if Mode(s.mode.Load()) == ModeFunctions {
		err := c.FunctionLoadReplace(ctx, functionCode).Err()
		if err == nil {
			return nil
		}
		if !unknownCommand(err) || s.opts.Mode != ModeAuto {
			return fmt.Errorf("function load %s: %w", LibraryName, err)
		}
		s.mode.Store(int32(ModeScripts)) // no Functions on this server
	}
	sha, err := c.ScriptLoad(ctx, scriptCode).Result()
	if err != nil {
		return fmt.Errorf("script load: %w", err)
	}
	if sha != scriptSHA {
		return fmt.Errorf("script load: server named the script %s, want %s", sha, scriptSHA)
	}
	return nil
}

package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// exec runs one batch: a pipeline of every call of the jobs still wanted,
// then, for the calls the server refused because the library was missing,
// a load and one resend.
func (s *Store) exec(batch []*job) {
	live := make([]*job, 0, len(batch))
	for _, j := range batch {
		if err := j.ctx.Err(); err != nil { // given up before sending: never sent
			for _, c := range j.calls {
				c.err = err
			}
			close(j.done)
			continue
		}
		live = append(live, j)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	var calls []*call
	for _, j := range live {
		calls = append(calls, j.calls...)
	}

	gen := s.gen.Load()
	sent := s.send(ctx, calls)
	var again []*call
	switchMode := false
	for _, c := range calls {
		switch {
		case needsLoad(c.err):
			again = append(again, c)
		case unknownCommand(c.err) && s.opts.Mode == ModeAuto && sent == ModeFunctions:
			again = append(again, c)
			switchMode = true
		}
	}
	if len(again) > 0 {
		if err := s.reload(ctx, gen, switchMode); err != nil {
			for _, c := range again {
				c.err = fmt.Errorf("load library %s: %w (after: %w)", LibraryName, err, c.err)
			}
		} else {
			s.send(ctx, again)
		}
	}
	for _, j := range live {
		close(j.done)
	}
}

// Boxed once: boxing a string variable allocates.
var functionNameArg, scriptSHAArg any = FunctionName, scriptSHA

// send pipelines calls in the current mode, records each one's error, and
// returns the mode it used.
func (s *Store) send(ctx context.Context, calls []*call) Mode {
	mode := Mode(s.mode.Load())
	name, fn := any("fcall"), functionNameArg
	if mode == ModeScripts {
		name, fn = "evalsha", scriptSHAArg
	}
	pipe := s.client.Pipeline()
	for _, c := range calls {
		c.args[0], c.args[1] = name, fn
		c.cmd = noRetryCmd{redis.NewCmd(ctx, c.args...)}
		_ = pipe.Process(ctx, c.cmd)
	}
	_, _ = pipe.Exec(ctx) // per-command errors are read below
	s.pipelines.Add(1)
	s.calls.Add(uint64(len(calls)))
	for _, c := range calls {
		c.err = c.cmd.Err()
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
	return s.loadLocked(ctx)
}

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

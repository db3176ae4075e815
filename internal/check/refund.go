package check

// A refund gives units back to a bucket, so a denial remembered of it may
// no longer be what the store would answer. The check process that made
// the refund forgets its denials of the bucket's keys at once; the others
// learn of it through Options.AnnounceRefunds and forget them when told
// (ForgetDenials).

// denialKeeper is a store that remembers denials of its own (the lease
// store keeps the last failed take of a bucket).
type denialKeeper interface {
	ForgetDenials(keys []string)
	ForgetAllDenials()
}

// refunder is a store that makes refunds of its own, in the background
// (the lease store gives back unused units): f is told their keys.
type refunder interface {
	NotifyRefunds(f func(keys []string))
}

// refunded forgets the denials of keys, which this process refunded, and
// announces them to the other processes.
func (c *Checker) refunded(keys []string) {
	c.ForgetDenials(keys)
	if c.announce != nil {
		c.announce(keys)
	}
}

// ForgetDenials drops the remembered denials of keys (their buckets were
// refunded, here or by another process): the next check of them goes to
// the store. Bans are kept: no refund lifts one (see denyCache.forget).
func (c *Checker) ForgetDenials(keys []string) {
	if c.denials != nil {
		c.denials.forget(keys, c.now())
	}
	if c.keeper != nil {
		c.keeper.ForgetDenials(keys)
	}
}

// ForgetAllDenials is ForgetDenials for every key: another process
// refunded more buckets than it could name.
func (c *Checker) ForgetAllDenials() {
	if c.denials != nil {
		c.denials.forgetAll(c.now())
	}
	if c.keeper != nil {
		c.keeper.ForgetAllDenials()
	}
}

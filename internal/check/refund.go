package check

// A refund gives units back to a bucket, so a denial remembered of it may
// no longer be what the store would answer. The check process that made
// the refund forgets its denials of the bucket's keys at once; the others
// learn of it through the observer (Announce) and forget them when told
// (ForgetDenials).

// refunded forgets the denials of keys, which this process refunded, and
// tells the observer.
func (c *Checker) refunded(keys []string) {
	c.ForgetDenials(keys)
	if c.observer != nil {
		c.observer.Refunded(keys)
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

// ForgetLifted drops the remembered denials of keys, bans included: their
// bucket's ban was lifted, here or by another process.
func (c *Checker) ForgetLifted(keys []string) {
	if c.denials != nil {
		c.denials.drop(keys, c.now())
	}
	if c.keeper != nil {
		c.keeper.ForgetDenials(keys)
	}
}

package check

import "time"

// KeyRecorder is told how each policy decided each key value
// (topkeys.Recorder, which finds the key values decided most).
type KeyRecorder interface {
	Record(namespace, policy, key string, denied bool, at time.Time)
}

// recordKeys tells the recorder, once per policy whose limits decided
// out, its key value and whether it denied: any of its limits denied (a
// shadow policy's too: what it would deny), or it admitted the request
// allowed. A policy whose limits allowed a request another denied admitted
// nothing (nothing was consumed) and denied nothing, and is not told; nor
// is one that decided nothing (a missing key, the failure mode, another
// policy's cached denial answered first), nor one of a part that gave its
// cost back, read for the answer only (Part.Refunded).
func (c *Checker) recordKeys(out *Outcome) {
	now := c.now()
	for i := range out.Policies {
		if pr := &out.Policies[i]; pr.decided && !pr.givesBack && (pr.denied || out.Allowed) {
			c.keys.Record(pr.Policy.Namespace, pr.Policy.Name, pr.KeyValue, pr.denied, now)
		}
	}
}

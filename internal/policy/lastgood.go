package policy

import "sync"

// LastGood holds the last good version of each policy, by key K: the
// controller keys Kubernetes policies by namespace/name, local mode by the
// policy named in its files. The rule it keeps is the one every source of
// policies follows: a version that does not compile never replaces one that
// did, so a person's mistake leaves the previous version in force until it
// is fixed or the policy is deleted. Safe for concurrent use.
type LastGood[K comparable, V any] struct {
	mu       sync.Mutex
	versions map[K]V
}

// NewLastGood returns an empty LastGood.
func NewLastGood[K comparable, V any]() *LastGood[K, V] {
	return &LastGood[K, V]{versions: map[K]V{}}
}

// InForce is the version of k that is in force once version v, compiled
// with error err, is known: v itself when it compiled, otherwise the last
// good version, or none (ok false) when k never had one. It records
// nothing: Accept does, once v is in force.
func (l *LastGood[K, V]) InForce(k K, v V, err error) (inForce V, ok bool) {
	if err == nil {
		return v, true
	}
	return l.Get(k)
}

// Accept records v, a version that compiled and is in force, as k's last
// good version.
func (l *LastGood[K, V]) Accept(k K, v V) {
	l.mu.Lock()
	l.versions[k] = v
	l.mu.Unlock()
}

// Get returns k's last good version.
func (l *LastGood[K, V]) Get(k K) (V, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.versions[k]
	return v, ok
}

// Forget drops k's last good version: the policy is gone.
func (l *LastGood[K, V]) Forget(k K) {
	l.mu.Lock()
	delete(l.versions, k)
	l.mu.Unlock()
}

// Retain forgets every policy for which keep is false.
func (l *LastGood[K, V]) Retain(keep func(K) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.versions {
		if !keep(k) {
			delete(l.versions, k)
		}
	}
}
